/**
 * The two-stage launch that gives a sandbox the network its call's policy grants, and nothing more. The sandbox keeps
 * its own network namespace (loopback only, nothing else); bwrap reports its child's pid on `--info-fd` and holds on
 * `--block-fd` before it runs anything. Meanwhile the parent (root, outside the sandbox) starts
 * `nsenter --net=/proc/PID/ns/net setpriv ... socat TCP-LISTEN:3128,bind=127.0.0.1,fork UNIX-CONNECT:<proxy>`: a bridge in
 * the sandbox's network namespace only, joining a loopback port there to the destination proxy's unix socket on the
 * host. Once socat says it listens, the block is released and the action starts under the seccomp filter (which
 * refuses it any unix socket), with `HTTP_PROXY` and `HTTPS_PROXY` on its request pipe: the bridge's port is its
 * only way out, and the proxy decides where that leads.
 *
 * This design rather than an unfiltered bridge inside the sandbox: bwrap installs its filter on everything it runs,
 * so a bridge inside would need a second seccomp helper to filter only the action; from outside, the bridge is never
 * reachable by the action's code except through its one port, never shares its pid or mount namespace, and nothing
 * in the sandbox runs before it listens.
 *
 * Its privilege: `nsenter` runs as root only to `setns` into the sandbox's network namespace (which needs
 * CAP_SYS_ADMIN over it); it execs `setpriv`, which drops to uid and gid 65534 with no supplementary groups, empties
 * every capability set (effective, permitted, inheritable, ambient and the bounding set) and sets no_new_privs before
 * it execs socat. What socat keeps is what uid 65534 can do without capabilities: listen on the unprivileged port 3128
 * in that namespace, and connect to the proxy's socket, whose directory (mode 0700) and socket are given to that uid
 * for the call. Where the call has a cgroup pair, the launch joins it before nsenter runs, so socat and each child it
 * forks count against the call's memory and task limits and are killed with the group when the call ends; the
 * launch's scope kills its process group too, and `setpriv --pdeathsig KILL` ends it should the parent die first.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import type { Duplex } from "node:stream"
import * as Cgroup from "./cgroup.ts"
import * as HostPaths from "./hostPaths.ts"

/** The loopback port the bridge listens on inside the sandbox. */
export const bridgePort = 3128

/** The uid and gid the bridge runs as once it is in the sandbox's network namespace (nobody's). */
export const bridgeUid = 65534

/** The variables that point the action at the bridge (given on its request pipe, never bwrap's environment). */
export const environment: Readonly<Record<string, string>> = Object.fromEntries(
  ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"].map((name) => [name, `http://127.0.0.1:${bridgePort}`])
)

/** The tools the bridge needs on the host, resolved on the PATH; undefined when one is missing. */
export const tools = (pathVariable: string | undefined) => {
  const found = ["nsenter", "setpriv", "socat"].map((tool) => HostPaths.which(tool, pathVariable))
  return found.every((tool) => tool !== undefined)
    ? { nsenter: found[0]!, setpriv: found[1]!, socat: found[2]! }
    : undefined
}

/** The bridge's tools. */
export type Tools = NonNullable<ReturnType<typeof tools>>

const killGroup = (child: ChildProcess) => {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
  } catch {
    // Gone already.
  }
}

/** Bridges started in one scope, killed (their whole process groups) when it closes. */
export const bridges: Effect.Effect<Set<ChildProcess>, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => new Set<ChildProcess>()),
  (started) => Effect.sync(() => started.forEach(killGroup))
)

// The sandbox's child pid, from bwrap's info descriptor (a JSON object it writes in parts).
const childPid = (info: Duplex) =>
  Effect.async<number, string>((resume) => {
    let text = ""
    const onData = (chunk: Buffer) => {
      text += chunk.toString("utf-8")
      const found = /"child-pid":\s*(\d+)\D/.exec(text)
      if (found !== null) {
        info.removeListener("data", onData)
        info.resume()
        resume(Effect.succeed(Number(found[1])))
      }
    }
    info.on("data", onData)
    info.once("close", () => resume(Effect.fail("bwrap exited before it reported its child")))
  })

/** The bridge's command: into the namespace of `pid` as root, then unprivileged, then socat. */
export const command = (tools: Tools, proxy: string, pid: number): ReadonlyArray<string> => [
  tools.nsenter,
  `--net=/proc/${pid}/ns/net`,
  "--",
  tools.setpriv,
  `--reuid=${bridgeUid}`,
  `--regid=${bridgeUid}`,
  "--clear-groups",
  "--inh-caps=-all",
  "--bounding-set=-all",
  "--no-new-privs",
  "--pdeathsig",
  "KILL",
  "--",
  tools.socat,
  "-d",
  "-d",
  `TCP-LISTEN:${bridgePort},bind=127.0.0.1,reuseaddr,fork`,
  `UNIX-CONNECT:${proxy}`
]

// Start the bridge in the namespace of `pid` (in `group`, when the call has one), and wait until it listens.
const start = (tools: Tools, proxy: string, pid: number, started: Set<ChildProcess>, group?: Cgroup.Group) =>
  Effect.async<void, string>((resume) => {
    try {
      // The unprivileged bridge may reach the proxy's socket; nothing else of the host is given to it.
      fs.chownSync(path.dirname(proxy), bridgeUid, bridgeUid)
      fs.chownSync(proxy, bridgeUid, bridgeUid)
    } catch (error) {
      return resume(Effect.fail(`the proxy's socket could not be given to the bridge: ${(error as Error).message}`))
    }
    const [file, ...args] = command(tools, proxy, pid)
    const launched = group === undefined ? { command: file!, args } : Cgroup.wrap(group, file!, args)
    const child = spawn(launched.command, launched.args, {
      env: {},
      stdio: ["ignore", "ignore", "pipe"],
      detached: true
    })
    started.add(child)
    let log = ""
    const onData = (chunk: Buffer) => {
      log += chunk.toString("utf-8")
      if (/listening on AF=2 127\.0\.0\.1:/.test(log)) {
        child.stderr!.removeListener("data", onData)
        // Its log of each connection is read and dropped, so it never blocks on a full pipe.
        child.stderr!.resume()
        resume(Effect.void)
      }
    }
    child.stderr!.on("data", onData)
    child.once("error", (error) => resume(Effect.fail(`the bridge could not start: ${error.message}`)))
    child.once("exit", (code) => resume(Effect.fail(`the bridge exited (${code}): ${log.trim().slice(-200)}`)))
  }).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "the bridge did not listen in time" }))

/**
 * The launch's setup: read the sandbox's pid on the info pipe, bridge its namespace's loopback port to `proxy` (the
 * bridge in the call's cgroup pair `group`, where it has one), then release bwrap's block; the bridge is added to
 * `started`.
 */
export const setup = (tools: Tools, proxy: string, started: Set<ChildProcess>, group?: Cgroup.Group) => ({
  pipes: 2,
  run: ([info, block]: ReadonlyArray<Duplex>) =>
    Effect.gen(function*() {
      const pid = yield* childPid(info!).pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "bwrap did not report its child in time" })
      )
      yield* start(tools, proxy, pid, started, group)
      yield* Effect.sync(() => block!.end("x"))
    })
})
