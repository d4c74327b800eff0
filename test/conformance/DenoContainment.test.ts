/**
 * The containment suite for the Deno backend, with the real deno: hostile actions, run through the real executor,
 * attempt what each capability the backend's report calls `enforced` must stop, and the test checks the effect did
 * not happen on the host (the canary stays unread, the file unwritten, the listener unconnected, the marker absent).
 * Each attack with a host-side effect also runs on a backend that contains nothing, where it must escape. The report
 * may claim nothing the suite did not verify; the matrix is printed at the end. The backends share one deno cache.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { execFileSync } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as DenoBackend from "../../adapters/node/DenoBackend.ts"
import * as EnvFileSecretStore from "../../adapters/node/EnvFileSecretStore.ts"
import * as SubprocessBackend from "../../adapters/node/internal/subprocessBackend.ts"
import type { ContainmentKind } from "../../core/action/Action.ts"
import { ActionBackendCapabilityReport, ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import { chainRecords, governedInMemory, run } from "../fixtures/layers.ts"
import { runGranted, tcpListener, udpListener } from "../fixtures/network.ts"
import { installPolicy, secretPolicy } from "../fixtures/policy.ts"
import { actions, options as plainOptions, plain, runOn } from "../fixtures/subprocess.ts"

const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "writ-deno-")))
const dirs = {
  canary: "canary",
  read: "read",
  write: "write",
  outside: "outside",
  links: "links",
  alias: "alias",
  wlinks: "wlinks",
  secrets: "secrets"
}
for (const dir of Object.values(dirs)) fs.mkdirSync(path.join(root, dir), { mode: 0o700 })
const canary = randomBytes(16).toString("hex")
const canaryPath = path.join(root, dirs.canary, "secret")
fs.writeFileSync(canaryPath, canary, { mode: 0o600 })
const canaryModule = path.join(root, dirs.canary, "secret.json")
fs.writeFileSync(canaryModule, JSON.stringify({ canary }), { mode: 0o600 })
const readRoot = path.join(root, dirs.read)
const writeRoot = path.join(root, dirs.write)
fs.writeFileSync(path.join(readRoot, "visible.txt"), "visible")
// A directory holding a denied directory with the canary in it, and a symlink to itself.
fs.mkdirSync(path.join(root, dirs.alias, "hidden"))
fs.writeFileSync(path.join(root, dirs.alias, "hidden", "secret"), canary, { mode: 0o600 })
fs.symlinkSync(path.join(root, dirs.alias), path.join(root, dirs.alias, "self"))
// Inside the read root, a directory a policy denies reading, holding the canary too.
fs.mkdirSync(path.join(readRoot, "hidden"))
fs.writeFileSync(path.join(readRoot, "hidden", "secret"), canary, { mode: 0o600 })
// The write root is a git repository with the user's own .bashrc.
execFileSync("git", ["init", "-q", writeRoot])
const bashrc = "# the user's own\n"
fs.writeFileSync(path.join(writeRoot, ".bashrc"), bashrc)
fs.symlinkSync(canaryPath, path.join(root, dirs.links, "secret"))
fs.symlinkSync(path.join(root, dirs.outside), path.join(root, dirs.wlinks, "out"))
const envCanary = randomBytes(16).toString("hex")
process.env.WRIT_CANARY = envCanary
process.env.WRIT_GRANTED = "granted"
// The secret store: an environment file outside every root, holding one secret the action is granted and one it is not.
const grantedSecret = randomBytes(16).toString("hex")
const ungrantedSecret = randomBytes(16).toString("hex")
const secretsFile = path.join(root, dirs.secrets, "secrets.env")
fs.writeFileSync(secretsFile, `writ.granted=${grantedSecret}\nwrit.ungranted=${ungrantedSecret}\n`, { mode: 0o600 })
const grantedDigest = createHash("sha256").update(grantedSecret).digest("hex")

const denoDir = path.join(root, "deno-cache")
const options = { read: [readRoot], write: [writeRoot], denoDir }
const deno = Effect.runSync(
  DenoBackend.make(options).pipe(Effect.provide(EnvFileSecretStore.layer({ path: secretsFile })))
)
const uncontained = plain()
// A plain child process injecting from the same store: the secrets attack's control.
const uncontainedWithSecrets = SubprocessBackend.make({
  ...plainOptions,
  secrets: EnvFileSecretStore.make({ path: secretsFile })
})

type Verdict = "blocked" | "escaped"
const matrix: Array<{ capability: string; attack: string; deno: string; uncontained: string }> = []
const verifiedClaims = new Set<string>()

const succeeded = (outcome: ExecutionOutcome) => {
  assert.strictEqual(outcome._tag, "succeeded", JSON.stringify(outcome))
  return (outcome as { readonly result: any }).result
}

const fresh = (dir: string) => path.join(root, dir, randomBytes(6).toString("hex"))

/** A loopback listener that counts the connections it gets, closed after `use`. */
const listening = <A, E>(use: (port: number, seen: () => number) => Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.async<{ readonly server: net.Server; readonly seen: () => number }>((resume) => {
      let connections = 0
      const server = net.createServer((socket) => {
        connections++
        socket.destroy()
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, seen: () => connections })))
    }),
    ({ seen, server }) => use((server.address() as net.AddressInfo).port, seen),
    ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )

