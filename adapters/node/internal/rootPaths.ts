/**
 * A policy's filesystem root patterns as a subprocess backend finds them on the host: the literal part of a glob, and
 * a denied path through the real path of its nearest existing part. Shared by the bubblewrap and Deno backends.
 */
import * as fs from "node:fs"
import * as path from "node:path"

/** The longest literal prefix of a root pattern: its components before the first holding a glob character. */
export const literalPrefix = (pattern: string): string => {
  const parts = path.resolve(pattern).split("/")
  const glob = parts.findIndex((part) => /[*?[\]{}]/.test(part))
  return glob === -1 ? parts.join("/") || "/" : parts.slice(0, glob).join("/") || "/"
}

/** A denied path as the backend resolves it: its literal prefix, through the real path of its nearest existing part. */
export const resolveDenied = (pattern: string): string => {
  const prefix = literalPrefix(pattern)
  for (let at = prefix;; at = path.dirname(at)) {
    if (fs.existsSync(at)) return path.join(fs.realpathSync(at), path.relative(at, prefix))
    if (path.dirname(at) === at) return prefix
  }
}
