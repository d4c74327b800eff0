/**
 * The bubblewrap effect backend: each invocation runs in a fresh child runner inside a bubblewrap sandbox that sees,
 * of the host, only the node runtime, the module graph, the read roots (read-only) and the write roots (their shell
 * rc files and `.git` read-only), each bound by a descriptor opened per call, and, under a governed call whose policy
 * has filesystem rules, only the policy's roots within those (its denials over-mounted); it has its own network
 * namespace (no network; or, where the call's policy grants destinations, a bridge to a destination proxy outside it:
 * internal/sandboxNetwork.ts and internal/destinationProxy.ts), an empty environment (the variables an action declares
 * it reads come on the request's pipe), a private /tmp and /proc, and no capabilities; a seccomp filter refuses unix
 * and vsock sockets, namespace creation and io_uring; and, where the v1 cgroup controllers can be written, a per-call
 * cgroup bounds its memory and tasks.
 * Runtimes: Node on Linux, with `bwrap` installed (and `nsenter`, `setpriv` and `socat` for a granted network).
 *
 * Its report claims only what the containment suite (test/conformance/BubblewrapContainment.test.ts) verifies, and
 * only once a trial sandbox with the same flags has run: filesystem, network (none; loopback and named destinations
 * once a second trial reached a granted host listener through its bridge and proxy, and no other), environment and
 * secrets (those an action declares with `exposure: inject` are resolved from the SecretStore in context and come on
 * the request's pipe; no other reaches the sandbox, so a store's file must lie outside the read roots), unix sockets,
 * and memory and process count when the trial ran in its cgroup. Subprocesses (a child may spawn inside its sandbox)
 * are unsupported.
 */