/** An attack: what it tries on one backend, and whether its effect happened. */
interface Attack {
  readonly capability: ContainmentKind
  readonly claim: string
  readonly name: string
  readonly control?: ActionExecutionBackend.Service
  readonly run: (backend: ActionExecutionBackend.Service) => Effect.Effect<Verdict, unknown>
}

const reads = (name: string, target: string): Attack => ({
  capability: "filesystem",
  claim: "writ.filesystem.read_roots@1",
  name,
  control: uncontained,
  run: (backend) =>
    Effect.map(runOn(backend, "hostile.read_file", { path: target }), (outcome) => {
      const seen = succeeded(outcome)
      return seen.ok && seen.value.includes(canary) ? "escaped" : "blocked"
    })
})

const writes = (name: string, target: () => string): Attack => ({
  capability: "filesystem",
  claim: "writ.filesystem.write_roots@1",
  name,
  control: uncontained,
  run: (backend) => {
    const file = target()
    return Effect.map(runOn(backend, "hostile.write_file", { path: file }), (outcome): Verdict => {
      succeeded(outcome)
      const escaped = fs.existsSync(file)
      fs.rmSync(file, { force: true })
      return escaped ? "escaped" : "blocked"
    })
  }
})

/** An attack whose effect is a change to host files: escaped when `changed` says so, then the files restored. */
const changing = (
  name: string,
  action: string,
  args: Record<string, unknown>,
  changed: () => boolean,
  restore: () => void
): Attack => ({
  capability: "filesystem",
  claim: "writ.filesystem.write_roots@1",
  name,
  control: uncontained,
  run: (backend) =>
    Effect.map(runOn(backend, action, args), (outcome): Verdict => {
      succeeded(outcome)
      const escaped = changed()
      restore()
      return escaped ? "escaped" : "blocked"
    })
})

const gitDir = path.join(writeRoot, ".git")
const gitConfigBytes = fs.readFileSync(path.join(gitDir, "config"))
const hook = path.join(gitDir, "hooks", "pre-commit")
const isEmpty = (file: string) => !fs.existsSync(file) || fs.statSync(file).size === 0

