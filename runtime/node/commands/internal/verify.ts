/**
 * `writ backend probe NAME --verify`: the attack matrix run live on a backend as configured. For each capability its
 * report calls `enforced`, a hostile action (runtime/node/HostileActions.ts) runs through a minimal executor and
 * attempts what the claim must stop; the attempt is judged by its effect on the host (the canary's text came back,
 * the file exists, the listener saw a connection, the process is still there), never by the action's own account.
 * A capability the report does not call `enforced` is `not claimed`, and its attack does not run. The network grants
 * are attacked by governed calls (on a SQLite file in the planted directory) under a policy granting one destination,
 * a listener on 127.0.0.2, and `*.writ.test` on its port: they must reach it, and never 127.0.0.3 on the same port
 * nor a second port on 127.0.0.2; a claim whose granted destination was not reached is `failed`.
 */
import { Effect, Fiber, Layer, Schedule, Schema } from "effect"
import type { Scope } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as EnvFileSecretStore from "../../../../adapters/node/EnvFileSecretStore.ts"
import * as NodeDigest from "../../../../adapters/node/NodeDigest.ts"
import type { ActionBackendCapabilityReport } from "../../../../core/action/ActionExecutionBackend.ts"
import { ActionExecutionBackend } from "../../../../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../../../../core/action/ActionRegistry.ts"
import type { SecretStore } from "../../../../core/action/SecretStore.ts"
import * as IdGenerator from "../../../../core/base/IdGenerator.ts"
import { openBoundary } from "../../../../core/evidence/EvidenceWriter.ts"
import * as ActionExecutor from "../../../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../../../core/execution/Ingress.ts"
import * as Demo from "../../../Demo.ts"
import * as Embedded from "../../../Embedded.ts"
import * as Hostile from "../../HostileActions.ts"

/**
 * What an attack did: stopped, not stopped, or not run because the report does not claim what it attacks; `failed`
 * marks a claim that stopped its attack but did not give what it grants (the granted destination was not reached);
 * `not attacked` marks a claim the live matrix has no attack for (the containment suite attacks it).
 */
export const Verdict = Schema.Literal("blocked", "escaped", "failed", "not claimed", "not attacked")

/** One row of the matrix. */
export class AttackRow extends Schema.Class<AttackRow>("AttackRow")({
  claim: Schema.String,
  attack: Schema.String,
  verdict: Verdict,
  detail: Schema.String
}) {}

/** The limits the backend was configured with, which the attacks on them must pass. */
export interface Limits {
  readonly memoryBytes: number
  readonly processes: number
}

/** Where the attacks put their canaries, targets and sockets, and what they plant there. */
interface Ground {
  readonly dir: string
  readonly canaryPath: string
  readonly canary: string
  readonly outside: string
  readonly secretsFile: string
  readonly ungranted: string
  readonly envVariable: string
  readonly envCanary: string
}

/** Run an action; with `grant`, governed, under a policy allowing it and granting those destinations to connect to. */
type Run = (
  action: string,
  args: Record<string, unknown>,
  grant?: ReadonlyArray<string>
) => Effect.Effect<ExecutionOutcome>
/** An attack's verdict on the host's evidence, and what it saw. */
export type Judged = { readonly verdict: "blocked" | "escaped" | "failed"; readonly detail: string }

interface Attack {
  readonly claim: string
  readonly attack: string
  readonly run: (call: Run, ground: Ground, limits: Limits) => Effect.Effect<Judged, never, Scope.Scope>
}

const judged = (escaped: boolean, detail: string): Judged => ({
  verdict: escaped ? "escaped" : "blocked",
  detail: detail.length > 72 ? `${detail.slice(0, 71)}…` : detail
})

const result = (outcome: ExecutionOutcome): any => outcome._tag === "succeeded" ? outcome.result : undefined

const ended = (outcome: ExecutionOutcome) =>
  outcome._tag === "succeeded" ? "succeeded" : `${outcome._tag} (${reasonCode(outcome)})`

