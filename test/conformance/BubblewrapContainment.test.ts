/**
 * The containment suite for the bubblewrap backend: hostile actions, run through the real executor, attempt what each
 * capability the backend's report calls `enforced` must stop, and the test checks the effect did not happen on the
 * host (the canary stays unread, the file unwritten, the listener unconnected). Each attack also runs on a backend
 * that contains nothing, where it must escape, so no attack here passes for being unable to succeed. The report may
 * claim nothing the suite did not verify; the matrix is printed at the end.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../adapters/node/BubblewrapBackend.ts"
import * as EnvFileSecretStore from "../../adapters/node/EnvFileSecretStore.ts"
import { runtimeBinds } from "../../adapters/node/internal/bwrap.ts"
import * as SubprocessBackend from "../../adapters/node/internal/subprocessBackend.ts"
import type { ContainmentKind } from "../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import { chainRecords, governedInMemory, run } from "../fixtures/layers.ts"
import { clientHello, runGranted, tcpListener, udpListener } from "../fixtures/network.ts"
import { installPolicy, secretPolicy } from "../fixtures/policy.ts"
import { actions, execArgv, options, plain, runOn } from "../fixtures/subprocess.ts"

// Outside /tmp, which a sandbox replaces with its own: a host directory the sandbox must not see unless bound.
const root = fs.mkdtempSync("/var/tmp/writ-bwrap-")
const dirs = { canary: "canary", read: "read", write: "write", outside: "outside", secrets: "secrets" }
for (const dir of Object.values(dirs)) fs.mkdirSync(path.join(root, dir), { mode: 0o700 })
const canaryPath = path.join(root, dirs.canary, "secret")
const canary = randomBytes(16).toString("hex")
fs.writeFileSync(canaryPath, canary, { mode: 0o600 })
const readRoot = path.join(root, dirs.read)
const writeRoot = path.join(root, dirs.write)
fs.writeFileSync(path.join(readRoot, "visible.txt"), "visible")
const envCanary = randomBytes(16).toString("hex")
process.env.WRIT_CANARY = envCanary
process.env.WRIT_GRANTED = "granted"
// The secret store: an environment file outside every root, holding one secret the action is granted and one it is not.
const grantedSecret = randomBytes(16).toString("hex")
const ungrantedSecret = randomBytes(16).toString("hex")
const secretsFile = path.join(root, dirs.secrets, "secrets.env")
fs.writeFileSync(secretsFile, `writ.granted=${grantedSecret}\nwrit.ungranted="${ungrantedSecret}"\n`, { mode: 0o600 })
const secretStore = EnvFileSecretStore.layer({ path: secretsFile })
const grantedDigest = createHash("sha256").update(grantedSecret).digest("hex")

const bubblewrap = Effect.runSync(
  BubblewrapBackend.make({ read: [readRoot], write: [writeRoot], execArgv }).pipe(Effect.provide(secretStore))
)
const uncontained = plain()
// A plain child process injecting from the same store: the secrets attack's control.
const uncontainedWithSecrets = SubprocessBackend.make({
  ...options,
  secrets: EnvFileSecretStore.make({ path: secretsFile })
})

// Tools an attack runs inside the sandbox, bound read-only with the libraries they load: Debian's python (node has
// no AF_VSOCK socket) and util-linux's unshare.
const python = fs.realpathSync("/usr/bin/python3")
const unshare = "/usr/bin/unshare"
const tools = [...new Set([python, unshare].flatMap((tool) => runtimeBinds(tool).map((bind) => bind.target)))]
const tooled = Effect.runSync(
  BubblewrapBackend.make({ read: [readRoot, `/usr/lib/${path.basename(python)}`, ...tools], execArgv })
)
// The same sandbox with unix sockets granted: what it reaches shows the filter, not the mount, is what refuses.
const granted = Effect.runSync(BubblewrapBackend.make({ read: [readRoot], execArgv, unixSockets: true }))

// A unix socket listener on the host: bound into the sandbox (in a read root) or not (outside every root).
const unixListener = (dir: string) =>
  Effect.acquireRelease(
    Effect.async<{ readonly path: string; readonly server: net.Server; readonly seen: () => number }>((resume) => {
      let connections = 0
      const server = net.createServer((socket) => {
        connections++
        socket.destroy()
      })
      const at = path.join(root, dir, `${randomBytes(4).toString("hex")}.sock`)
      server.listen(at, () => resume(Effect.succeed({ path: at, server, seen: () => connections })))
    }),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

/** The most a call's cgroups were charged while `effect` ran, read from the host's side every 20 milliseconds. */
const watchingCgroups = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const seen = { tasks: 0, memory: 0, groups: new Set<string>() }
    const read = (file: string) => Number(fs.readFileSync(file, "utf-8").trim())
    const sample = () => {
      for (
        const [controller, files] of [["pids", ["pids.current", "pids.peak"]], ["memory", [
          "memory.max_usage_in_bytes"
        ]]] as const
      ) {
        const dir = path.join("/sys/fs/cgroup", controller, "writ")
        for (const name of fs.existsSync(dir) ? fs.readdirSync(dir).filter((entry) => entry.startsWith("call-")) : []) {
          seen.groups.add(name)
          for (const file of files) {
            try {
              const value = read(path.join(dir, name, file))
              if (controller === "pids") seen.tasks = Math.max(seen.tasks, value)
              else seen.memory = Math.max(seen.memory, value)
            } catch {
              // The group went away between the listing and the read.
            }
          }
        }
      }
    }
    const timer = setInterval(sample, 20)
    const result = yield* Effect.ensuring(effect, Effect.sync(() => (sample(), clearInterval(timer))))
    return { result, seen }
  })