// On one repository and one .bashrc, so run one after another.
const protectedAttacks: ReadonlyArray<Attack> = [
  {
    capability: "filesystem",
    claim: "writ.filesystem.write_roots@1",
    name: "make a symlink in a write root to a path outside it, and write through it",
    control: uncontained,
    run: (backend) => {
      const link = fresh(dirs.write)
      const target = fresh(dirs.outside)
      return Effect.map(runOn(backend, "hostile.symlink_write", { link, target }), (outcome): Verdict => {
        succeeded(outcome)
        const escaped = fs.existsSync(target)
        for (const file of [link, target]) fs.rmSync(file, { force: true })
        return escaped ? "escaped" : "blocked"
      })
    }
  },
  changing(
    "write .git/hooks/pre-commit in a repository in a write root",
    "hostile.write_paths",
    { paths: [hook] },
    () => fs.existsSync(hook),
    () => fs.rmSync(hook, { force: true })
  ),
  changing(
    "rewrite .git/config (core.hooksPath) in a write root",
    "hostile.write_paths",
    { paths: [path.join(gitDir, "config")] },
    () => !fs.readFileSync(path.join(gitDir, "config")).equals(gitConfigBytes),
    () => fs.writeFileSync(path.join(gitDir, "config"), gitConfigBytes)
  ),
  changing(
    "move .git away in a write root and make a new one with a hook",
    "hostile.replace_directory",
    { dir: gitDir, file: hook },
    () => fs.existsSync(`${gitDir}.moved`) || fs.existsSync(hook),
    () => {
      if (!fs.existsSync(`${gitDir}.moved`)) return
      fs.rmSync(gitDir, { recursive: true, force: true })
      fs.renameSync(`${gitDir}.moved`, gitDir)
    }
  ),
  changing(
    "rewrite .bashrc and make .zshrc and .profile in a write root",
    "hostile.write_paths",
    { paths: [".bashrc", ".zshrc", ".profile"].map((name) => path.join(writeRoot, name)) },
    () =>
      fs.readFileSync(path.join(writeRoot, ".bashrc"), "utf-8") !== bashrc ||
      !isEmpty(path.join(writeRoot, ".zshrc")) || !isEmpty(path.join(writeRoot, ".profile")),
    () => {
      fs.writeFileSync(path.join(writeRoot, ".bashrc"), bashrc)
      for (const name of [".zshrc", ".profile"]) fs.rmSync(path.join(writeRoot, name), { force: true })
    }
  )
]

