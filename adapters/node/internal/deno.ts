/**
 * The `deno run` a child runner starts in: the permission flags a call's grants imply and nothing more (read: the
 * module graph's packages and the read and write roots; write: the write roots; net: the declared hosts; env: the
 * variables the action declares it reads), every prompt off, no remote module, no npm download, no configuration
 * file, the cache a directory of its own, and an environment holding only deno's own settings. Deno checks a path
 * as given, not where a symlink in it leads, so the roots are checked for symlinks that leave them (making a symlink
 * needs every path granted, which a run never has). A write root's shell rc files and `.git` are denied writing, and
 * a call's policy narrows the roots as bubblewrap's binds are narrowed: a glob root by its longest literal prefix,
 * its denials as `--deny-read` and `--deny-write`.
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as HostPaths from "./hostPaths.ts"
import { literalPrefix, resolveDenied } from "./rootPaths.ts"

/** What one run may do beyond computing: paths to read and write, hosts to reach, variables to read. */
export interface Grants {
  readonly read: ReadonlyArray<string>
  readonly write: ReadonlyArray<string>
  readonly net: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  /** Paths inside those that may not be read (deno's `--deny-read` wins over its `--allow-read`). */
  readonly denyRead?: ReadonlyArray<string>
  /** Paths inside those that may not be written, besides the write roots' protected names. */
  readonly denyWrite?: ReadonlyArray<string>
}

/** The flags every run starts with, before its grants. */
export const flags: ReadonlyArray<string> = [
  "run",
  "--no-prompt",
  "--no-config",
  "--no-lock",
  "--node-modules-dir=manual",
  "--no-remote",
  "--cached-only",
  "--deny-run",
  "--deny-ffi",
  "--deny-sys"
]

const list = (flag: string, values: ReadonlyArray<string>) => values.length === 0 ? [] : [`${flag}=${values.join(",")}`]

/**
 * deno's argv for a run of `entry` under `grants`: the flags, then one allow-list per kind of grant given, with the
 * denied paths and the write roots' protected names (shell rc files, `.git`) denied.
 */
export const argv = (grants: Grants, entry: string): ReadonlyArray<string> => [
  ...flags,
  ...list("--allow-read", grants.read),
  ...list("--deny-read", grants.denyRead ?? []),
  ...list("--allow-write", grants.write),
  ...list("--deny-write", [...grants.write.flatMap(HostPaths.protectedPaths), ...(grants.denyWrite ?? [])]),
  ...list("--allow-net", grants.net),
  ...list("--allow-env", grants.env),
  entry
]

/** The environment deno runs in: its cache directory and its own quiet settings, nothing of the host's. */
export const environment = (denoDir: string): Readonly<Record<string, string>> => ({
  DENO_DIR: denoDir,
  DENO_NO_UPDATE_CHECK: "1",
  NO_COLOR: "1"
})

/** The deno executable: the one given, else the npm package's binary beside writ, else `deno` on the PATH. */
export const resolve = (given: string | undefined, searchPath: string | undefined): string | undefined => {
  if (given !== undefined) return HostPaths.which(given, searchPath)
  try {
    const bundled = path.join(path.dirname(createRequire(import.meta.url).resolve("deno/package.json")), "deno")
    if (fs.existsSync(bundled)) return bundled
  } catch {
    // not installed beside writ
  }
  return HostPaths.which("deno", searchPath)
}

/** A root as granted: its real path (so a root that is itself a link grants where it leads); throws when missing. */
export const root = (given: string): string => {
  const real = fs.realpathSync(given)
  if (real.includes(",")) throw new Error(`a root with a comma cannot be granted to deno: ${real}`)
  return real
}

const inside = (target: string, root: string) =>
  target === root || target.startsWith(root.endsWith("/") ? root : `${root}/`)

const within = (target: string, roots: ReadonlyArray<string>) => roots.some((root) => inside(target, root))

/** A policy's root as deno is granted it: the real path of its longest literal prefix; throws when that is missing. */
export const policyRoot = (pattern: string): string => root(literalPrefix(pattern))

/**
 * A path a policy denies, as deno is told it: its literal prefix, through the real path of its nearest existing part.
 * Throws when it holds a comma, which deno's list cannot say.
 */
export const deniedPath = (pattern: string): string => {
  const at = resolveDenied(pattern)
  if (at.includes(",")) throw new Error(`a denied path with a comma cannot be told to deno: ${at}`)
  return at
}

/** The roots `granted` (a policy's) narrowed to `bounds` (the backend's): each granted root inside a bound, each bound inside a granted root. */
export const narrow = (granted: ReadonlyArray<string>, bounds: ReadonlyArray<string>): ReadonlyArray<string> => [
  ...new Set(
    granted.flatMap((grant) =>
      bounds.flatMap((bound) => inside(grant, bound) ? [grant] : inside(bound, grant) ? [bound] : [])
    )
  )
]

/** The most entries the symlink check walks in the roots of one call. */
export const scanLimit = 10_000

/**
 * Why the roots cannot be granted as they are: a symlink in a read root that leads outside every root, one in a
 * write root that leads outside the write roots (or nowhere, where a write would create its target), one that leads
 * into a denied path (or to a directory holding one), or more entries than the check walks. Undefined: no symlink leaves them.
 */
export const escaping = (
  read: ReadonlyArray<string>,
  write: ReadonlyArray<string>,
  denied: ReadonlyArray<string> = []
): string | undefined => {
  let seen = 0
  const walk = (dir: string, allowed: ReadonlyArray<string>): string | undefined => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (++seen > scanLimit) return `the roots hold more than ${scanLimit} entries, too many to check for symlinks`
      const at = path.join(dir, entry.name)
      if (entry.isSymbolicLink()) {
        let target: string
        try {
          target = fs.realpathSync(at)
        } catch {
          return `${at} is a symlink that leads nowhere`
        }
        if (!within(target, allowed)) return `${at} is a symlink that leads out of its roots`
        if (denied.some((deny) => inside(target, deny) || inside(deny, target))) {
          return `${at} is a symlink that leads into a denied path`
        }
      } else if (entry.isDirectory()) {
        const found = walk(at, allowed)
        if (found !== undefined) return found
      }
    }
    return undefined
  }
  for (const dir of write) {
    const found = walk(dir, write)
    if (found !== undefined) return found
  }
  for (const dir of read) {
    const found = walk(dir, [...read, ...write])
    if (found !== undefined) return found
  }
  return undefined
}
