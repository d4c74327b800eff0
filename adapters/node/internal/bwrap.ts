/**
 * The bubblewrap sandbox a child runner starts in: what of the host it binds (read-only: the node runtime and the
 * libraries it loads, the module graph of the runner and the action, the read roots; writable: the write roots, with
 * their shell rc files and `.git` hooks and config kept read-only, and denied paths inside any root over-mounted
 * empty), each by an O_PATH descriptor opened here, and the flags around it. Nothing else of the host is visible: a
 * private /tmp, a fresh /proc and /dev, its own network namespace (empty, unless a bridge joins it while bwrap holds),
 * no capabilities, a new session, no user namespaces inside, killed with its parent, the action as uid and gid 65534,
 * under the seccomp filter of `seccomp.ts` when the launch hands it over. bwrap itself starts with an empty
 * environment.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { filesFd } from "./childWire.ts"
import * as HostPaths from "./hostPaths.ts"
import { literalPrefix } from "./rootPaths.ts"

/** The uid and gid the action runs as inside the sandbox. */
export const sandboxUid = 65534

/** A bind: a host path and where it appears in the sandbox. */
export interface Bind {
  readonly source: string
  readonly target: string
}

/**
 * The node binary and every shared library it loads, as `ldd` resolves them: each library's real file bound where
 * the loader asks for it. Throws when the runtime cannot be resolved.
 */
export const runtimeBinds = (node: string): ReadonlyArray<Bind> => {
  const real = fs.realpathSync(node)
  const binds: Array<Bind> = [{ source: real, target: real }]
  if (path.resolve(node) !== real) binds.push({ source: real, target: path.resolve(node) })
  const listed = execFileSync("ldd", [real], { env: {}, encoding: "utf-8", timeout: 10_000 })
  for (const line of listed.split("\n")) {
    const found = /^\s*(?:\S+ => )?(\/\S+) \(0x[0-9a-f]+\)\s*$/.exec(line)
    if (found !== null) binds.push({ source: fs.realpathSync(found[1]!), target: found[1]! })
  }
  return binds
}

/** What one sandbox is made of: host paths as the backend resolved them (real paths, each checked again at its open). */
export interface Sandbox {
  readonly runtime: ReadonlyArray<Bind>
  readonly read: ReadonlyArray<Bind>
  readonly write: ReadonlyArray<Bind>
  /** Paths the action may neither read nor write: each inside a root over-mounted by an empty read-only tmpfs. */
  readonly deny?: ReadonlyArray<string>
  /** Paths inside the write roots the action may read and not write: each bound read-only over itself. */
  readonly readOnly?: ReadonlyArray<string>
  /** Whether the launch hands bwrap a seccomp program on its first extra descriptor (`filesFd`). */
  readonly seccomp?: boolean
  /**
   * Whether bwrap reports its child's pid (`--info-fd`) and holds (`--block-fd`) before it runs anything, on the two
   * pipes that follow the launch's descriptors.
   */
  readonly hold?: boolean
}

/** The flags every sandbox starts with, before its binds. */
export const flags: ReadonlyArray<string> = [
  "--unshare-all",
  "--unshare-user",
  "--disable-userns",
  "--die-with-parent",
  "--new-session",
  "--cap-drop",
  "ALL",
  "--uid",
  String(sandboxUid),
  "--gid",
  String(sandboxUid),
  "--hostname",
  "writ-sandbox",
  "--proc",
  "/proc",
  "--dev",
  "/dev",
  "--tmpfs",
  "/tmp"
]

/** Linux's O_PATH (x86_64 and arm64), which Node does not export: a descriptor naming an inode, opening nothing. */
const O_PATH = 0o10000000

/**
 * A root as the backend resolves it: its literal prefix's real path, bound there and, where a symlink led to it, at
 * the prefix too. Throws when it is missing or is the host's `/` (binding the whole host would contain nothing).
 */
export const resolveRoot = (pattern: string): ReadonlyArray<Bind> => {
  const prefix = literalPrefix(pattern)
  const real = fs.realpathSync(prefix)
  if (real === "/") throw new Error(`the root ${pattern} would bind the whole host`)
  return prefix === real
    ? [{ source: real, target: real }]
    : [{ source: real, target: real }, { source: real, target: prefix }]
}