const attacks: ReadonlyArray<Attack> = [
  ...protectedAttacks,
  reads("read a 0600 canary outside the read roots", canaryPath),
  reads("read a canary by `..` out of a read root", `${readRoot}/../${dirs.canary}/secret`),
  writes("write outside the write roots", () => fresh(dirs.outside)),
  writes("write inside a read root", () => fresh(dirs.read)),
  writes(
    "write by `..` out of a write root",
    () => `${writeRoot}/../${dirs.outside}/${randomBytes(6).toString("hex")}`
  ),
  {
    capability: "filesystem",
    claim: "writ.filesystem.read_roots@1",
    name: "import a canary module outside the read roots (a specifier computed at run time)",
    control: uncontained,
    run: (backend) =>
      Effect.map(runOn(backend, "hostile.import", { specifier: `file://${canaryModule}` }), (outcome) => {
        const seen = succeeded(outcome)
        return seen.ok && seen.value.includes(canary) ? "escaped" : "blocked"
      })
  },
  {
    capability: "network",
    claim: "writ.network.none@1",
    name: "open a TCP connection to a listener on 127.0.0.1",
    control: uncontained,
    run: (backend) =>
      listening((port, seen) =>
        Effect.map(runOn(backend, "hostile.connect", { host: "127.0.0.1", port }), (outcome): Verdict => {
          const result = succeeded(outcome)
          return seen() > 0 || result.ok ? "escaped" : "blocked"
        })
      )
  },
  {
    capability: "network",
    claim: "writ.network.none@1",
    name: "import a remote module served by a listener on 127.0.0.1",
    run: (backend) =>
      listening((port, seen) =>
        Effect.map(
          runOn(backend, "hostile.import", { specifier: `http://127.0.0.1:${port}/mod.js` }),
          (outcome): Verdict => seen() > 0 || succeeded(outcome).ok ? "escaped" : "blocked"
        )
      )
  },
  {
    capability: "network",
    claim: "writ.network.none@1",
    name: "import an npm: package that is not installed (a download)",
    run: (backend) =>
      Effect.map(runOn(backend, "hostile.import", { specifier: "npm:left-pad@1.3.0" }), (outcome): Verdict => {
        const downloaded = fs.existsSync(path.join(denoDir, "npm", "registry.npmjs.org", "left-pad"))
        return downloaded || succeeded(outcome).ok ? "escaped" : "blocked"
      })
  },
  {
    capability: "network",
    claim: "writ.network.loopback@1",
    name: "with one loopback port granted by the policy, reach another",
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
        assert.deepStrictEqual(seen.direct_granted, { ok: true, value: "reached" }, "the granted port is reachable")
        return ungranted.seen() > 0 || seen.direct_ungranted.ok || seen.proxied_ungranted.ok ? "escaped" : "blocked"
      }))
  },
  {
    capability: "network",
    claim: "writ.network.loopback@1",
    name:
      "with a loopback port granted, resolve a name (system resolver, a resolver and a raw query at a DNS listener)",
    control: uncontained,
    run: (backend) =>
      Effect.scoped(Effect.gen(function*() {
        const listener = yield* udpListener
        const granted = yield* tcpListener("127.0.0.1")
        const seen = succeeded(
          yield* runGranted(backend, [`127.0.0.1:${granted.port}`], "hostile.resolve", {
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
    name: "with 127.0.0.2 granted, reach 127.0.0.3 on the same port",
    control: uncontained,
    run: (backend) =>
      Effect.scoped(Effect.gen(function*() {
        const granted = yield* tcpListener("127.0.0.2")
        const other = yield* tcpListener("127.0.0.3", granted.port)
        const seen = succeeded(
          yield* runGranted(backend, [`127.0.0.2:${granted.port}`, `*.writ.test:${granted.port}`], "hostile.smuggle", {
            request: "",
            after: "",
            fallback: { host: "127.0.0.3", port: granted.port }
          })
        )
        return other.seen() > 0 || seen.ok ? "escaped" : "blocked"
      }))
  },
  {
    capability: "subprocess",
    claim: "writ.subprocess.spawn@1",
    name: "spawn a shell that writes a marker",
    control: uncontained,
    run: (backend) => {
      const marker = fresh(dirs.write)
      return Effect.map(runOn(backend, "hostile.spawn_marker", { marker }), (outcome): Verdict => {
        succeeded(outcome)
        const escaped = fs.existsSync(marker)
        fs.rmSync(marker, { force: true })
        return escaped ? "escaped" : "blocked"
      })
    }
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
    ["capability | attack | deno | uncontained control", ...matrix.map((row) => Object.values(row).join(" | "))]
      .join("\n")
  )
  fs.rmSync(root, { recursive: true, force: true })
})

const expectOutcome = (outcome: ExecutionOutcome, tag: ExecutionOutcome["_tag"], code: string) => {
  assert.strictEqual(outcome._tag, tag, JSON.stringify(outcome))
  assert.strictEqual(reasonCode(outcome), code)
}

describe("deno containment", () => {
  it.live("the probe's trial run was refused a read outside its root, and the report says by the runtime", () =>
    Effect.gen(function*() {
      const report = yield* deno.probe
      assert.deepStrictEqual(report.containment, {
        filesystem: "enforced",
        network: "enforced",
        subprocess: "enforced",
        environment: "enforced",
        secrets: "enforced"
      })
      assert.strictEqual(report.mechanism?.name, "deno")
      assert.match(report.mechanism?.version ?? "", /^2\.\d+\.\d+$/)
      assert.match(report.verified_by, /^probe: a trial run \(deno 2\.\d+\.\d+ at \/\S+\)/)
      assert.include(report.verified_by, "writ's own uid with no memory or process limit")
      for (const claim of report.capabilities ?? []) {
        if (claim.level === "enforced") assert.strictEqual(claim.by, "runtime")
      }
    }))

  const attempt = (attack: Attack) =>
    Effect.gen(function*() {
      const contained = yield* attack.run(deno)
      const control = attack.control === undefined ? "-" : yield* attack.run(attack.control)
      matrix.push({ capability: attack.capability, attack: attack.name, deno: contained, uncontained: control })
      if (attack.control !== undefined) assert.strictEqual(control, "escaped", "the attack works uncontained")
      assert.strictEqual(contained, "blocked")
      verifiedClaims.add(attack.claim)
    })

  for (const attack of protectedAttacks) {
    it.live(`${attack.capability}: ${attack.name} is blocked, and escapes uncontained`, () => attempt(attack))
  }

  describe.concurrent("attacks", () => {
    for (const attack of attacks.filter((attack) => !protectedAttacks.includes(attack))) {
      it.live(
        `${attack.capability}: ${attack.name} is blocked${attack.control ? ", and escapes uncontained" : ""}`,
        () => attempt(attack)
      )
    }

    it.live("a symlink in a read or write root that leads out of its roots is refused at admission, unread", () =>
      Effect.gen(function*() {
        const cases = [
          { read: [path.join(root, dirs.links)], action: "hostile.read_file", args: { path: `${root}/links/secret` } },
          {
            write: [path.join(root, dirs.wlinks)],
            action: "hostile.write_file",
            args: { path: `${root}/wlinks/out/x` }
          }
        ]
        for (const { action, args, ...roots } of cases) {
          const backend = yield* DenoBackend.make({ ...roots, denoDir })
          const outcome = yield* runOn(backend, action, args)
          expectOutcome(outcome, "denied", "containment.unsupported")
          assert.strictEqual(outcome.stage, "bind_context")
          assert.include(outcome._tag === "denied" ? outcome.reason.detail : "", "is a symlink that leads out of")
        }
        const control = succeeded(yield* runOn(uncontained, "hostile.read_file", cases[0]!.args))
        assert.deepStrictEqual(control, { ok: true, value: canary }, "the link leads to the canary")
        assert.isFalse(fs.existsSync(path.join(root, dirs.outside, "x")))
        matrix.push({
          capability: "filesystem",
          attack: "follow a symlink out of a root",
          deno: "blocked",
          uncontained: "escaped"
        })
      }))

    it.live("named destinations: a granted host:port is reachable, another port on the same host is not", () =>
      listening((granted, grantedSeen) =>
        listening((other, otherSeen) =>
          Effect.gen(function*() {
            const backend = yield* DenoBackend.make({ net: [`127.0.0.1:${granted}`], denoDir })
            const claims = (yield* backend.probe).capabilities ?? []
            const level = (name: string) => claims.find((claim) => claim.name === name)?.level
            assert.strictEqual(level("writ.network.destinations@1"), "enforced")
            assert.strictEqual(level("writ.network.none@1"), "unsupported")
            const reached = succeeded(yield* runOn(backend, "hostile.connect", { host: "127.0.0.1", port: granted }))
            assert.deepStrictEqual(reached, { ok: true, value: "connected" })
            assert.isAbove(grantedSeen(), 0)
            const refused = succeeded(yield* runOn(backend, "hostile.connect", { host: "127.0.0.1", port: other }))
            assert.isFalse(refused.ok)
            assert.strictEqual(otherSeen(), 0, "the other port got no connection")
            matrix.push({
              capability: "network",
              attack: "connect to an ungranted port of a granted host",
              deno: "blocked",
              uncontained: "-"
            })
          })
        )
      ))

    it.live("a read root is readable, a write root writable, a declared variable present", () =>
      Effect.gen(function*() {
        const visible = succeeded(yield* runOn(deno, "hostile.read_file", { path: path.join(readRoot, "visible.txt") }))
        assert.deepStrictEqual(visible, { ok: true, value: "visible" })
        const target = fresh(dirs.write)
        assert.deepStrictEqual(succeeded(yield* runOn(deno, "hostile.write_file", { path: target })), {
          ok: true,
          value: "written"
        })
        assert.strictEqual(fs.readFileSync(target, "utf-8"), "escaped")
        const { env } = succeeded(yield* runOn(deno, "hostile.read_environment", { variable: "WRIT_GRANTED" }))
        assert.deepStrictEqual(env, { ok: true, value: "granted" })
      }))

    it.live("a missing module or export, a throwing handler and a result its Schema refuses are typed failures", () =>
      Effect.gen(function*() {
        expectOutcome(yield* runOn(deno, "child.missing_module", {}), "failed", "backend.module_unavailable")
        expectOutcome(yield* runOn(deno, "child.missing_export", {}), "failed", "backend.module_unavailable")
        expectOutcome(yield* runOn(deno, "child.refuse", {}), "failed", "child.refused")
        expectOutcome(yield* runOn(deno, "child.throwing", {}), "failed", "handler.failed")
        expectOutcome(yield* runOn(deno, "child.bad_output", {}), "failed", "backend.output_invalid")
        const sum = succeeded(yield* runOn(deno, "child.add", { a: 0.1, b: 0.2 }))
        assert.strictEqual(sum, 0.1 + 0.2)
      }))

    it.live("wall clock: a run past the backend's wall clock is killed, and its action stops", () =>
      Effect.gen(function*() {
        const backend = yield* DenoBackend.make({ write: [writeRoot], denoDir, wallClock: "6 seconds" })
        const ticks = fresh(dirs.write)
        const outcome = yield* runOn(backend, "child.tick", { marker: ticks })
        assert.strictEqual(outcome._tag, "timed_out", JSON.stringify(outcome))
        assert.isTrue(outcome._tag === "timed_out" && outcome.call_executed)
        // A moment for the process group to go down; ticking on, it would append a dozen times in what follows.
        yield* Effect.sleep("200 millis")
        const before = fs.statSync(ticks).size
        assert.isAbove(before, 0, "the action was ticking when the clock ran out")
        yield* Effect.sleep("600 millis")
        assert.strictEqual(fs.statSync(ticks).size, before, "no tick after the kill")
        matrix.push({ capability: "wall clock", attack: "loop past the wall clock", deno: "blocked", uncontained: "-" })
        verifiedClaims.add("writ.wall_clock@1")
      }))

    it.live("the report drives admission: required containment it enforces is admitted and holds, uncontained denied", () =>
      Effect.gen(function*() {
        const spawned = succeeded(yield* runOn(deno, "hostile.contained_spawn", {}))
        assert.isFalse(spawned.ok, "admitted, and its subprocess refused")
        const read = succeeded(yield* runOn(deno, "hostile.contained_read", { path: canaryPath }))
        assert.isFalse(read.ok)
        expectOutcome(
          yield* runOn(uncontained, "hostile.contained_read", { path: canaryPath }),
          "denied",
          "containment.unsupported"
        )
      }))
  })

  it.live(
    "policy roots: a governed call gets the policy's filesystem roots narrowed by the backend's, its denials denied",
    () =>
      Effect.gen(function*() {
        // The backend's own roots are wide (the suite's directories but deno's cache); the policy's are narrow.
        const wide = yield* DenoBackend.make({
          read: [dirs.canary, dirs.read, dirs.links, dirs.alias].map((dir) => path.join(root, dir)),
          write: [dirs.write, dirs.outside].map((dir) => path.join(root, dir)),
          denoDir
        })
        const narrow = yield* DenoBackend.make({ read: [readRoot], denoDir })
        const locked = path.join(writeRoot, "locked")
        const linkPath = path.join(root, dirs.links, "secret")
        const allowAll = { kind: "action", effect: "allow", action_patterns: ["*"] }
        const rules = [
          allowAll,
          { kind: "filesystem", effect: "allow", roots: [`${readRoot}/**`], modes: ["read"] },
          { kind: "filesystem", effect: "allow", roots: [writeRoot], modes: ["read", "write"] },
          { kind: "filesystem", effect: "deny", roots: [path.join(readRoot, "hidden", "**")], modes: ["read"] },
          { kind: "filesystem", effect: "deny", roots: [locked], modes: ["write"] }
        ]
        // `calls` in a task boundary of its own, under `policy`, on `backend`.
        const governed = <A>(
          policy: unknown,
          backend: ActionExecutionBackend.Service,
          calls: (
            call: (action: string, args: Record<string, unknown>) => Effect.Effect<ExecutionOutcome>
          ) => Effect.Effect<A>
        ) =>
          Effect.gen(function*() {
            const ref = yield* installPolicy(policy as typeof secretPolicy)
            const boundary = yield* Governance.openBoundary(ref)
            return yield* calls((action, args) =>
              run(action, args, {}, { policy_snapshot: ref, effect_backend: backend.ref }, {
                boundary
              }) as Effect.Effect<
                ExecutionOutcome
              >
            )
          }).pipe(Effect.provide(governedInMemory(actions, {}, Layer.succeed(ActionExecutionBackend, backend))))
        const readCanary = (outcome: ExecutionOutcome) =>
          outcome._tag === "succeeded" && (outcome.result as any).ok === true &&
          (outcome.result as any).value === canary
        // Each attack under `policy` on the wide backend, and whether its effect happened on the host.
        const attacks = (policy: unknown) =>
          governed(policy, wide, (call) => {
            const outside = fresh(dirs.outside)
            const lockedFile = path.join(locked, randomBytes(6).toString("hex"))
            const inside = fresh(dirs.write)
            return Effect.map(
              Effect.all({
                canary: call("hostile.read_file", { path: canaryPath }),
                written: call("hostile.write_paths", { paths: [outside, lockedFile, inside] }),
                hidden: call("hostile.read_file", { path: path.join(readRoot, "hidden", "secret") }),
                visible: call("hostile.read_file", { path: path.join(readRoot, "visible.txt") })
              }),
              (seen) => {
                const escaped = {
                  canary: readCanary(seen.canary),
                  outside: fs.existsSync(outside),
                  locked: fs.existsSync(lockedFile),
                  hidden: readCanary(seen.hidden)
                }
                const written = fs.existsSync(inside) && fs.readFileSync(inside, "utf-8") === "escaped"
                for (const file of [outside, lockedFile, inside]) fs.rmSync(file, { force: true })
                return { escaped, visible: seen.visible, written }
              }
            )
          })
        const contained = yield* attacks({ policy_id: "roots", version: "1", rules })
        // The control: the same wide backend under a policy with no filesystem rule keeps its own roots.
        const control = yield* attacks(secretPolicy)
        fs.rmSync(locked, { recursive: true, force: true })
        // A symlink in the policy's read root to the canary, outside it and inside the backend's roots.
        const linkRead = (policy: unknown) =>
          governed(policy, wide, (call) => call("hostile.read_file", { path: linkPath }))
        const linked = yield* linkRead({
          policy_id: "links",
          version: "1",
          rules: [allowAll, {
            kind: "filesystem",
            effect: "allow",
            roots: [path.join(root, dirs.links)],
            modes: ["read"]
          }]
        })
        const linkedControl = yield* linkRead(secretPolicy)
        // A symlink in the policy's read root to a directory holding a path it denies: the denial by another name.
        const aliasRead = (policy: unknown) =>
          governed(policy, wide, (call) =>
            call("hostile.read_file", { path: path.join(root, dirs.alias, "self", "hidden", "secret") }))
        const aliased = yield* aliasRead({
          policy_id: "alias",
          version: "1",
          rules: [
            allowAll,
            { kind: "filesystem", effect: "allow", roots: [path.join(root, dirs.alias)], modes: ["read"] },
            { kind: "filesystem", effect: "deny", roots: [path.join(root, dirs.alias, "hidden")], modes: ["read"] }
          ]
        })
        const aliasedControl = yield* aliasRead(secretPolicy)
        // The policy is no wider than the backend either: it allows the whole suite directory, the backend one root.
        const widened = yield* governed(
          {
            policy_id: "wide",
            version: "1",
            rules: [allowAll, { kind: "filesystem", effect: "allow", roots: [`${root}/**`], modes: ["read"] }]
          },
          narrow,
          (call) =>
            call("hostile.read_file", { path: canaryPath })
        )
        const names: Record<keyof typeof contained.escaped, string> = {
          canary: "read a canary inside the backend's roots and outside the policy's",
          outside: "write inside the backend's write root and outside the policy's",
          locked: "write where the policy denies writing, inside its write root",
          hidden: "read where the policy denies reading, inside its read root (a glob)"
        }
        const verdict = (escaped: boolean) =>
          escaped ? "escaped" : "blocked"
        for (const attack of Object.keys(names) as Array<keyof typeof names>) {
          matrix.push({
            capability: "policy roots",
            attack: names[attack],
            deno: verdict(contained.escaped[attack]),
            uncontained: verdict(control.escaped[attack])
          })
        }
        matrix.push({
          capability: "policy roots",
          attack: "read through a symlink in the policy's read root to a canary outside it, inside the backend's",
          deno: verdict(readCanary(linked)),
          uncontained: verdict(readCanary(linkedControl))
        })
        matrix.push({
          capability: "policy roots",
          attack: "read a path the policy denies through a symlink in its read root to the directory holding it",
          deno: verdict(readCanary(aliased)),
          uncontained: verdict(readCanary(aliasedControl))
        })
        matrix.push({
          capability: "policy roots",
          attack: "read a canary the policy allows and the backend's roots do not",
          deno: verdict(readCanary(widened)),
          uncontained: "-"
        })
        assert.deepStrictEqual(
          control.escaped,
          { canary: true, outside: true, locked: true, hidden: true },
          "every attack works on the backend's own roots"
        )
        assert.deepStrictEqual(contained.escaped, { canary: false, outside: false, locked: false, hidden: false })
        assert.deepStrictEqual(
          succeeded(contained.visible),
          { ok: true, value: "visible" },
          "the read root is readable"
        )
        assert.isTrue(contained.written, "the policy's write root is writable")
        assert.isTrue(readCanary(linkedControl), "the link leads to the canary")
        // The symlink out of the policy's narrower root refuses the call before the action runs.
        expectOutcome(linked, "failed", "backend.request_refused")
        assert.isTrue(readCanary(aliasedControl), "the alias leads to the denied canary")
        expectOutcome(aliased, "failed", "backend.request_refused")
        assert.isFalse(readCanary(widened))
        assert.deepStrictEqual(succeeded(widened), { ok: false, value: succeeded(widened).value })
      }),
    240_000
  )

  it.live("governed: the preflight report in operation_started binds deno's capability report", () =>
    Effect.gen(function*() {
      const report = yield* deno.probe
      const ref = yield* installPolicy({ policy_id: "p", version: "1", mode: "allow_all" })
      const boundary = yield* Governance.openBoundary(ref)
      const outcome = yield* run("child.add", { a: 1, b: 2 }, {}, { policy_snapshot: ref, effect_backend: deno.ref }, {
        boundary
      })
      assert.strictEqual(succeeded(outcome), 3)
      const started = (yield* chainRecords(boundary.chain_id)).find((r) => r.record_type === "operation_started")!
      const payload = JSON.parse(started.payload_json)
      const digest = yield* Digest.canonical(Schema.encodeSync(ActionBackendCapabilityReport)(report))
      assert.deepStrictEqual(payload.backend, { id: "deno", version: "1", capability_digest: digest })
      assert.match(payload.preflight.digest, /^[0-9a-f]{64}$/)
      assert.match(payload.preflight.report_id, /^[0-9a-f-]{36}$/)
    }).pipe(Effect.provide(governedInMemory(actions, {}, Layer.succeed(ActionExecutionBackend, deno)))))

  it.live("governed: a granted secret reaches its handler and appears in no argv, outcome or evidence record", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(secretPolicy)
      const boundary = yield* Governance.openBoundary(ref)
      const args = { ungranted: "writ.ungranted", file: secretsFile }
      const outcome = yield* run("hostile.read_secret", args, {}, { policy_snapshot: ref, effect_backend: deno.ref }, {
        boundary
      })
      const seen = succeeded(outcome)
      assert.strictEqual(seen.granted, grantedDigest)
      for (const where of ["init_environ", "init_cmdline", "self_environ", "self_cmdline"] as const) {
        assert.notInclude(seen[where].value, grantedSecret, where)
      }
      assert.notInclude(JSON.stringify(outcome), grantedSecret)
      const records = yield* chainRecords(boundary.chain_id)
      assert.isAbove(records.length, 2)
      for (const record of records) assert.notInclude(JSON.stringify(record), grantedSecret, record.record_type)
    }).pipe(Effect.provide(governedInMemory(actions, {}, Layer.succeed(ActionExecutionBackend, deno)))))

  it("the report claims nothing the attacks above did not verify", () => {
    const report = Effect.runSync(deno.probe)
    assert.strictEqual(report.report_version, 1)
    const enforced = (report.capabilities ?? []).filter((claim) => claim.level === "enforced")
    assert.deepStrictEqual(enforced.map((claim) => claim.name).sort(), [...DenoBackend.claimed].sort())
    for (const claim of enforced) {
      assert.isTrue(verifiedClaims.has(claim.name), `${claim.name} is claimed and was not verified`)
      assert.strictEqual(claim.verified, "probe")
    }
    for (const [kind, level] of Object.entries(report.containment) as Array<[ContainmentKind, string]>) {
      if (level !== "enforced") continue
      assert.isTrue(attacks.some((attack) => attack.capability === kind), `${kind} is claimed, and has no attack`)
    }
  })
})
