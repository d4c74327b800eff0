/**
 * PathResolver on the host filesystem: the longest existing prefix of a path is resolved with
 * realpath (following every symbolic link), the missing rest is kept as written. Runtimes: Node
 * (and Deno's node: layer).
 */
import { Effect, Layer } from "effect"
import { realpathSync } from "node:fs"
import { posix } from "node:path"
import { PathResolver } from "../../core/policy/PolicyPath.ts"

const resolve = (path: string): string => {
  const rest: Array<string> = []
  let prefix = path
  for (;;) {
    try {
      return posix.join(realpathSync(prefix), ...rest)
    } catch {
      if (prefix === "/") return path
      rest.unshift(posix.basename(prefix))
      prefix = posix.dirname(prefix)
    }
  }
}

/** Resolve symbolic links on the local filesystem. */
export const layer: Layer.Layer<PathResolver> = Layer.succeed(PathResolver, {
  resolve: (path) => Effect.sync(() => resolve(path))
})