import { Duration, Effect, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import * as net from "node:net"
import * as os from "node:os"
import { ActionExecutionBackend, BackendMechanism } from "../../core/action/ActionExecutionBackend.ts"
import type { ActionBackendError } from "../../core/action/ActionExecutionBackend.ts"
import { issue } from "../../core/action/internal/backendFailure.ts"
import { SecretStore } from "../../core/action/SecretStore.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"
import type { FilesystemGrant } from "../../core/policy/FilesystemGrant.ts"
import * as NetworkGrant from "../../core/policy/NetworkGrant.ts"
import * as Bwrap from "./internal/bwrap.ts"
import * as Report from "./internal/capabilityReport.ts"
import * as Cgroup from "./internal/cgroup.ts"
import * as DestinationProxy from "./internal/destinationProxy.ts"
import * as HostPaths from "./internal/hostPaths.ts"
import * as RootPaths from "./internal/rootPaths.ts"
import * as SandboxNetwork from "./internal/sandboxNetwork.ts"
import * as Seccomp from "./internal/seccomp.ts"
import * as SubprocessBackend from "./internal/subprocessBackend.ts"

/** How the sandbox is set up. */
export interface Options {
  /** Host paths the action may read (absolute; a glob binds its longest literal prefix, which must exist). */
  readonly read?: ReadonlyArray<string>
  /** Host paths the action may write (likewise); their shell rc files and `.git` hooks and config stay read-only. */
  readonly write?: ReadonlyArray<string>
  /** Host paths inside those the action may neither read nor write (a glob: its longest literal prefix). */
  readonly deny?: ReadonlyArray<string>
  /** More module directories to bind read-only, beyond the writ package and the action's own package. */
  readonly modules?: ReadonlyArray<string>
  /** The bwrap executable (default: `bwrap` on the PATH). */
  readonly bwrap?: string
  /** The node binary the runner runs on (default: this process's). */
  readonly node?: string
  /** Node flags for the runner (a loader, when actions are TypeScript sources). */
  readonly execArgv?: ReadonlyArray<string>
  /** The wall clock of one invocation, after which its sandbox is killed (default: 30 seconds). */
  readonly wallClock?: Duration.DurationInput
  /** The most bytes of a child's stdout and stderr kept (default: 64 KiB). */
  readonly outputBytes?: number
  /** Let the action create unix sockets (its seccomp filter then allows `socket(AF_UNIX)`; default: refused). */
  readonly unixSockets?: boolean
  /** The memory one call's sandbox may use, in bytes (default: 512 MiB). */
  readonly memoryBytes?: number
  /** The tasks (processes and threads, bwrap's included) one call's sandbox may have at once (default: 64). */
  readonly processes?: number
  /** Where the v1 cgroup controllers are mounted (default: `/sys/fs/cgroup`). */
  readonly cgroupRoot?: string
}

/** The backend's identity. */
export const ref = ActionBackendRef.make({ id: "bubblewrap", version: "1" })

/** The capabilities a passing probe claims: exactly those the containment suite attacks. */
export const claimed: ReadonlyArray<string> = [
  "writ.filesystem.read_roots@1",
  "writ.filesystem.write_roots@1",
  "writ.network.none@1",
  "writ.network.loopback@1",
  "writ.network.destinations@1",
  "writ.environment.allowlist@1",
  "writ.secrets.by_reference@1",
  "writ.wall_clock@1",
  "writ.unix_sockets@1",
  "writ.memory@1",
  "writ.process_count@1"
]

/** The capabilities this backend knows of and does not enforce (yet). */
export const unclaimed: ReadonlyArray<string> = ["writ.subprocess.spawn@1"]

const limited = ["writ.memory@1", "writ.process_count@1"]
const proxied = ["writ.network.loopback@1", "writ.network.destinations@1"]

// What this instance claims: its unix sockets only when refused, its limits only when its trial ran in a cgroup, the
// network a policy grants only when its trial reached a granted listener through the bridge and proxy, and no other.
const claimsOf = (unixSockets: boolean, cgroups: boolean, bridged: boolean): Report.Claims => {
  const dropped = [
    ...(unixSockets ? ["writ.unix_sockets@1"] : []),
    ...(cgroups ? [] : limited),
    ...(bridged ? [] : proxied)
  ]
  return {
    ref,
    by: "os",
    claimed: claimed.filter((name) => !dropped.includes(name)),
    unclaimed: [...unclaimed, ...dropped]
  }
}

// The trial: the runtime in the sandbox, as the unprivileged uid, seeing no environment and no host root, and (unless
// granted) refused a unix socket by the filter.
const trial = (unixSockets: boolean) =>
  `const fs = require("fs");
const ok = process.getuid() === ${Bwrap.sandboxUid} && fs.readFileSync("/proc/1/environ", "utf-8") === "" &&
  !fs.existsSync("/etc/passwd") && !fs.existsSync("/root");
const done = (filtered) => process.stdout.write(ok && filtered ? "writ-probe:ok" : "writ-probe:exposed");
${
    unixSockets
      ? "done(true)"
      : `require("net").connect({ path: "/writ-probe" }).on("error", (e) => done(e.code === "EAFNOSUPPORT"))`
  }`

// The bridge's trial: from the sandbox, a loopback listener of the host is unreachable directly, reached through the
// bridge and proxy where granted (it answers "reached"), and refused (403) where not.
const bridgeTrial = (granted: number, ungranted: number) =>
  `const net = require("net");
const direct = new Promise((done) => {
  const socket = net.connect({ host: "127.0.0.1", port: ${granted} });
  socket.on("connect", () => (socket.destroy(), done(false)));
  socket.on("error", () => done(true));
});
const via = (target) => new Promise((done) => {
  const socket = net.connect({ host: "127.0.0.1", port: ${SandboxNetwork.bridgePort} });
  let seen = "", sent = false;
  socket.setTimeout(8000, () => (socket.destroy(), done("timeout")));
  socket.on("connect", () => socket.write("CONNECT " + target + " HTTP/1.1\\r\\n\\r\\n"));
  socket.on("data", (chunk) => {
    seen += chunk;
    if (!sent && seen.startsWith("HTTP/1.1 200 ") && seen.includes("\\r\\n\\r\\n")) (sent = true, socket.write("ping\\n"));
    if (seen.includes("writ-reached")) (socket.destroy(), done("reached"));
  });
  socket.on("error", () => done("error"));
  socket.on("close", () => done(seen.split("\\r\\n")[0]));
});
Promise.all([direct, via("127.0.0.1:${granted}"), via("127.0.0.1:${ungranted}")]).then(([refused, granted, other]) =>
  process.stdout.write(refused && granted === "reached" && other.startsWith("HTTP/1.1 403 ") ? "writ-probe:ok" :
    "writ-probe:exposed"));`

// Two loopback listeners on the host for the bridge's trial: one answers, the other counts what reached it.
const trialListeners = Effect.acquireRelease(
  Effect.async<
    { readonly servers: ReadonlyArray<net.Server>; readonly ports: ReadonlyArray<number>; readonly seen: () => number }
  >((resume) => {
    let reached = 0
    const answering = net.createServer((socket) => socket.once("data", () => socket.end("writ-reached\n")))
    const counting = net.createServer((socket) => (reached++, socket.destroy()))
    answering.listen(0, "127.0.0.1", () =>
      counting.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          servers: [answering, counting],
          ports: [answering, counting].map((server) => (server.address() as net.AddressInfo).port),
          seen: () => reached
        }))))
  }),
  ({ servers }) => Effect.sync(() => servers.forEach((server) => server.close()))
)