/** The two loopback listeners the smuggling attacks use: 127.0.0.2 (granted) and 127.0.0.3 on the same port. */
const smugglingListeners = Effect.gen(function*() {
  const granted = yield* tcpListener("127.0.0.2")
  const other = yield* tcpListener("127.0.0.3", granted.port)
  return { granted, other, port: granted.port }
})

/** A smuggling attempt: what the proxy (or, uncontained, the listener at 127.0.0.3) answered, and who saw it. */
const smuggled = (
  backend: ActionExecutionBackend.Service,
  destinations: (port: number) => ReadonlyArray<string>,
  request: (port: number) => string,
  refused: string,
  after = Buffer.alloc(0)
) =>
  Effect.scoped(Effect.gen(function*() {
    const { granted, other, port } = yield* smugglingListeners
    const seen = succeeded(
      yield* runGranted(backend, destinations(port), "hostile.smuggle", {
        request: request(port),
        after: after.toString("hex"),
        fallback: { host: "127.0.0.3", port }
      })
    )
    yield* Effect.sleep("50 millis")
    // Contained, the attempt reached the proxy, which refused it: so its being blocked is the proxy's doing.
    if (backend !== uncontained) assert.strictEqual(seen.value, refused, "the proxy answered the attempt")
    return other.seen() > 0 || granted.seen() > 0 || seen.ok ? "escaped" : "blocked"
  }))

type Verdict = "blocked" | "escaped"
const matrix: Array<{ capability: string; attack: string; bubblewrap: string; uncontained: string }> = []
const verified = new Map<ContainmentKind, Set<string>>()
const verifiedClaims = new Set<string>()

const succeeded = (outcome: ExecutionOutcome) => {
  assert.strictEqual(outcome._tag, "succeeded", JSON.stringify(outcome))
  return (outcome as { readonly result: any }).result
}

const fresh = (dir: string) => path.join(root, dir, randomBytes(6).toString("hex"))

/** An attack: what it tries on one backend, and whether its effect happened. */
interface Attack {
  readonly capability: ContainmentKind
  readonly claim: string
  readonly name: string
  readonly control: ActionExecutionBackend.Service
  readonly run: (backend: ActionExecutionBackend.Service) => Effect.Effect<Verdict, unknown>
}