/**
 * An O_PATH descriptor of `real` that is exactly what the backend resolved: opened with O_NOFOLLOW, not a symlink,
 * and still at that real path (so a component swapped for a symlink since is refused, not followed). Throws otherwise.
 */
export const openResolved = (real: string): number => {
  const fd = fs.openSync(real, O_PATH | fs.constants.O_NOFOLLOW)
  try {
    if (fs.fstatSync(fd).isSymbolicLink()) throw new Error(`${real} is now a symlink`)
    if (fs.readlinkSync(`/proc/self/fd/${fd}`) !== real) throw new Error(`${real} moved since it was resolved`)
    return fd
  } catch (error) {
    fs.closeSync(fd)
    throw error
  }
}

/** One mount of a prepared sandbox. */
type Mount =
  | { readonly _tag: "bind"; readonly source: string; readonly target: string; readonly writable: boolean }
  | { readonly _tag: "empty"; readonly target: string }

const within = (inner: string, outer: string) => inner === outer || inner.startsWith(outer === "/" ? "/" : outer + "/")

/** Where `source` (inside a bound directory) appears in the sandbox: under each target that directory is bound at. */
const targetsOf = (source: string, binds: ReadonlyArray<Bind>) =>
  binds.flatMap((bind) =>
    within(source, bind.source) ? [path.join(bind.target, path.relative(bind.source, source))] : []
  )

/**
 * The protected names at the top of a write root, each kept read-only over the writable bind, and pre-created empty
 * on the host where missing (a mount needs a point to land on; an empty rc file or `.git` directory changes nothing
 * for a shell or for git). `.git` when missing is an empty read-only tmpfs (no repository can be made there); when
 * a directory, it is bound onto itself (a mount point cannot be renamed away) with `hooks` and `config` read-only.
 * Throws when one is a symlink: what it points at could be writable, and following it is what the bind avoids.
 */
const protectedMounts = (root: string, binds: ReadonlyArray<Bind>): ReadonlyArray<Mount> => {
  const at = (name: string) => path.join(root, name)
  const kind = (name: string) => {
    try {
      const stat = fs.lstatSync(at(name))
      if (stat.isSymbolicLink()) throw new Error(`${at(name)} is a symlink in a write root`)
      return stat.isDirectory() ? "directory" : "file"
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return "missing"
      throw error
    }
  }
  const bind = (name: string, writable: boolean): ReadonlyArray<Mount> =>
    targetsOf(at(name), binds).map((target) => ({ _tag: "bind", source: at(name), target, writable }))
  const file = (name: string) => {
    if (kind(name) === "missing") fs.closeSync(fs.openSync(at(name), fs.constants.O_CREAT | fs.constants.O_EXCL, 0o644))
    return bind(name, false)
  }
  const mounts = HostPaths.protectedFiles.flatMap(file)
  switch (kind(".git")) {
    case "missing":
      fs.mkdirSync(at(".git"))
      return [...mounts, ...targetsOf(at(".git"), binds).map((target) => ({ _tag: "empty" as const, target }))]
    case "file":
      return [...mounts, ...file(".git")]
    case "directory":
      if (kind(".git/hooks") === "missing") fs.mkdirSync(at(".git/hooks"))
      return [...mounts, ...bind(".git", true), ...bind(".git/hooks", false), ...file(".git/config")]
  }
}

/**
 * A denied path inside an allowed root: a directory as an empty read-only tmpfs, a file as /dev/null; pre-created (a
 * directory) where missing in a write root, so nothing can be made there.
 */
const deniedMounts = (sandbox: Sandbox, denied: string): ReadonlyArray<Mount> => {
  const binds = [...sandbox.read, ...sandbox.write]
  if (!fs.existsSync(denied)) {
    if (!sandbox.write.some((root) => within(denied, root.source))) return []
    fs.mkdirSync(denied, { recursive: true })
  }
  // A file is over-mounted by /dev/null: it reads empty, and what is written there goes nowhere.
  const file = !fs.statSync(denied).isDirectory()
  return targetsOf(denied, binds).map((target) =>
    file ? { _tag: "bind", source: "/dev/null", target, writable: false } : { _tag: "empty", target }
  )
}

