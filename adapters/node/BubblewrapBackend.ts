/**
 * The bubblewrap effect backend: each invocation runs in a fresh child runner inside a bubblewrap sandbox that sees,
 * of the host, only the node runtime, the module graph, the read roots (read-only) and the write roots; it has no
 * network, an empty environment (the variables an action declares it reads come on the request's pipe), a private
 * /tmp and /proc, and no capabilities. Runtime: Node on Linux, with `bwrap` installed.
 *
 * Its report claims only what the containment suite (test/conformance/BubblewrapContainment.test.ts) verifies, and
 * only once a trial sandbox with the same flags has run: filesystem, network, environment and secrets (those an action
 * declares with `exposure: inject` are resolved from the SecretStore in context and come on the request's pipe; no
 * other reaches the sandbox, so a store's file must lie outside the read roots). Subprocesses (a child may spawn
 * inside its sandbox) are unsupported.
 */
import { Duration, Effect, Layer, Option } from "effect"
import * as os from "node:os"
import { ActionExecutionBackend, BackendMechanism } from "../../core/action/ActionExecutionBackend.ts"
import { issue } from "../../core/action/internal/backendFailure.ts"
import { SecretStore } from "../../core/action/SecretStore.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"
import * as Bwrap from "./internal/bwrap.ts"
import * as Report from "./internal/capabilityReport.ts"
import * as HostPaths from "./internal/hostPaths.ts"
import * as SubprocessBackend from "./internal/subprocessBackend.ts"

/** How the sandbox is set up. */
export interface Options {
  /** Host paths the action may read (absolute); each must exist. */
  readonly read?: ReadonlyArray<string>
  /** Host paths the action may write (absolute); each must exist. */
  readonly write?: ReadonlyArray<string>
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
}

/** The backend's identity. */
export const ref = ActionBackendRef.make({ id: "bubblewrap", version: "1" })

/** The capabilities a passing probe claims: exactly those the containment suite attacks. */
export const claimed: ReadonlyArray<string> = [
  "writ.filesystem.read_roots@1",
  "writ.filesystem.write_roots@1",
  "writ.network.none@1",
  "writ.environment.allowlist@1",
  "writ.secrets.by_reference@1",
  "writ.wall_clock@1"
]

/** The capabilities this backend knows of and does not enforce (yet). */
export const unclaimed: ReadonlyArray<string> = [
  "writ.network.loopback@1",
  "writ.network.destinations@1",
  "writ.subprocess.spawn@1",
  "writ.unix_sockets@1",
  "writ.memory@1",
  "writ.process_count@1"
]

const claims: Report.Claims = { ref, by: "os", claimed, unclaimed }

// The trial: the runtime in the sandbox, as the unprivileged uid, seeing no environment and no host root.
const trial = `const fs = require("fs");
const ok = process.getuid() === ${Bwrap.sandboxUid} && fs.readFileSync("/proc/1/environ", "utf-8") === "" &&
  !fs.existsSync("/etc/passwd") && !fs.existsSync("/root");
process.stdout.write(ok ? "writ-probe:ok" : "writ-probe:exposed")`

/**
 * A bubblewrap backend; its probe runs a trial sandbox with the backend's own flags once, and is cached. It injects
 * secrets from the SecretStore in context, when there is one.
 */
export const make = (options: Options = {}): Effect.Effect<ActionExecutionBackend.Service> =>
  Effect.gen(function*() {
    const bwrap = HostPaths.which(options.bwrap ?? "bwrap", process.env.PATH)
    const node = options.node ?? process.execPath
    const execArgv = options.execArgv ?? []
    const read = options.read ?? []
    const write = options.write ?? []
    const secrets = Option.getOrUndefined(yield* Effect.serviceOption(SecretStore))
    const runtime = yield* Effect.either(Effect.try(() => Bwrap.runtimeBinds(node)))
    const base = yield* Effect.either(
      Effect.try(() => HostPaths.moduleRoots([SubprocessBackend.runnerEntry().href, ...(options.modules ?? [])]))
    )
    const sandbox = (modules: ReadonlyArray<string>): Bwrap.Sandbox => ({
      runtime: runtime._tag === "Right" ? runtime.right : [],
      read: [...new Set([...(base._tag === "Right" ? base.right : []), ...modules, ...read])],
      write
    })

    const probe = yield* Effect.cached(Effect.gen(function*() {
      if (bwrap === undefined) return Report.unsupported(claims, "probe failed: no bwrap executable")
      if (runtime._tag === "Left") {
        return Report.unsupported(claims, `probe failed: the runtime ${node} could not be resolved`)
      }
      if (base._tag === "Left") {
        return Report.unsupported(claims, "probe failed: the runner's module graph could not be resolved")
      }
      const version = /^bubblewrap (\S+)$/.exec((yield* Report.run(bwrap, ["--version"])).stdout.trim())?.[1] ??
        "unknown"
      const tried = yield* Report.run(bwrap, Bwrap.argv(sandbox([]), [node, ...execArgv, "-e", trial]))
      const platform = `${os.type()} ${os.release()}`
      const identity = BackendMechanism.make({ name: "bubblewrap", version, platform })
      const mechanism = `bubblewrap ${version} on ${platform}`
      if (!tried.ok || tried.stdout !== "writ-probe:ok") {
        return Report.unsupported(
          claims,
          `probe failed: the trial sandbox (${mechanism}) did not run contained`,
          identity
        )
      }
      return Report.verified(
        claims,
        ["filesystem", "network", "environment", "secrets"],
        `probe: a trial sandbox (${mechanism}) ran as uid ${Bwrap.sandboxUid} with no environment ` +
          "and no host root; the claims are those the containment suite verifies",
        identity
      )
    }))

    return SubprocessBackend.make({
      ref,
      probe,
      launch: (command, definition) => {
        if (bwrap === undefined || runtime._tag === "Left" || base._tag === "Left") {
          return Effect.fail(issue({
            outcome: "failed",
            reason: "spawn_failed",
            started: false,
            detail: "bubblewrap or the runtime is unavailable"
          }))
        }
        return Effect.try({
          try: () => ({
            command: bwrap,
            args: Bwrap.argv(sandbox(HostPaths.moduleRoots([definition.module!])), command),
            env: {}
          }),
          catch: () =>
            issue({
              outcome: "failed",
              reason: "module_unavailable",
              started: false,
              detail: "the action's module graph could not be resolved"
            })
        })
      },
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