const seenDetail = (seen: typeof Hostile.Seen.Type | undefined, outcome: ExecutionOutcome) =>
  seen === undefined ? ended(outcome) : seen.ok ? seen.value.slice(0, 40) : `refused: ${seen.value}`

/** A listener counting the connections it accepts: on 127.0.0.1 (TCP) or at a unix socket path. */
const listener = (at: { readonly path: string } | { readonly host: string }) =>
  Effect.acquireRelease(
    Effect.async<{ readonly port: number; readonly seen: () => number; readonly server: net.Server }>((resume) => {
      let connections = 0
      const server = net.createServer((socket) => {
        connections++
        socket.destroy()
      })
      const ready = () => {
        const address = server.address()
        resume(Effect.succeed({
          port: typeof address === "object" && address !== null ? address.port : 0,
          seen: () => connections,
          server
        }))
      }
      if ("path" in at) server.listen(at.path, ready)
      else server.listen(0, at.host, ready)
    }),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

/** A TCP listener counting its connections, answering `writ-reached` to one's first bytes, and keeping them (latin1). */
const answering = (host: string, port = 0) =>
  Effect.acquireRelease(
    Effect.async<{
      readonly port: number
      readonly received: Array<string>
      readonly connections: () => number
      readonly server: net.Server
    }>(
      (resume) => {
        const received: Array<string> = []
        let connections = 0
        const server = net.createServer((socket) => {
          connections++
          socket.on("error", () => socket.destroy())
          socket.once("data", (chunk) => (received.push(chunk.toString("latin1")), socket.end("writ-reached\n")))
        })
        server.listen(
          port,
          host,
          () =>
            resume(Effect.succeed({
              port: (server.address() as net.AddressInfo).port,
              received,
              connections: () => connections,
              server
            }))
        )
      }
    ),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

const u8 = (value: number) => Buffer.from([value])
const u16 = (value: number) => Buffer.from([value >> 8, value & 0xff])

/** A TLS 1.2-framed ClientHello naming `name` in its SNI (one cipher suite, no other extension). */
export const clientHello = (name: string) => {
  const host = Buffer.from(name)
  const list = Buffer.concat([u8(0), u16(host.length), host])
  const sni = Buffer.concat([u16(0), u16(list.length + 2), u16(list.length), list])
  const body = Buffer.concat([
    u16(0x0303),
    randomBytes(32),
    u8(0),
    u16(2),
    u16(0x1301),
    u8(1),
    u8(0),
    u16(sni.length),
    sni
  ])
  const handshake = Buffer.concat([u8(1), u8(0), u16(body.length), body])
  return Buffer.concat([u8(0x16), u16(0x0301), u16(handshake.length), handshake])
}

/**
 * The network listeners: 127.0.0.2 (granted, with `*.writ.test` on its port), 127.0.0.3 on the same port, and a second
 * port on 127.0.0.2; a connection the granted one saw whose first bytes name 127.0.0.3 was smuggled through it.
 */
export const networkGround = Effect.gen(function*() {
  const granted = yield* answering("127.0.0.2")
  const other = yield* answering("127.0.0.3", granted.port)
  const second = yield* answering("127.0.0.2")
  return { granted, other, second, grant: [`127.0.0.2:${granted.port}`, `*.writ.test:${granted.port}`] }
})

/**
 * The destinations attack's attempts against the ground's port P: 127.0.0.2:P through the proxy (granted), 127.0.0.3:P
 * directly, by CONNECT, with a NUL byte, by a plain request to 127.0.0.2 whose Host header names 127.0.0.3, and by a
 * tunnel to 127.0.0.2 whose TLS ClientHello names 127.0.0.3.
 */
export const destinationAttempts = (port: number): ReadonlyArray<typeof Hostile.Reach.Type> => {
  const to = { host: "127.0.0.3", port }
  return [
    { host: "127.0.0.2", port, request: `CONNECT 127.0.0.2:${port} HTTP/1.1\r\n\r\n` },
    to,
    { ...to, request: `CONNECT 127.0.0.3:${port} HTTP/1.1\r\n\r\n` },
    { ...to, request: `CONNECT 127.0.0.3\0.writ.test:${port} HTTP/1.1\r\n\r\n` },
    { ...to, request: `GET http://127.0.0.2:${port}/ HTTP/1.1\r\nHost: 127.0.0.3:${port}\r\n\r\n` },
    {
      ...to,
      request: `CONNECT 127.0.0.2:${port} HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`,
      after: clientHello("127.0.0.3").toString("hex")
    }
  ]
}

/**
 * Judge the destinations attack by what the ground's listeners saw: escaped when 127.0.0.3 saw a connection, or when
 * the granted listener got first bytes naming 127.0.0.3 (a Host header or SNI smuggled through the proxy).
 */
export const judgeDestinations = (
  { granted, other }: Effect.Effect.Success<typeof networkGround>,
  outcome: ExecutionOutcome
): Judged => {
  const smuggled = granted.received.filter((first) => first.includes("127.0.0.3"))
  return judgeReach(
    [["127.0.0.3", other.connections()], ["127.0.0.2 (smuggled)", smuggled.length]],
    granted.received,
    outcome
  )
}

/** Judge a network attack: escaped when an ungranted listener saw a connection, failed when the granted one saw no ping. */
const judgeReach = (
  seen: ReadonlyArray<readonly [string, number]>,
  granted: ReadonlyArray<string>,
  outcome: ExecutionOutcome
): Judged => {
  const reached = seen.filter(([, connections]) => connections > 0).map(([name]) => name)
  if (reached.length > 0) return judged(true, `${reached.join(", ")} saw a connection`)
  if (!granted.includes("ping\n")) {
    return { verdict: "failed", detail: judged(false, `the granted one was not reached: ${ended(outcome)}`).detail }
  }
  return judged(false, `only the granted listener was reached (${granted.length} connection(s))`)
}

const commandLine = (pid: string | number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf-8")
  } catch {
    return ""
  }
}

/** The host's processes whose command line holds `token`. */
const processesWith = (token: string): ReadonlyArray<number> =>
  fs.readdirSync("/proc").filter((entry) => /^\d+$/.test(entry) && commandLine(entry).includes(token)).map(Number)

const parentOf = (pid: number) => {
  try {
    // The field after the command's name, which is parenthesised and may hold spaces.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf-8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
  } catch {
    return 0
  }
}

/** Whether `pid` descends from this process. */
const descends = (pid: number) => {
  for (let at = parentOf(pid), hops = 0; at > 1 && hops < 64; at = parentOf(at), hops++) {
    if (at === process.pid) return true
  }
  return false
}

// The command line a child runner has on the host, under every subprocess backend (its entry script's name).
const runnerToken = "childRunner."

const attacks: ReadonlyArray<Attack> = [
  {
    claim: "writ.filesystem.read_roots@1",
    attack: "read a 0600 canary file outside the read roots",
    run: (call, ground) =>
      Effect.map(call(Hostile.readFile.name, { path: ground.canaryPath }), (outcome) => {
        const seen = result(outcome)
        const escaped = seen?.ok === true && seen.value.includes(ground.canary)
        return judged(escaped, escaped ? "the canary's text came back" : seenDetail(seen, outcome))
      })
  },
  {
    claim: "writ.filesystem.write_roots@1",
    attack: "write a file outside the write roots",
    run: (call, ground) => {
      const target = path.join(ground.outside, randomBytes(6).toString("hex"))
      return Effect.map(call(Hostile.writeFile.name, { path: target }), (outcome) => {
        const escaped = fs.existsSync(target)
        fs.rmSync(target, { force: true })
        return judged(escaped, escaped ? "the file exists on the host" : seenDetail(result(outcome), outcome))
      })
    }
  },
  {
    claim: "writ.network.none@1",
    attack: "open a TCP connection to a listener on 127.0.0.1",
    run: (call) =>
      Effect.scoped(Effect.gen(function*() {
        const { port, seen } = yield* listener({ host: "127.0.0.1" })
        const outcome = yield* call(Hostile.connect.name, { host: "127.0.0.1", port })
        const answer = result(outcome)
        return judged(
          seen() > 0 || answer?.ok === true,
          seen() > 0 ? `the listener saw ${seen()} connection(s)` : seenDetail(answer, outcome)
        )
      }))
  },
  {
    claim: "writ.network.loopback@1",
    attack: "with 127.0.0.2:P granted, reach 127.0.0.2 on another port (directly and through the proxy)",
    run: (call) =>
      Effect.gen(function*() {
        const { grant, granted, second } = yield* networkGround
        const outcome = yield* call(Hostile.reach.name, {
          attempts: [
            { host: "127.0.0.2", port: granted.port, request: `CONNECT 127.0.0.2:${granted.port} HTTP/1.1\r\n\r\n` },
            { host: "127.0.0.2", port: second.port },
            { host: "127.0.0.2", port: second.port, request: `CONNECT 127.0.0.2:${second.port} HTTP/1.1\r\n\r\n` }
          ]
        }, grant)
        yield* Effect.sleep("50 millis")
        return judgeReach([["127.0.0.2's other port", second.connections()]], granted.received, outcome)
      })
  },
  {
    claim: "writ.network.destinations@1",
    attack: "reach 127.0.0.3 past a 127.0.0.2 grant: directly, by CONNECT, a NUL byte, a Host header, a TLS SNI",
    run: (call) =>
      Effect.gen(function*() {
        const ground = yield* networkGround
        const outcome = yield* call(
          Hostile.reach.name,
          { attempts: destinationAttempts(ground.granted.port) },
          ground.grant
        )
        yield* Effect.sleep("50 millis")
        return judgeDestinations(ground, outcome)
      })
  },
  {
    claim: "writ.environment.allowlist@1",
    attack: "read a canary environment variable, /proc/1/environ and /proc/self/environ",
    run: (call, ground) =>
      Effect.map(call(Hostile.readEnvironment.name, { variable: ground.envVariable }), (outcome) => {
        const seen = result(outcome)
        const found = seen === undefined
          ? []
          : (["env", "init", "self"] as const).filter((where) => seen[where].value.includes(ground.envCanary))
        return judged(
          found.length > 0,
          found.length > 0 ? `seen in ${found.join(", ")}` : seen === undefined ? ended(outcome) : "not seen"
        )
      })
  },
  {
    claim: "writ.secrets.by_reference@1",
    attack: "read an ungranted secret (handler context, the store's file, /proc/1, /proc/self)",
    run: (call, ground) =>
      Effect.map(
        call(Hostile.readSecret.name, { ungranted: "writ.verify.ungranted", file: ground.secretsFile }),
        (outcome) => {
          const seen = result(outcome)
          const escaped = seen !== undefined &&
            seen.tried.some((tried: typeof Hostile.Seen.Type) => tried.value.includes(ground.ungranted))
          return judged(
            escaped,
            escaped
              ? "the ungranted secret's value came back"
              : seen === undefined
              ? ended(outcome)
              : seen.granted === "(none)"
              ? "not seen (nor was the granted one injected)"
              : "not seen; the granted one was injected"
          )
        }
      )
  },
  {
    claim: "writ.unix_sockets@1",
    attack: "connect to a unix socket listener on the host",
    run: (call, ground) =>
      Effect.scoped(Effect.gen(function*() {
        const at = path.join(ground.dir, "listener.sock")
        const { seen } = yield* listener({ path: at })
        const outcome = yield* call(Hostile.unixConnect.name, { path: at })
        const answer = result(outcome)
        return judged(
          seen() > 0 || answer?.ok === true,
          seen() > 0 ? `the listener saw ${seen()} connection(s)` : seenDetail(answer, outcome)
        )
      }))
  },
  {
    claim: "writ.memory@1",
    attack: "allocate 64 MiB past the memory limit",
    run: (call, _, limits) => {
      const megabytes = Math.ceil(limits.memoryBytes / 1024 / 1024) + 64
      return Effect.map(
        call(Hostile.allocate.name, { megabytes }),
        (outcome) => judged(outcome._tag === "succeeded", `${megabytes} MiB: ${ended(outcome)}`)
      )
    }
  },
  {
    claim: "writ.process_count@1",
    attack: "start as many processes as the task limit",
    run: (call, _, limits) =>
      Effect.map(call(Hostile.forkBomb.name, { children: limits.processes }), (outcome) => {
        const seen = result(outcome)
        // Each live child is a task at least, beside the runner's own: as many as the limit means it was passed.
        return judged(
          seen !== undefined && seen.alive >= limits.processes,
          seen === undefined
            ? ended(outcome)
            : `${seen.spawned} started, ${seen.alive} alive, ${seen.refused} refused of ${limits.processes}`
        )
      })
  },
  {
    claim: "writ.subprocess.spawn@1",
    attack: "spawn a subprocess",
    run: (call) => {
      const token = `writ-verify-${randomBytes(8).toString("hex")}`
      return Effect.map(call(Hostile.spawnProcess.name, { token }), (outcome) => {
        const found = processesWith(token)
        for (const pid of found) process.kill(pid, "SIGKILL")
        const answer = result(outcome)
        return judged(
          found.length > 0 || answer?.ok === true,
          found.length > 0 ? "the subprocess ran on the host" : seenDetail(answer, outcome)
        )
      })
    }
  },
  {
    claim: "writ.wall_clock@1",
    attack: "loop past the wall clock",
    run: (call) =>
      Effect.gen(function*() {
        // The runners this call started: its own descendants while it runs (another writ's are not).
        const seen = new Set<number>()
        const watch = yield* Effect.fork(
          Effect.repeat(
            Effect.sync(() => processesWith(runnerToken).forEach((pid) => descends(pid) && seen.add(pid))),
            { schedule: Schedule.spaced("100 millis") }
          )
        )
        const outcome = yield* call(Hostile.spin.name, {})
        yield* Fiber.interrupt(watch)
        yield* Effect.sleep("500 millis")
        const left = [...seen].filter((pid) => commandLine(pid).includes(runnerToken))
        if (seen.size === 0) return judged(true, `the runner was never seen on the host: ${ended(outcome)}`)
        return judged(
          outcome._tag !== "timed_out" || left.length > 0,
          left.length > 0 ? `${left.length} process(es) still running after the kill` : ended(outcome)
        )
      })
  }
]

const plant = (base: string): Ground => {
  const dir = fs.mkdtempSync(path.join(base, "writ-verify-"))
  const outside = path.join(dir, "outside")
  fs.mkdirSync(outside)
  const canaryPath = path.join(dir, "canary")
  const canary = randomBytes(16).toString("hex")
  fs.writeFileSync(canaryPath, canary, { mode: 0o600 })
  const ungranted = randomBytes(16).toString("hex")
  const secretsFile = path.join(dir, "secrets.env")
  fs.writeFileSync(
    secretsFile,
    `${Hostile.grantedSecret}=${randomBytes(16).toString("hex")}\nwrit.verify.ungranted=${ungranted}\n`,
    { mode: 0o600 }
  )
  const envVariable = "WRIT_VERIFY_CANARY"
  const envCanary = randomBytes(16).toString("hex")
  process.env[envVariable] = envCanary
  return { dir, canaryPath, canary, outside, secretsFile, ungranted, envVariable, envCanary }
}

/** Where the attacks plant their files when no directory is given: outside /tmp, which a sandbox may replace. */
export const defaultBase = () => fs.existsSync("/var/tmp") ? "/var/tmp" : os.tmpdir()

/**
 * Run the matrix on the backend `make` builds, given the secret store the attacks plant; `base` is the directory the
 * attacks plant in (a fresh directory inside it, removed afterwards); `wider` are more destinations the network
 * attacks' policy grants (a grant wider than they expect, which they must then catch).
 */
export const run = <E>(
  make: (secrets: SecretStore.Service) => Effect.Effect<ActionExecutionBackend.Service, E>,
  limits: Limits,
  base: string,
  wider: ReadonlyArray<string> = []
): Effect.Effect<{ readonly report: ActionBackendCapabilityReport; readonly rows: ReadonlyArray<AttackRow> }, E> =>
  Effect.acquireUseRelease(
    Effect.sync(() => plant(base)),
    (ground) =>
      Effect.gen(function*() {
        const backend = yield* make(EnvFileSecretStore.make({ path: ground.secretsFile }))
        const report = yield* backend.probe
        const layer = ActionExecutor.layerMinimal().pipe(
          Layer.provideMerge(
            ActionRegistry.layerWith(Hostile.all).pipe(
              Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)),
              Layer.merge(Layer.succeed(ActionExecutionBackend, backend))
            )
          )
        )
        // Governed calls, for the network grants: a SQLite file in the planted directory, a policy per call.
        const governed = Embedded.layerExecutor(
          { filename: path.join(ground.dir, "verify.db"), profile: "governed" },
          Layer.merge(ActionRegistry.layerWith(Hostile.all), Layer.succeed(ActionExecutionBackend, backend))
        )
        let policies = 0
        const minimal = (action: string, args: Record<string, unknown>) =>
          Effect.gen(function*() {
            const { context, request } = yield* Ingress.prepare(
              { action, arguments: args },
              { principal: "writ-verify", effect_backend: backend.ref }
            )
            return yield* (yield* ActionExecutor.ActionExecutor).execute(request, { context })
          }).pipe(Effect.provide(layer), Effect.orDie)
        const call: Run = (action, args, grant) =>
          grant === undefined ? minimal(action, args) : Effect.gen(function*() {
            const policy = yield* Demo.install({
              policy_id: "writ-verify-network",
              version: String(++policies),
              rules: [
                { kind: "action", effect: "allow", action_patterns: [action] },
                {
                  kind: "network",
                  effect: "allow",
                  destinations: [grant[0]!, ...grant.slice(1), ...wider],
                  modes: ["connect"]
                }
              ]
            })
            const { context, request } = yield* Ingress.prepare(
              { action, arguments: args },
              { principal: "writ-verify", effect_backend: backend.ref, policy_snapshot: policy }
            )
            const boundary = yield* openBoundary(policy)
            return yield* (yield* ActionExecutor.ActionExecutor).execute(request, { context, boundary })
          }).pipe(Effect.provide(governed), Effect.orDie)
        const enforced = new Set(
          (report.capabilities ?? []).filter((claim) => claim.level === "enforced").map((claim) => claim.name)
        )
        const rows: Array<AttackRow> = []
        for (const attack of attacks) {
          if (!enforced.has(attack.claim)) {
            rows.push(
              AttackRow.make({ claim: attack.claim, attack: attack.attack, verdict: "not claimed", detail: "" })
            )
            continue
          }
          const { detail, verdict } = yield* Effect.scoped(attack.run(call, ground, limits))
          rows.push(AttackRow.make({ claim: attack.claim, attack: attack.attack, verdict, detail }))
        }
        // A claim with no attack here is shown as such, never counted as verified.
        const attacked = new Set(attacks.map((attack) => attack.claim))
        for (const claim of [...enforced].filter((name) => !attacked.has(name)).sort()) {
          rows.push(AttackRow.make({
            claim,
            attack: "(no live attack here)",
            verdict: "not attacked",
            detail: "the containment suite attacks it"
          }))
        }
        return { report, rows }
      }),
    (ground) =>
      Effect.sync(() => {
        delete process.env[ground.envVariable]
        fs.rmSync(ground.dir, { recursive: true, force: true })
      })
  )