/**
 * A bubblewrap backend; its probe runs a trial sandbox with the backend's own flags once, and is cached. It injects
 * secrets from the SecretStore in context, when there is one.
 */
export const make = (options: Options = {}): Effect.Effect<ActionExecutionBackend.Service> =>
  Effect.gen(function*() {
    const bwrap = HostPaths.which(options.bwrap ?? "bwrap", process.env.PATH)
    const node = options.node ?? process.execPath
    const execArgv = options.execArgv ?? []
    // The roots resolved once, here: each call's bind opens exactly these real paths, or refuses.
    const roots = yield* Effect.either(Effect.try(() => ({
      read: (options.read ?? []).flatMap(Bwrap.resolveRoot),
      write: (options.write ?? []).flatMap(Bwrap.resolveRoot),
      deny: (options.deny ?? []).map(RootPaths.resolveDenied)
    })))
    const secrets = Option.getOrUndefined(yield* Effect.serviceOption(SecretStore))
    const unixSockets = options.unixSockets ?? false
    const bridgeTools = SandboxNetwork.tools(process.env.PATH)
    const filter = Seccomp.program({ unixSockets })
    const cgroupRoot = options.cgroupRoot ?? "/sys/fs/cgroup"
    const limits: Cgroup.Limits = {
      memoryBytes: options.memoryBytes ?? 512 * 1024 * 1024,
      processes: options.processes ?? 64
    }
    const group = (name: string) =>
      Effect.acquireRelease(Effect.try(() => Cgroup.create(cgroupRoot, name, limits)), Cgroup.remove)
    const runtime = yield* Effect.either(Effect.try(() => Bwrap.runtimeBinds(node)))
    const base = yield* Effect.either(
      Effect.try(() => HostPaths.moduleRoots([SubprocessBackend.runnerEntry().href, ...(options.modules ?? [])]))
    )
    // A call's roots: the backend's own, or, where its policy has filesystem rules, the policy's allowed roots
    // narrowed by the backend's (never wider than either), the policy's denied ones over-mounted.
    const rootsOf = (grant: FilesystemGrant | undefined) => {
      const own = roots._tag === "Right" ? roots.right : { read: [], write: [], deny: [] }
      if (grant === undefined) return { ...own, readOnly: [] }
      const resolved = (pattern: string) => {
        try {
          return Bwrap.resolveRoot(pattern)
        } catch {
          return [] // a root that does not exist grants nothing to bind
        }
      }
      return {
        read: Bwrap.narrow(grant.read.flatMap(resolved), [...own.read, ...own.write]),
        write: Bwrap.narrow(grant.write.flatMap(resolved), own.write),
        deny: [...own.deny, ...grant.denyRead.map(RootPaths.resolveDenied)],
        readOnly: grant.denyWrite.map(RootPaths.resolveDenied)
      }
    }
    const sandbox = (modules: ReadonlyArray<string>, grant?: FilesystemGrant): Bwrap.Sandbox => {
      const own = rootsOf(grant)
      const graph = [...new Set([...(base._tag === "Right" ? base.right : []), ...modules])]
      return {
        runtime: runtime._tag === "Right" ? runtime.right : [],
        ...own,
        read: [...graph.map((dir) => ({ source: dir, target: dir })), ...own.read],
        seccomp: true
      }
    }
    // A prepared sandbox for the scope: its descriptors closed once the scope (the call) ends.
    const prepared = (
      modules: ReadonlyArray<string>,
      command: ReadonlyArray<string>,
      grant?: FilesystemGrant,
      hold = false
    ) =>
      Effect.acquireRelease(
        Effect.try(() => Bwrap.prepare({ ...sandbox(modules, grant), hold }, command)),
        (ready) => Effect.sync(() => Bwrap.close(ready))
      )

    // The trial runs as a call would: under the filter and, where one can be made, in a cgroup of its own, after a sweep
    // of the groups a writ that died mid-call left behind. The bridge's trial then runs a second sandbox with the same
    // flags, holding it until the bridge to a trial proxy listens.
    const bridgeTried = (charged: boolean) =>
      Effect.scoped(Effect.gen(function*() {
        if (bridgeTools === undefined) return false
        const listeners = yield* trialListeners
        const [granted, ungranted] = listeners.ports as [number, number]
        const grant = { gates: [{ gate_id: "probe", allow: [`127.0.0.1:${granted}`], deny: [] }] }
        const proxy = yield* Effect.either(DestinationProxy.listen(grant))
        if (proxy._tag === "Left") return false
        const started = yield* SandboxNetwork.bridges
        const ready = yield* Effect.either(
          prepared([], [node, ...execArgv, "-e", bridgeTrial(granted, ungranted)], undefined, true)
        )
        if (ready._tag === "Left") return false
        // Where the first trial ran in a cgroup, this one does too, its bridge joining the same pair, as a call's would.
        const made = charged ? yield* Effect.either(group(`probe-${randomBytes(8).toString("hex")}`)) : undefined
        if (made?._tag === "Left") return false
        const launched = made === undefined
          ? { command: bwrap!, args: ready.right.argv }
          : Cgroup.wrap(made.right, bwrap!, ready.right.argv)
        const tried = yield* Report.run(
          launched.command,
          launched.args,
          {},
          [filter, ...ready.right.descriptors],
          SandboxNetwork.setup(bridgeTools, proxy.right.path, started, made?.right)
        )
        return tried.ok && tried.stdout === "writ-probe:ok" && listeners.seen() === 0
      }))
    const state = yield* Effect.cached(Effect.gen(function*() {
      const failed = (why: string) => ({
        report: Report.unsupported(claimsOf(unixSockets, false, false), why),
        cgroups: false,
        bridged: false
      })
      if (bwrap === undefined) return failed("probe failed: no bwrap executable")
      if (runtime._tag === "Left") return failed(`probe failed: the runtime ${node} could not be resolved`)
      if (base._tag === "Left") return failed("probe failed: the runner's module graph could not be resolved")
      if (roots._tag === "Left") return failed(`probe failed: a root could not be resolved (${roots.left.message})`)
      const version = /^bubblewrap (\S+)$/.exec((yield* Report.run(bwrap, ["--version"])).stdout.trim())?.[1] ??
        "unknown"
      const { charged, tried } = yield* Effect.scoped(Effect.gen(function*() {
        yield* Effect.sync(() => Cgroup.sweep(cgroupRoot))
        const ready = yield* Effect.either(prepared([], [node, ...execArgv, "-e", trial(unixSockets)]))
        if (ready._tag === "Left") return { charged: false, tried: { ok: false, stdout: "" } }
        const { argv: args, descriptors } = ready.right
        const made = yield* Effect.either(group(`probe-${randomBytes(8).toString("hex")}`))
        if (made._tag === "Left") {
          return { charged: false, tried: yield* Report.run(bwrap, args, {}, [filter, ...descriptors]) }
        }
        const wrapped = Cgroup.wrap(made.right, bwrap, args)
        const tried = yield* Report.run(wrapped.command, wrapped.args, {}, [filter, ...descriptors])
        return { charged: Cgroup.peakMemory(made.right) > 0, tried }
      }))
      const platform = `${os.type()} ${os.release()}`
      const identity = BackendMechanism.make({ name: "bubblewrap", version, platform })
      const mechanism = `bubblewrap ${version} on ${platform}`
      if (!tried.ok || tried.stdout !== "writ-probe:ok") {
        return {
          report: Report.unsupported(
            claimsOf(unixSockets, false, false),
            `probe failed: the trial sandbox (${mechanism}) did not run contained`,
            identity
          ),
          cgroups: false,
          bridged: false
        }
      }
      const bridged = yield* bridgeTried(charged)
      const report = Report.verified(
        claimsOf(unixSockets, charged, bridged),
        ["filesystem", "network", "environment", "secrets"],
        `probe: a trial sandbox (${mechanism}) ran as uid ${Bwrap.sandboxUid} with no environment, ` +
          `no host root and its seccomp filter${
            charged ? ", in a cgroup of its own" : " (no cgroup could be made)"
          }; ` +
          (bridged
            ? "a second reached a granted loopback listener only through its bridge and proxy; "
            : "no bridge to a proxy could be run, so it has no network; ") +
          "the claims are those the containment suite verifies",
        identity
      )
      return { report, cgroups: charged, bridged }
    }))
    const probe = Effect.map(state, ({ report }) => report)

    return SubprocessBackend.make({
      ref,
      probe,
      launch: (command, definition, invocation) =>
        Effect.gen(function*() {
          if (bwrap === undefined || runtime._tag === "Left" || base._tag === "Left" || roots._tag === "Left") {
            return yield* SubprocessBackend.failed("spawn_failed", "bubblewrap, the runtime or a root is unavailable")
          }
          const { bridged, cgroups } = yield* state
          // A call its policy grants a destination gets a proxy of its own and a bridge to it; any other, no network.
          const grant = invocation.network ?? NetworkGrant.none
          const networked = bridged && bridgeTools !== undefined && NetworkGrant.grantsAny(grant)
          const modules = yield* Effect.try({
            try: () => HostPaths.moduleRoots([definition.module!]),
            catch: () =>
              SubprocessBackend.issued("module_unavailable", "the action's module graph could not be resolved")
          })
          const { argv: args, descriptors } = yield* Effect.mapError(
            prepared(modules, command, invocation.filesystem, networked),
            (error) =>
              SubprocessBackend.issued(
                "request_refused",
                `a root is not as the backend resolved it, so nothing was bound: ${(error.error as Error).message}`
              )
          )
          const files = [filter, ...descriptors]
          // The call's cgroup pair, made first: the bridge, where there is one, joins it as the sandbox does.
          const made = cgroups
            ? yield* Effect.mapError(
              group(`call-${randomBytes(8).toString("hex")}`),
              () => SubprocessBackend.issued("spawn_failed", "the call's cgroup could not be created")
            )
            : undefined
          const network = networked
            ? {
              environment: SandboxNetwork.environment,
              setup: SandboxNetwork.setup(
                bridgeTools,
                (yield* Effect.mapError(
                  DestinationProxy.listen(grant),
                  () => SubprocessBackend.issued("spawn_failed", "the call's destination proxy could not listen")
                )).path,
                yield* SandboxNetwork.bridges,
                made
              )
            }
            : {}
          if (made === undefined) return { command: bwrap, args, env: {}, files, ...network }
          return {
            ...Cgroup.wrap(made, bwrap, args),
            env: {},
            files,
            ...network,
            exceeded: (failure: ActionBackendError) =>
              Cgroup.oomKills(made) === 0 ? undefined : issue({
                outcome: failure.outcome,
                reason: "memory_exceeded",
                started: failure.started,
                detail: `the sandbox passed its memory limit of ${limits.memoryBytes} bytes and was killed`
              })
          }
        }),
      node,
      execArgv,
      wallClock: Duration.decode(options.wallClock ?? "30 seconds"),
      outputBytes: options.outputBytes ?? 64 * 1024,
      hostEnvironment: process.env,
      secrets
    })
  })

/** The bubblewrap backend as a Layer. */
export const layer = (options: Options = {}): Layer.Layer<ActionExecutionBackend> =>
  Layer.effect(ActionExecutionBackend, make(options))

/** The bubblewrap backend's layer, under the name a backend selection uses. */
export const layerBubblewrap = layer
