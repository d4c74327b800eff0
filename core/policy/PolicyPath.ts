/**
 * Paths as policy sees them: normalised (no `.`, `..` or repeated slashes) and checked against
 * roots by whole segments, so `/work` never contains `/workshop`.
 */
import { Context } from "effect"
import type { Effect } from "effect"

/** Normalise an absolute POSIX path; undefined when it is relative or climbs above `/`. */
export const normalise = (path: string): string | undefined => {
  if (!path.startsWith("/")) return undefined
  const segments: Array<string> = []
  for (const segment of path.split("/")) {
    if (segment === "" || segment === ".") continue
    if (segment === "..") {
      if (segments.length === 0) return undefined
      segments.pop()
    } else segments.push(segment)
  }
  return "/" + segments.join("/")
}

/** Whether a normalised path lies at or under a normalised root. */
export const within = (path: string, root: string): boolean =>
  root === "/" || path === root || path.startsWith(root + "/")

/** Resolves symbolic links before a path is matched; without one in context (edge hosts) paths are matched as written. */
export class PathResolver extends Context.Tag("writ/PathResolver")<PathResolver, PathResolver.Service>() {}

/** The PathResolver service. */
export declare namespace PathResolver {
  /** Resolve the symlinks along a normalised path (missing tail segments kept as they are). */
  export interface Service {
    readonly resolve: (path: string) => Effect.Effect<string>
  }
}