/** A path kept read-only inside a write root: bound over itself read-only, pre-created (a directory) where missing. */
const readOnlyMounts = (sandbox: Sandbox, kept: string): ReadonlyArray<Mount> => {
  if (!sandbox.write.some((root) => within(kept, root.source))) return []
  if (!fs.existsSync(kept)) fs.mkdirSync(kept, { recursive: true })
  return targetsOf(kept, sandbox.write).map((target) => ({ _tag: "bind", source: kept, target, writable: false }))
}

/**
 * The binds of `granted` no wider than `bounds`: each granted root inside a bound, and each bound inside a granted
 * root (a directory's real paths compared).
 */
export const narrow = (granted: ReadonlyArray<Bind>, bounds: ReadonlyArray<Bind>): ReadonlyArray<Bind> => {
  const kept = new Map<string, Bind>()
  for (const grant of granted) {
    for (const bound of bounds) {
      const bind = within(grant.source, bound.source) ? grant : within(bound.source, grant.source) ? bound : undefined
      if (bind !== undefined) kept.set(`${bind.source}\0${bind.target}`, bind)
    }
  }
  return [...kept.values()]
}

/** A sandbox ready to launch: the descriptors bwrap inherits after the seccomp program's, and bwrap's argv. */
export interface Prepared {
  readonly descriptors: ReadonlyArray<number>
  readonly argv: ReadonlyArray<string>
}

/**
 * Open every bind of `sandbox` by descriptor and build bwrap's argv for `command`: the flags, the read-only binds,
 * the writable ones over them, then the protected names and denied paths over those. Every host path is bound by an
 * O_PATH descriptor (`--ro-bind-fd`, `--bind-fd`) opened here, so a path swapped after this cannot redirect a bind.
 * Throws (closing what it opened) when a path is not what was resolved; the caller closes the descriptors.
 */
export const prepare = (sandbox: Sandbox, command: ReadonlyArray<string>): Prepared => {
  const deny = sandbox.deny ?? []
  // A root inside a denied path is not bound at all.
  const allowed = (root: Bind) => !deny.some((denied) => within(root.source, denied))
  const mounts: Array<Mount> = [
    ...sandbox.runtime.map((bind) => ({ _tag: "bind" as const, ...bind, writable: false })),
    ...sandbox.read.filter(allowed).map((bind) => ({ _tag: "bind" as const, ...bind, writable: false })),
    ...sandbox.write.filter(allowed).map((bind) => ({ _tag: "bind" as const, ...bind, writable: true })),
    ...[...new Set(sandbox.write.filter(allowed).map((bind) => bind.source))].flatMap((root) =>
      protectedMounts(root, sandbox.write)
    ),
    ...(sandbox.readOnly ?? []).flatMap((kept) => readOnlyMounts(sandbox, kept)),
    ...deny.flatMap((denied) => deniedMounts(sandbox, denied))
  ]
  const descriptors: Array<number> = []
  const first = filesFd + (sandbox.seccomp === true ? 1 : 0)
  try {
    const binds = mounts.flatMap((mount) => {
      if (mount._tag === "empty") return ["--tmpfs", mount.target, "--remount-ro", mount.target]
      descriptors.push(openResolved(mount.source))
      return [mount.writable ? "--bind-fd" : "--ro-bind-fd", String(first + descriptors.length - 1), mount.target]
    })
    const hold = first + descriptors.length
    return {
      descriptors,
      argv: [
        ...flags,
        ...(sandbox.seccomp === true ? ["--add-seccomp-fd", String(filesFd)] : []),
        ...(sandbox.hold === true ? ["--info-fd", String(hold), "--block-fd", String(hold + 1)] : []),
        ...binds,
        "--chdir",
        "/tmp",
        "--",
        ...command
      ]
    }
  } catch (error) {
    for (const fd of descriptors) fs.closeSync(fd)
    throw error
  }
}

/** Close a prepared sandbox's descriptors. */
export const close = (prepared: Prepared): void => {
  for (const fd of prepared.descriptors) fs.closeSync(fd)
}
