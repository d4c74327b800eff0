/**
 * The Deno effect backend: each invocation runs in a fresh child runner under `deno run` with exactly the permissions
 * the call's grants imply: read the module graph's packages and the read and write roots, write the write roots
 * (but not their shell rc files or `.git`), reach the backend's hosts and the destinations the call's policy grants
 * (`--allow-net`) only, read the variables the action declares it reads; no subprocess, FFI or system information, no
 * prompt, no remote module or npm download, an environment of deno's own settings only. Where a call's policy has
 * filesystem rules, its roots are the policy's narrowed by the backend's, as bubblewrap's binds are (a glob root by
 * its longest literal prefix), and the policy's denials are deno's `--deny-read` and `--deny-write`.
 * Runtime: Node on Linux, with deno 2 (the npm package `deno`, or on the PATH).
 *
 * These are a runtime's permissions, not the OS's: the action runs as writ's own uid with no memory or process limit,
 * a symlink already in a root is followed (so admission refuses roots holding one that leaves them), and a granted
 * `--allow-run` or `--allow-ffi` would end all containment (neither is ever granted). Its report claims only what the
 * containment suite (test/conformance/DenoContainment.test.ts) verifies, once a trial run with the same flags proved
 * a read outside its roots refused. Secrets an action declares with `exposure: inject` are resolved from the
 * SecretStore in context and come on the request's pipe; no other reaches the run (a store's file must lie outside
 * the roots).
 */
import { Duration, Effect, Layer, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { ActionDefinition } from "../../core/action/Action.ts"
import type { Invocation } from "../../core/action/ActionExecutionBackend.ts"
import { ActionExecutionBackend, BackendMechanism } from "../../core/action/ActionExecutionBackend.ts"
import { SecretStore } from "../../core/action/SecretStore.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"
import type { FilesystemGrant } from "../../core/policy/FilesystemGrant.ts"
import * as NetworkGrant from "../../core/policy/NetworkGrant.ts"
import * as Report from "./internal/capabilityReport.ts"
import * as Deno from "./internal/deno.ts"
import * as HostPaths from "./internal/hostPaths.ts"
import * as SubprocessBackend from "./internal/subprocessBackend.ts"

/** How the sandbox is set up. */
export interface Options {
  /** Host paths the action may read (absolute); each must exist. */
  readonly read?: ReadonlyArray<string>
  /** Host paths the action may write (and read); each must exist. */
  readonly write?: ReadonlyArray<string>
  /** Hosts the action may reach (`host` or `host:port`, as `--allow-net` takes them); none by default. */
  readonly net?: ReadonlyArray<string>
  /** More module directories the action may read, beyond the writ package and the action's own package. */
  readonly modules?: ReadonlyArray<string>
  /** The deno executable (default: the npm package `deno` beside writ, else `deno` on the PATH). */
  readonly deno?: string
  /** deno's cache directory (default: a fresh temporary directory per backend, removed at exit). */
  readonly denoDir?: string
  /** The wall clock of one invocation, after which its process group is killed (default: 30 seconds). */
  readonly wallClock?: Duration.DurationInput
  /** The most bytes of a child's stderr kept (default: 64 KiB). */
  readonly outputBytes?: number
}

/** The backend's identity. */
export const ref = ActionBackendRef.make({ id: "deno", version: "1" })

/** The capabilities a passing probe claims with no host granted: exactly those the containment suite attacks. */
export const claimed: ReadonlyArray<string> = [
  "writ.filesystem.read_roots@1",
  "writ.filesystem.write_roots@1",
  "writ.network.none@1",
  "writ.network.loopback@1",
  "writ.network.destinations@1",
  "writ.subprocess.spawn@1",
  "writ.environment.allowlist@1",
  "writ.secrets.by_reference@1",
  "writ.wall_clock@1"
]

/** The capabilities this backend knows of and does not enforce (besides the network one it does not claim). */
export const unclaimed: ReadonlyArray<string> = [
  "writ.unix_sockets@1",
  "writ.memory@1",
  "writ.process_count@1",
  "writ.process.separate_uid@1"
]

// A backend granting hosts to every call (`net`) leaves no call without network, so it does not claim none.
const claimsFor = (net: ReadonlyArray<string>): Report.Claims => ({
  ref,
  by: "runtime",
  claimed: net.length === 0 ? claimed : claimed.filter((name) => name !== "writ.network.none@1"),
  unclaimed: [...(net.length === 0 ? [] : ["writ.network.none@1"]), ...unclaimed]
})

/**
 * The destinations a call's grant permits, as `--allow-net` can say them exactly: its literal `host:port` patterns that
 * the whole grant permits. A pattern with `*` is dropped (deno's list has no such glob), so a call gets less, never more.
 */
export const allowNet = (grant: NetworkGrant.NetworkGrant): ReadonlyArray<string> => [
  ...new Set(
    grant.gates.flatMap((gate) => gate.allow).filter((pattern) =>
      !pattern.includes("*") && NetworkGrant.permits(grant, pattern)
    )
  )
]

const limits = "deno permissions, not the OS: the action runs as writ's own uid with no memory or process limit; " +
  "the module graph's packages are readable; no --allow-run or --allow-ffi is granted, as either would end containment"

// The trial: a read inside its root allowed, one outside it, the environment and a subprocess refused; a connection
// to its one granted loopback port let through to the socket layer, one to the next port refused by permission.
const trialPort = 9
const trial =
  `const refused = (f) => { try { f(); return false } catch (e) { return e instanceof Deno.errors.NotCapable } };
const connects = async (port) => {
  try { (await Deno.connect({ hostname: "127.0.0.1", port })).close(); return "open" }
  catch (e) { return e instanceof Deno.errors.NotCapable ? "refused" : "unreachable" }
};
const [inside, outside] = Deno.args;
const ok = Deno.readTextFileSync(inside) === "inside" && refused(() => Deno.readTextFileSync(outside)) &&
  refused(() => Deno.env.get("PATH")) && refused(() => new Deno.Command("/bin/true").outputSync()) &&
  (await connects(${trialPort})) !== "refused" && (await connects(${trialPort + 1})) === "refused";
console.log(ok ? "writ-probe:ok" : "writ-probe:exposed")`

const trialRun = (deno: string, denoDir: string) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-deno-probe-"))
      for (const sub of ["inside", "outside"]) fs.mkdirSync(path.join(dir, sub))
      fs.writeFileSync(path.join(dir, "inside", "file"), "inside")
      fs.writeFileSync(path.join(dir, "outside", "file"), "outside", { mode: 0o600 })
      fs.writeFileSync(path.join(dir, "trial.js"), trial)
      return fs.realpathSync(dir)
    }),
    (dir) => {
      const args = Deno.argv(
        { read: [path.join(dir, "inside")], write: [], net: [`127.0.0.1:${trialPort}`], env: [] },
        `${dir}/trial.js`
      )
      return Report.run(deno, [...args, `${dir}/inside/file`, `${dir}/outside/file`], Deno.environment(denoDir))
    },
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