const attacks: ReadonlyArray<Attack> = [
  {
    capability: "filesystem",
    claim: "writ.filesystem.read_roots@1",
    name: "read a root-owned 0600 canary outside the read roots",
    control: uncontained,
    run: (backend) =>
      Effect.map(runOn(backend, "hostile.read_file", { path: canaryPath }), (outcome) => {
        const seen = succeeded(outcome)
        return seen.ok && seen.value.includes(canary) ? "escaped" : "blocked"
      })
  },
  ...[["outside", "write outside the write roots"], ["read", "write inside a read root"]].map(([dir, name]) => ({
    capability: "filesystem" as const,
    claim: "writ.filesystem.write_roots@1",
    name: name!,
    control: uncontained,
    run: (backend: ActionExecutionBackend.Service) => {
      const target = fresh(dir!)
      return Effect.map(runOn(backend, "hostile.write_file", { path: target }), (outcome): Verdict => {
        succeeded(outcome)
        const escaped = fs.existsSync(target)
        fs.rmSync(target, { force: true })
        return escaped ? "escaped" : "blocked"
      })
    }
  })),
  {
    capability: "network",
    claim: "writ.network.none@1",
    name: "open a TCP connection to a listener on 127.0.0.1",
    control: uncontained,
    run: (backend) =>
      Effect.acquireUseRelease(
        Effect.async<{ readonly server: net.Server; readonly port: number; readonly seen: () => number }>((resume) => {
          let connections = 0
          const server = net.createServer((socket) => {
            connections++
            socket.destroy()
          })
          server.listen(0, "127.0.0.1", () =>
            resume(Effect.succeed({
              server,
              port: (server.address() as net.AddressInfo).port,
              seen: () => connections
            })))
        }),
        ({ port, seen }) =>
          Effect.map(runOn(backend, "hostile.connect", { host: "127.0.0.1", port }), (outcome): Verdict => {
            const result = succeeded(outcome)
            return seen() > 0 || result.ok ? "escaped" : "blocked"
          }),
        ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
      )
  },
  {
    capability: "network",
    claim: "writ.network.loopback@1",
    name: "with one loopback port granted, reach another (directly and through the proxy)",
    control: uncontained,
    run: (backend) =>
      Effect.scoped(Effect.gen(function*() {
        const granted = yield* tcpListener("127.0.0.1")
        const ungranted = yield* tcpListener("127.0.0.1")
        const seen = succeeded(
          yield* runGranted(backend, [`127.0.0.1:${granted.port}`], "hostile.loopback", {
            granted: granted.port,
            ungranted: ungranted.port
          })
        )
        assert.deepStrictEqual(seen.proxied_granted, { ok: true, value: "reached" }, "the granted port is reachable")
        assert.isAbove(granted.seen(), 0)
        return ungranted.seen() > 0 || seen.direct_ungranted.ok || seen.proxied_ungranted.ok ? "escaped" : "blocked"
      }))
  },
  {
    capability: "network",
    claim: "writ.network.loopback@1",
    name: "resolve a name (system resolver, a resolver and a raw query aimed at a loopback DNS listener)",
    control: uncontained,
    run: (backend) =>
      Effect.scoped(Effect.gen(function*() {
        const listener = yield* udpListener
        const seen = succeeded(
          yield* runGranted(backend, [`127.0.0.1:${listener.port}`], "hostile.resolve", {
            name: "writ-canary.test",
            port: listener.port
          })
        )
        yield* Effect.sleep("50 millis")
        return listener.seen() > 0 || seen.resolver.ok || seen.system.ok ? "escaped" : "blocked"
      }))
  },
  {
    capability: "network",
    claim: "writ.network.destinations@1",
    name: "reach 127.0.0.3 through the proxy as 127.0.0.3\\0.writ.test (a NUL byte past a *.writ.test grant)",
    control: uncontained,
    run: (backend) =>
      smuggled(
        backend,
        (port) => [`127.0.0.2:${port}`, `*.writ.test:${port}`],
        (port) => `CONNECT 127.0.0.3\0.writ.test:${port} HTTP/1.1\r\n\r\n`,
        "HTTP/1.1 403 Forbidden"
      )
  },
  {
    capability: "network",
    claim: "writ.network.destinations@1",
    name: "a plain-HTTP request to granted 127.0.0.2 whose Host header names 127.0.0.3",
    control: uncontained,
    run: (backend) =>
      smuggled(
        backend,
        (port) => [`127.0.0.2:${port}`],
        (port) => `GET http://127.0.0.2:${port}/ HTTP/1.1\r\nHost: 127.0.0.3:${port}\r\n\r\n`,
        "HTTP/1.1 403 Forbidden"
      )
  },
  {
    capability: "network",
    claim: "writ.network.destinations@1",
    name: "a CONNECT to granted 127.0.0.2 whose TLS ClientHello's SNI names 127.0.0.3",
    control: uncontained,
    run: (backend) =>
      smuggled(
        backend,
        (port) => [`127.0.0.2:${port}`],
        (port) => `CONNECT 127.0.0.2:${port} HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`,
        "closed",
        clientHello("127.0.0.3")
      )
  },
  {
    capability: "environment",
    claim: "writ.environment.allowlist@1",
    name: "read a canary environment variable, /proc/1/environ and /proc/self/environ",
    control: InProcessBackend.make,
    run: (backend) =>
      Effect.map(runOn(backend, "hostile.read_environment", { variable: "WRIT_CANARY" }), (outcome) => {
        const { env, init, self } = succeeded(outcome)
        return [env, init, self].some((seen) => seen.value.includes(envCanary)) ? "escaped" : "blocked"
      })
  },
  {
    capability: "secrets",
    claim: "writ.secrets.by_reference@1",
    name: "read an ungranted secret (its handler context, the store's file, /proc/1 and /proc/self)",
    control: uncontainedWithSecrets,
    run: (backend) =>
      Effect.map(
        runOn(backend, "hostile.read_secret", { ungranted: "writ.ungranted", file: secretsFile }),
        (outcome) => {
          const { granted, ...tried } = succeeded(outcome)
          assert.strictEqual(granted, grantedDigest, "the granted secret was injected")
          return Object.values(tried).some((seen: any) => seen.value.includes(ungrantedSecret)) ? "escaped" : "blocked"
        }
      )
  }
]

