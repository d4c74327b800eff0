/**
 * The bubblewrap sandbox a child runner starts in: what of the host it binds (read-only: the node runtime and the
 * libraries it loads, the module graph of the runner and the action, the read roots; writable: the write roots) and
 * the flags around it. Nothing else of the host is visible: a private /tmp, a fresh /proc and /dev, no network (its
 * own empty network namespace), no capabilities, a new session, no user namespaces inside, killed with its parent,
 * the action as uid and gid 65534, under the seccomp filter of `seccomp.ts` when the launch hands it over. bwrap itself starts with an empty environment.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { filesFd } from "./childWire.ts"

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

/** What one sandbox is made of. */
export interface Sandbox {
  readonly runtime: ReadonlyArray<Bind>
  readonly read: ReadonlyArray<string>
  readonly write: ReadonlyArray<string>
  /** Whether the launch hands bwrap a seccomp program on its first extra descriptor (`filesFd`). */
  readonly seccomp?: boolean
  /** The first of two pipes bwrap reports its child's pid on (`--info-fd`) and holds on (`--block-fd`) before it runs anything. */
  readonly hold?: number
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

/** bwrap's argv for a sandbox running `command`: the flags, the read-only binds, then the writable ones over them. */
export const argv = (sandbox: Sandbox, command: ReadonlyArray<string>): ReadonlyArray<string> => [
  ...flags,
  ...(sandbox.seccomp === true ? ["--add-seccomp-fd", String(filesFd)] : []),
  ...(sandbox.hold === undefined ? [] : ["--info-fd", String(sandbox.hold), "--block-fd", String(sandbox.hold + 1)]),
  ...sandbox.runtime.flatMap((bind) => ["--ro-bind", bind.source, bind.target]),
  ...sandbox.read.flatMap((root) => ["--ro-bind", root, root]),
  ...sandbox.write.flatMap((root) => ["--bind", root, root]),
  "--chdir",
  "/tmp",
  "--",
  ...command
]