// A cache of this backend's own, removed when the process exits.
const fresh = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-deno-cache-"))
  process.once("exit", () => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A Deno backend; its probe runs a trial with the backend's own flags once, and is cached; it injects secrets from the SecretStore in context. */
export const make = (options: Options = {}): Effect.Effect<ActionExecutionBackend.Service> =>
  Effect.gen(function*() {
    const deno = Deno.resolve(options.deno, process.env.PATH)
    const net = options.net ?? []
    const claims = claimsFor(net)
    const roots = yield* Effect.either(Effect.try(() => ({
      read: (options.read ?? []).map(Deno.root),
      write: (options.write ?? []).map(Deno.root),
      modules: HostPaths.moduleRoots([SubprocessBackend.runnerEntry().href, ...(options.modules ?? [])])
    })))
    const denoDir = options.denoDir ?? fresh()
    const secrets = Option.getOrUndefined(yield* Effect.serviceOption(SecretStore))

    const probe = yield* Effect.cached(Effect.gen(function*() {
      if (deno === undefined) return Report.unsupported(claims, "probe failed: no deno executable")
      if (roots._tag === "Left") {
        return Report.unsupported(claims, "probe failed: a root or the module graph is missing")
      }
      const version = /^deno (\S+)/.exec((yield* Report.run(deno, ["--version"])).stdout)?.[1] ?? "unknown"
      const identity = BackendMechanism.make({ name: "deno", version, platform: `${os.type()} ${os.release()}` })
      const tried = yield* trialRun(deno, denoDir)
      if (!tried.ok || tried.stdout.trim() !== "writ-probe:ok") {
        return Report.unsupported(
          claims,
          `probe failed: the trial run (deno ${version} at ${deno}) was not refused`,
          identity
        )
      }
      return Report.verified(
        claims,
        ["filesystem", "network", "subprocess", "environment", "secrets"],
        `probe: a trial run (deno ${version} at ${deno}) with the backend's flags was refused a read outside its ` +
          `root, the environment, a subprocess and a connection to a loopback port next to its granted one; ${limits}`,
        identity
      )
    }))

    // Why a call cannot be contained as it is: its module is not a local file, or a root holds a symlink out.
    const uncontainable = (definition: ActionDefinition): string | undefined => {
      if (roots._tag === "Left") return "a root or the module graph is missing"
      if (!definition.module!.startsWith("file:")) return `deno loads no remote module, and ${definition.module} is one`
      return Deno.escaping(roots.right.read, roots.right.write)
    }

    // A call's roots: the backend's own, or, where its policy has filesystem rules, the policy's allowed roots
    // narrowed by the backend's (never wider than either), the policy's denied paths denied. A policy root that does
    // not exist grants nothing; a denial deno cannot be told (a comma in its path) refuses the call.
    const rootsOf = (own: { read: ReadonlyArray<string>; write: ReadonlyArray<string> }, grant?: FilesystemGrant) => {
      if (grant === undefined) return { ...own, denyRead: [], denyWrite: [] }
      const resolved = (pattern: string) => {
        try {
          return [Deno.policyRoot(pattern)]
        } catch {
          return []
        }
      }
      return {
        read: Deno.narrow(grant.read.flatMap(resolved), [...own.read, ...own.write]),
        write: Deno.narrow(grant.write.flatMap(resolved), own.write),
        denyRead: grant.denyRead.map(Deno.deniedPath),
        denyWrite: grant.denyWrite.map(Deno.deniedPath)
      }
    }

    // The launch of a call on its roots: deno with exactly the flags they and its grants imply.
    const launchWith = (
      deno: string,
      modules: ReadonlyArray<string>,
      definition: ActionDefinition,
      invocation: Invocation,
      own: ReturnType<typeof rootsOf>
    ) =>
      Effect.try({
        try: () => ({
          command: deno,
          args: Deno.argv({
            read: [...new Set([...modules, ...HostPaths.moduleRoots([definition.module!]), ...own.read, ...own.write])],
            write: own.write,
            denyRead: own.denyRead,
            denyWrite: own.denyWrite,
            // The backend's own hosts, and the destinations the call's policy grants.
            net: [...new Set([...net, ...allowNet(invocation.network ?? NetworkGrant.none)])],
            env: (definition.environment ?? []).filter((need) => need.exposure === "read").map((need) => need.variable)
          }, SubprocessBackend.runnerEntry().pathname),
          env: Deno.environment(denoDir),
          channels: "stdio" as const
        }),
        catch: () => SubprocessBackend.issued("module_unavailable", "the action's module graph could not be resolved")
      })

    return SubprocessBackend.make({
      ref,
      probe,
      admits: uncontainable,
      launch: (_node, definition, invocation) => {
        if (deno === undefined || roots._tag === "Left") {
          return SubprocessBackend.failed("spawn_failed", "deno or a root is unavailable")
        }
        const refusal = uncontainable(definition)
        if (refusal !== undefined) return SubprocessBackend.failed("request_refused", refusal)
        const { modules } = roots.right
        const own = Effect.try({
          try: () => rootsOf(roots.right, invocation.filesystem),
          catch: (error) =>
            SubprocessBackend.issued("request_refused", error instanceof Error ? error.message : String(error))
        })
        return Effect.flatMap(own, (call) => {
          // The policy's narrower roots are checked again: a symlink in them may lead out of them (or into a denial).
          const narrowed = invocation.filesystem === undefined
            ? undefined
            : Deno.escaping(call.read, call.write, [...call.denyRead, ...call.denyWrite])
          return narrowed !== undefined
            ? SubprocessBackend.failed("request_refused", narrowed)
            : launchWith(deno, modules, definition, invocation, call)
        })
      },
      node: deno ?? "deno",
      execArgv: [],
      wallClock: Duration.decode(options.wallClock ?? "30 seconds"),
      outputBytes: options.outputBytes ?? 64 * 1024,
      hostEnvironment: process.env,
      secrets
    })
  })

/** The Deno backend as a Layer. */
export const layer = (options: Options = {}): Layer.Layer<ActionExecutionBackend> =>
  Layer.effect(ActionExecutionBackend, make(options))

/** The Deno backend's layer, under the name a backend selection uses. */
export const layerDeno = layer