afterAll(() => {
  console.log(
    ["capability | attack | bubblewrap | uncontained control", ...matrix.map((row) => Object.values(row).join(" | "))]
      .join("\n")
  )
  fs.rmSync(root, { recursive: true, force: true })
})

describe("bubblewrap containment", () => {
  it.live("the probe's trial sandbox ran, and the report claims filesystem, network, environment and secrets only", () =>
    Effect.gen(function*() {
      const report = yield* bubblewrap.probe
      assert.deepStrictEqual(report.containment, {
        filesystem: "enforced",
        network: "enforced",
        subprocess: "unsupported",
        environment: "enforced",
        secrets: "enforced"
      })
      assert.match(report.verified_by, /^probe: a trial sandbox \(bubblewrap \d/)
    }))

  for (const attack of attacks) {
    it.live(`${attack.capability}: ${attack.name} is blocked, and escapes with no containment`, () =>
      Effect.gen(function*() {
        const contained = yield* attack.run(bubblewrap)
        const control = yield* attack.run(attack.control)
        matrix.push({ capability: attack.capability, attack: attack.name, bubblewrap: contained, uncontained: control })
        assert.strictEqual(control, "escaped", "the attack works where nothing contains it")
        assert.strictEqual(contained, "blocked")
        verified.set(attack.capability, (verified.get(attack.capability) ?? new Set()).add(attack.name))
        verifiedClaims.add(attack.claim)
      }))
  }

  it.live(
    "unix sockets: connecting to a host unix socket, bound into the sandbox or not, is refused at socket()",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const bound = yield* unixListener(dirs.read)
        const unbound = yield* unixListener(dirs.outside)
        const control = succeeded(yield* runOn(uncontained, "hostile.unix_connect", { path: bound.path }))
        assert.deepStrictEqual(control, { ok: true, value: "connected" }, "the attack works where nothing contains it")
        const reached = succeeded(yield* runOn(granted, "hostile.unix_connect", { path: bound.path }))
        assert.deepStrictEqual(reached, { ok: true, value: "connected" }, "the bound socket is reachable when granted")
        const before = bound.seen()
        const contained = [
          succeeded(yield* runOn(bubblewrap, "hostile.unix_connect", { path: bound.path })),
          succeeded(yield* runOn(bubblewrap, "hostile.unix_connect", { path: unbound.path }))
        ]
        const verdict = bound.seen() === before && unbound.seen() === 0 && contained.every((seen) => !seen.ok)
          ? "blocked"
          : "escaped"
        matrix.push({
          capability: "unix sockets",
          attack: "connect to a host unix socket (bound in, and not)",
          bubblewrap: verdict,
          uncontained: "escaped"
        })
        assert.deepStrictEqual(contained, [{ ok: false, value: "EAFNOSUPPORT" }, { ok: false, value: "EAFNOSUPPORT" }])
        assert.strictEqual(verdict, "blocked")
        verifiedClaims.add("writ.unix_sockets@1")
        assert.strictEqual(
          (yield* granted.probe).capabilities?.find((claim) => claim.name === "writ.unix_sockets@1")?.level,
          "unsupported",
          "a sandbox granted unix sockets does not claim to refuse them"
        )
      })),
    120_000
  )

  const seccompAttacks = [
    { attack: "create an AF_VSOCK socket (python)", action: "hostile.vsock", args: { python }, refused: "errno 97" },
    {
      attack: "create a user and a network namespace (unshare)",
      action: "hostile.unshare",
      args: { unshare },
      refused: "unshare: unshare failed: Operation not permitted"
    },
    { attack: "set up io_uring (libuv, UV_USE_IO_URING=1)", action: "hostile.io_uring", args: {}, refused: "rings 0" }
  ]
  for (const { action, args, attack, refused } of seccompAttacks) {
    it.live(`seccomp: ${attack} is refused, and works with no containment`, () =>
      Effect.gen(function*() {
        const escapedOn = (seen: { ok: boolean; value: string }) =>
          seen.ok && seen.value !== "rings 0" && !seen.value.startsWith("errno") ? "escaped" : "blocked"
        const control = succeeded(yield* runOn(uncontained, action, args))
        const contained = succeeded(yield* runOn(tooled, action, args))
        matrix.push({
          capability: "seccomp",
          attack,
          bubblewrap: escapedOn(contained),
          uncontained: escapedOn(control)
        })
        assert.strictEqual(escapedOn(control), "escaped", `${attack} works where nothing contains it`)
        assert.strictEqual(contained.value, refused, attack)
      }), 120_000)
  }

  it.live(
    "memory: a sandbox that allocates past its limit is killed, the outcome typed, its cgroup capped",
    () =>
      Effect.gen(function*() {
        const limit = 256 * 1024 * 1024
        const backend = yield* BubblewrapBackend.make({ write: [writeRoot], execArgv, memoryBytes: limit })
        const marker = fresh(dirs.write)
        assert.strictEqual(succeeded(yield* runOn(uncontained, "hostile.allocate", { megabytes: 512, marker })), 512)
        fs.rmSync(marker)
        const { result: outcome, seen } = yield* watchingCgroups(
          runOn(backend, "hostile.allocate", { megabytes: 512, marker })
        )
        matrix.push({
          capability: "memory",
          attack: "allocate 512 MiB past a 256 MiB limit",
          bubblewrap: fs.existsSync(marker) ? "escaped" : "blocked",
          uncontained: "escaped"
        })
        assert.strictEqual(outcome._tag, "ambiguous", JSON.stringify(outcome))
        assert.strictEqual(reasonCode(outcome), "backend.memory_exceeded")
        assert.isFalse(fs.existsSync(marker), "the allocation never completed")
        assert.isAbove(seen.memory, 0, "the call ran in a cgroup the host could see")
        assert.isAtMost(seen.memory, limit)
        verifiedClaims.add("writ.memory@1")
      }),
    120_000
  )

  it.live(
    "process count: a fork bomb past the sandbox's task limit is refused, and no more tasks ever existed",
    () =>
      Effect.gen(function*() {
        const processes = 48
        const backend = yield* BubblewrapBackend.make({ execArgv, processes })
        const control = succeeded(yield* runOn(uncontained, "hostile.fork_bomb", { children: 12 }))
        assert.deepStrictEqual(control, { spawned: 12, refused: 0 }, "the bomb works where nothing contains it")
        const { result: outcome, seen } = yield* watchingCgroups(runOn(backend, "hostile.fork_bomb", { children: 12 }))
        const bombed = succeeded(outcome)
        matrix.push({
          capability: "process count",
          attack: `start 12 node processes under a limit of ${processes} tasks`,
          bubblewrap: bombed.refused > 0 && seen.tasks <= processes ? "blocked" : "escaped",
          uncontained: "escaped"
        })
        assert.isAbove(bombed.refused, 0, JSON.stringify(bombed))
        assert.isAbove(seen.tasks, 0, "the call ran in a cgroup the host could see")
        assert.isAtMost(seen.tasks, processes)
        verifiedClaims.add("writ.process_count@1")
      }),
    120_000
  )

  it.live("a probe that cannot make its cgroup claims no memory or process count; the rest still holds", () =>
    Effect.gen(function*() {
      const report = yield* (yield* BubblewrapBackend.make({ execArgv, cgroupRoot: "/nonexistent/cgroup" }))
        .probe
      const level = (name: string) => report.capabilities?.find((claim) => claim.name === name)?.level
      assert.strictEqual(level("writ.memory@1"), "unsupported")
      assert.strictEqual(level("writ.process_count@1"), "unsupported")
      assert.strictEqual(level("writ.unix_sockets@1"), "enforced")
      assert.strictEqual(report.containment.filesystem, "enforced")
    }))

  it.live(
    "a granted call's bridge and proxy end with it; a call granted no destination gets neither",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const bridges = () =>
          fs.readdirSync("/proc").filter((pid) => /^\d+$/.test(pid)).filter((pid) => {
            try {
              return fs.readFileSync(`/proc/${pid}/cmdline`, "utf-8").includes("/writ-proxy-")
            } catch {
              return false
            }
          })
        const proxies = () => fs.readdirSync(os.tmpdir()).filter((name) => name.startsWith("writ-proxy-"))
        const before = proxies()
        const granted = yield* tcpListener("127.0.0.1")
        const args = { granted: granted.port, ungranted: granted.port }
        const reached = succeeded(
          yield* runGranted(bubblewrap, [`127.0.0.1:${granted.port}`], "hostile.loopback", args)
        )
        assert.deepStrictEqual(reached.proxied_granted, { ok: true, value: "reached" })
        assert.deepStrictEqual(bridges(), [], "no bridge outlives its call")
        assert.deepStrictEqual(
          proxies().filter((name) => !before.includes(name)),
          [],
          "no proxy socket outlives its call"
        )
        const seen = granted.seen()
        // A policy whose only network rule grants listening: no destination to connect to, so no proxy and no bridge.
        const listenOnly = succeeded(
          yield* runGranted(bubblewrap, [`127.0.0.1:${granted.port}`], "hostile.loopback", args, ["listen"])
        )
        assert.isFalse(listenOnly.proxied_granted.ok, JSON.stringify(listenOnly))
        assert.strictEqual(granted.seen(), seen, "the listener saw no connection")
      })),
    120_000
  )

  it.live("a read root is readable, a write root writable, a declared variable present", () =>
    Effect.gen(function*() {
      const visible = succeeded(
        yield* runOn(bubblewrap, "hostile.read_file", { path: path.join(readRoot, "visible.txt") })
      )
      assert.deepStrictEqual(visible, { ok: true, value: "visible" })
      const target = fresh(dirs.write)
      assert.deepStrictEqual(succeeded(yield* runOn(bubblewrap, "hostile.write_file", { path: target })), {
        ok: true,
        value: "written"
      })
      assert.strictEqual(fs.readFileSync(target, "utf-8"), "escaped")
      const { env } = succeeded(yield* runOn(bubblewrap, "hostile.read_environment", { variable: "WRIT_GRANTED" }))
      assert.deepStrictEqual(env, { ok: true, value: "granted" })
    }))

  it.live("wall clock: a sandbox past the backend's wall clock is killed, and its action stops", () =>
    Effect.gen(function*() {
      const backend = yield* BubblewrapBackend.make({ write: [writeRoot], execArgv, wallClock: "8 seconds" })
      const ticks = fresh(dirs.write)
      const outcome = yield* runOn(backend, "child.tick", { marker: ticks })
      assert.strictEqual(outcome._tag, "timed_out", JSON.stringify(outcome))
      assert.isTrue(outcome._tag === "timed_out" && outcome.call_executed)
      // A moment for the sandbox to go down with bwrap; ticking on, it would append a dozen times in what follows.
      yield* Effect.sleep("200 millis")
      const before = fs.statSync(ticks).size
      assert.isAbove(before, 0, "the action was ticking when the clock ran out")
      yield* Effect.sleep("600 millis")
      assert.strictEqual(fs.statSync(ticks).size, before, "no tick after the kill")
      matrix.push({
        capability: "wall clock",
        attack: "loop past the wall clock",
        bubblewrap: "blocked",
        uncontained: "-"
      })
      verifiedClaims.add("writ.wall_clock@1")
    }))

  it.live("subprocess is not claimed, and rightly: a child can spawn inside its sandbox", () =>
    Effect.gen(function*() {
      const spawned = succeeded(yield* runOn(bubblewrap, "hostile.spawn", {}))
      matrix.push({
        capability: "subprocess",
        attack: "spawn a subprocess",
        bubblewrap: spawned.ok ? "escaped (not claimed)" : "blocked (not claimed)",
        uncontained: "-"
      })
      assert.deepStrictEqual(spawned, { ok: true, value: "spawned" })
      assert.strictEqual((yield* bubblewrap.probe).containment.subprocess, "unsupported")
    }))

  it.live("the report drives admission: required containment it enforces is admitted, the rest denied", () =>
    Effect.gen(function*() {
      const args = { path: path.join(readRoot, "visible.txt") }
      assert.deepStrictEqual(succeeded(yield* runOn(bubblewrap, "hostile.contained_read", args)), {
        ok: true,
        value: "visible"
      })
      for (
        const outcome of [
          yield* runOn(uncontained, "hostile.contained_read", args),
          yield* runOn(bubblewrap, "hostile.contained_spawn", {})
        ]
      ) {
        assert.strictEqual(outcome._tag, "denied")
        assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      }
    }))

  it.live("a probe whose trial sandbox cannot run reports every capability unsupported", () =>
    Effect.gen(function*() {
      for (const bwrap of ["/nonexistent/bwrap", "/bin/false"]) {
        const report = yield* (yield* BubblewrapBackend.make({ bwrap, execArgv })).probe
        assert.deepStrictEqual(Object.values(report.containment), Array(5).fill("unsupported"))
        assert.isTrue((report.capabilities ?? []).every((claim) => claim.level === "unsupported"))
        assert.match(report.verified_by, /^probe failed: /)
      }
    }))

  it.live("a granted secret reaches its handler and appears in no argv, environment, outcome or evidence record", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(secretPolicy)
      const boundary = yield* Governance.openBoundary(ref)
      const args = { ungranted: "writ.ungranted", file: secretsFile }
      const outcome = yield* run("hostile.read_secret", args, {}, {
        policy_snapshot: ref,
        effect_backend: bubblewrap.ref
      }, { boundary })
      const seen = succeeded(outcome)
      assert.strictEqual(seen.granted, grantedDigest)
      // bwrap's own argv and environment are its init's (pid 1) in the sandbox; the runner's are /proc/self's.
      for (const where of ["init_environ", "init_cmdline", "self_environ", "self_cmdline"] as const) {
        assert.isTrue(seen[where].ok, `${where} is readable, so its absence of the secret means something`)
        assert.notInclude(seen[where].value, grantedSecret, where)
      }
      assert.include(seen.init_cmdline.value, "--unshare-all", "pid 1 is bwrap, its argv as launched")
      assert.notInclude(JSON.stringify(outcome), grantedSecret)
      const records = yield* chainRecords(boundary.chain_id)
      assert.isAbove(records.length, 2)
      for (const record of records) assert.notInclude(JSON.stringify(record), grantedSecret, record.record_type)
      assert.notInclude(JSON.stringify(records), ungrantedSecret)
    }).pipe(Effect.provide(governedInMemory(actions, {}, Layer.succeed(ActionExecutionBackend, bubblewrap)))))

  it.live("a secret the store cannot resolve fails the call before it starts, naming the secret and no value", () =>
    Effect.gen(function*() {
      const empty = path.join(root, dirs.secrets, "empty.env")
      fs.writeFileSync(empty, `# nothing granted here\nwrit.other=${grantedSecret}\n`, { mode: 0o600 })
      const backend = yield* BubblewrapBackend.make({ execArgv }).pipe(
        Effect.provide(EnvFileSecretStore.layer({ path: empty }))
      )
      const outcome = yield* runOn(backend, "hostile.read_secret", { ungranted: "writ.other", file: empty })
      assert.strictEqual(outcome._tag, "failed", JSON.stringify(outcome))
      assert.strictEqual(reasonCode(outcome), "backend.secret_unavailable")
      assert.notInclude(JSON.stringify(outcome), grantedSecret)
      const storeless = yield* BubblewrapBackend.make({ execArgv })
      const refused = yield* runOn(storeless, "hostile.read_secret", { ungranted: "writ.other", file: empty })
      assert.strictEqual(refused._tag, "denied")
      assert.strictEqual(reasonCode(refused), "containment.unsupported")
    }))

  it("the report claims nothing the attacks above did not verify", () => {
    const report = Effect.runSync(bubblewrap.probe)
    assert.strictEqual(report.report_version, 1)
    assert.strictEqual(report.mechanism?.name, "bubblewrap")
    const enforced = (report.capabilities ?? []).filter((claim) => claim.level === "enforced")
    assert.deepStrictEqual(enforced.map((claim) => claim.name).sort(), [...BubblewrapBackend.claimed].sort())
    for (const claim of enforced) {
      assert.isTrue(verifiedClaims.has(claim.name), `${claim.name} is claimed and was not verified`)
      assert.strictEqual(claim.verified, "probe")
    }
    for (const [kind, level] of Object.entries(report.containment) as Array<[ContainmentKind, string]>) {
      if (level !== "enforced") continue
      const expected = attacks.filter((attack) => attack.capability === kind).map((attack) => attack.name)
      assert.isAbove(expected.length, 0, `${kind} is claimed, and the suite has no attack on it`)
      assert.deepStrictEqual([...(verified.get(kind) ?? [])].sort(), expected.sort(), `${kind}: attacks not verified`)
    }
  })
})
