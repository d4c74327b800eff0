/**
 * The containment suite for the bubblewrap backend: hostile actions, run through the real executor, attempt what each
 * capability the backend's report calls `enforced` must stop, and the test checks the effect did not happen on the
 * host (the canary stays unread, the file unwritten, the listener unconnected). Each attack also runs on a backend
 * that contains nothing, where it must escape, so no attack here passes for being unable to succeed. The report may
 * claim nothing the suite did not verify; the matrix is printed at the end.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../adapters/node/BubblewrapBackend.ts"
import * as EnvFileSecretStore from "../../adapters/node/EnvFileSecretStore.ts"
import { flags, runtimeBinds } from "../../adapters/node/internal/bwrap.ts"
import * as HostPaths from "../../adapters/node/internal/hostPaths.ts"
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
const dirs = {
  canary: "canary",
  read: "read",
  write: "write",
  bare: "bare",
  outside: "outside",
  secrets: "secrets",
  modules: "modules",
  swap: "swap"
}
for (const dir of Object.values(dirs)) fs.mkdirSync(path.join(root, dir), { mode: 0o700 })
const canaryPath = path.join(root, dirs.canary, "secret")
const canary = randomBytes(16).toString("hex")
fs.writeFileSync(canaryPath, canary, { mode: 0o600 })
const readRoot = path.join(root, dirs.read)
const writeRoot = path.join(root, dirs.write)
fs.writeFileSync(path.join(readRoot, "visible.txt"), "visible")
// A denied directory inside the read root (denied by a glob) holding a canary of its own.
fs.mkdirSync(path.join(readRoot, "hidden"))
fs.writeFileSync(path.join(readRoot, "hidden", "secret"), canary)
// The write root is a git repository with the user's own .bashrc; a second write root has no repository.
execFileSync("git", ["init", "-q", writeRoot])
const bashrc = "# the user's own\n"
fs.writeFileSync(path.join(writeRoot, ".bashrc"), bashrc)
const bareRoot = path.join(root, dirs.bare)
// A module directory the backend binds (read-only) for the action's imports.
const moduleFile = path.join(root, dirs.modules, "module.js")
fs.writeFileSync(path.join(root, dirs.modules, "package.json"), "{}")
fs.writeFileSync(moduleFile, "export {}\n")
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
  BubblewrapBackend.make({
    read: [readRoot],
    write: [writeRoot, bareRoot],
    deny: [path.join(readRoot, "hidden", "**"), path.join(writeRoot, "private")],
    modules: [moduleFile],
    execArgv
  }).pipe(Effect.provide(secretStore))
)
// A read root that is swapped for a symlink to the canary's directory: once after the backend resolved it (before a
// call), once after the call opened it (by the bwrap it starts: a wrapper swaps, then execs the real one).
const swapRoot = path.join(root, dirs.swap)
const swapTrigger = path.join(root, "swap-now")
const swapWrapper = path.join(root, "bwrap-swapping")
fs.writeFileSync(
  swapWrapper,
  `#!/bin/sh\nif [ -e ${swapTrigger} ]; then /bin/rm ${swapTrigger}; /bin/mv ${swapRoot} ${swapRoot}.orig; ` +
    `/bin/ln -s ${path.join(root, dirs.canary)} ${swapRoot}; fi\nexec ${
      HostPaths.which("bwrap", process.env.PATH)
    } "$@"\n`,
  { mode: 0o755 }
)
const swapping = Effect.runSync(BubblewrapBackend.make({ read: [swapRoot], bwrap: swapWrapper, execArgv }))
const unswap = () => {
  if (fs.existsSync(`${swapRoot}.orig`)) {
    fs.rmSync(swapRoot, { force: true })
    fs.renameSync(`${swapRoot}.orig`, swapRoot)
  }
}
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
const bwrapPath = HostPaths.which("bwrap", process.env.PATH)!
const tools = [
  ...new Set([python, unshare, bwrapPath].flatMap((tool) => runtimeBinds(tool).map((bind) => bind.target)))
]
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
  /** The contained backend it runs on (default: the suite's bubblewrap backend). */
  readonly contained?: ActionExecutionBackend.Service
  readonly run: (backend: ActionExecutionBackend.Service) => Effect.Effect<Verdict, unknown>
}

/** An attack whose effect is a change to host files: escaped when `changed` says so, then the files restored. */
const changing = (
  claim: string,
  name: string,
  action: string,
  args: Record<string, unknown>,
  changed: () => boolean,
  restore: () => void
): Attack => ({
  capability: "filesystem",
  claim,
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

const gitConfig = path.join(writeRoot, ".git", "config")
const gitConfigBytes = fs.readFileSync(gitConfig)
const hook = path.join(writeRoot, ".git", "hooks", "pre-commit")
const bareHook = path.join(bareRoot, ".git", "hooks", "pre-commit")
const moduleBytes = fs.readFileSync(moduleFile)
const secretsBytes = fs.readFileSync(secretsFile)
const isEmpty = (file: string) => !fs.existsSync(file) || fs.statSync(file).size === 0

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
  },
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
    "writ.filesystem.write_roots@1",
    "write .git/hooks/pre-commit in a repository in a write root",
    "hostile.write_paths",
    { paths: [hook] },
    () => fs.existsSync(hook),
    () => fs.rmSync(hook, { force: true })
  ),
  changing(
    "writ.filesystem.write_roots@1",
    "rewrite .git/config (core.hooksPath) in a write root",
    "hostile.write_paths",
    { paths: [gitConfig] },
    () => !fs.readFileSync(gitConfig).equals(gitConfigBytes),
    () => fs.writeFileSync(gitConfig, gitConfigBytes)
  ),
  changing(
    "writ.filesystem.write_roots@1",
    "move .git away in a write root and make a new one with a hook",
    "hostile.replace_directory",
    { dir: path.join(writeRoot, ".git"), file: hook },
    () => fs.existsSync(`${path.join(writeRoot, ".git")}.moved`) || fs.existsSync(hook),
    () => {
      if (!fs.existsSync(`${path.join(writeRoot, ".git")}.moved`)) return
      fs.rmSync(path.join(writeRoot, ".git"), { recursive: true, force: true })
      fs.renameSync(`${path.join(writeRoot, ".git")}.moved`, path.join(writeRoot, ".git"))
    }
  ),
  changing(
    "writ.filesystem.write_roots@1",
    "make .git/hooks/pre-commit in a write root with no repository",
    "hostile.write_paths",
    { paths: [bareHook] },
    () => fs.existsSync(bareHook),
    () => fs.rmSync(path.join(bareRoot, ".git", "hooks"), { recursive: true, force: true })
  ),
  changing(
    "writ.filesystem.write_roots@1",
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
  ),
  {
    capability: "filesystem",
    claim: "writ.filesystem.read_roots@1",
    name: "read a file under a denied glob inside a read root",
    control: uncontained,
    run: (backend) =>
      Effect.map(
        runOn(backend, "hostile.read_file", { path: path.join(readRoot, "hidden", "secret") }),
        (outcome) => {
          const seen = succeeded(outcome)
          return seen.ok && seen.value.includes(canary) ? "escaped" : "blocked"
        }
      )
  },
  changing(
    "writ.filesystem.write_roots@1",
    "write into a denied directory inside a write root",
    "hostile.write_paths",
    { paths: [path.join(writeRoot, "private", "planted")] },
    () => fs.existsSync(path.join(writeRoot, "private", "planted")),
    () => fs.rmSync(path.join(writeRoot, "private", "planted"), { force: true })
  ),
  changing(
    "writ.filesystem.write_roots@1",
    "turn its sandbox off: rewrite a module the backend binds in, and the secrets file it reads",
    "hostile.write_paths",
    { paths: [moduleFile, secretsFile] },
    () => !fs.readFileSync(moduleFile).equals(moduleBytes) || !fs.readFileSync(secretsFile).equals(secretsBytes),
    () => {
      fs.writeFileSync(moduleFile, moduleBytes)
      fs.writeFileSync(secretsFile, secretsBytes, { mode: 0o600 })
    }
  ),
  {
    capability: "filesystem",
    claim: "writ.filesystem.read_roots@1",
    name: "swap a read root for a symlink out after the backend resolved it, and after the call opened it",
    control: uncontained,
    contained: swapping,
    run: (backend) =>
      Effect.gen(function*() {
        const args = { path: path.join(swapRoot, "secret") }
        yield* backend.probe
        // After make, before the call: the path the backend resolved is now a symlink out.
        fs.renameSync(swapRoot, `${swapRoot}.orig`)
        fs.symlinkSync(path.join(root, dirs.canary), swapRoot)
        const early = yield* Effect.ensuring(runOn(backend, "hostile.read_file", args), Effect.sync(unswap))
        // After the call opened its roots and before bwrap mounts them (the wrapper swaps in between).
        fs.writeFileSync(swapTrigger, "")
        const late = yield* Effect.ensuring(runOn(backend, "hostile.read_file", args), Effect.sync(unswap))
        fs.rmSync(swapTrigger, { force: true })
        const read = (outcome: ExecutionOutcome) =>
          outcome._tag === "succeeded" && (outcome.result as any).ok && (outcome.result as any).value.includes(canary)
        if (backend === swapping) {
          assert.strictEqual(early._tag, "failed", JSON.stringify(early))
          assert.strictEqual(reasonCode(early), "backend.request_refused")
          assert.deepStrictEqual(succeeded(late), { ok: false, value: "ENOENT" }, "the original root was bound")
        }
        return read(early) || read(late) ? "escaped" : "blocked"
      })
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
        const contained = yield* attack.run(attack.contained ?? bubblewrap)
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
    { attack: "set up io_uring (libuv, UV_USE_IO_URING=1)", action: "hostile.io_uring", args: {}, refused: "rings 0" },
    {
      attack: "turn its sandbox off: start bwrap again inside, binding / anew",
      action: "hostile.nested_bwrap",
      args: { bwrap: bwrapPath },
      refused: "bwrap: No permissions to create new namespace"
    }
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
        assert.isTrue(contained.value.startsWith(refused), `${attack}: ${contained.value}`)
      }), 120_000)
  }

  // A pty whose slave is the controlling terminal of a python session leader, which runs `command` on it and then
  // reads what reached the terminal's input queue: a TIOCSTI injection lands there, in front of the user's shell.
  const onTerminal = (command: ReadonlyArray<string>) =>
    execFileSync(python, [
      "-I",
      "-S",
      "-c",
      `import fcntl, os, pty, sys, termios, tty
master, slave = pty.openpty()
tty.setraw(slave)
os.setsid()
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
pid = os.fork()
if pid == 0:
    for fd in (0, 1, 2): os.dup2(slave, fd)
    os.execv(sys.argv[1], sys.argv[1:])
os.waitpid(pid, 0)
os.set_blocking(slave, False)
try: sys.stdout.write(os.read(slave, 4096).decode())
except BlockingIOError: pass`,
      ...command
    ], { env: {}, encoding: "utf-8", timeout: 60_000 })

  it.live(
    "terminal: injecting into the controlling terminal (TIOCSTI under a pty) never reaches its input",
    () =>
      Effect.sync(() => {
        // The backend's own flags and runtime binds, bound by path here (the binds are not what this attacks).
        const binds = [...runtimeBinds(python), {
          source: `/usr/lib/${path.basename(python)}`,
          target: `/usr/lib/${path.basename(python)}`
        }]
        const inject = [
          python,
          "-I",
          "-S",
          "-c",
          "import fcntl, termios\nfor c in b'echo pwned\\n': fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))"
        ]
        const sandboxed = (own: ReadonlyArray<string>) => [
          bwrapPath,
          ...own,
          ...binds.flatMap((bind) => ["--ro-bind", bind.source, bind.target]),
          "--",
          ...inject
        ]
        const control = onTerminal(sandboxed(flags.filter((flag) => flag !== "--new-session")))
        const contained = onTerminal(sandboxed(flags))
        matrix.push({
          capability: "terminal",
          attack: "inject `echo pwned` into the controlling terminal (TIOCSTI, under a pty)",
          bubblewrap: contained.includes("pwned") ? "escaped" : "blocked",
          uncontained: control.includes("pwned") ? "escaped" : "blocked"
        })
        assert.strictEqual(control, "echo pwned\n", "without a new session the injection reaches the terminal's input")
        assert.strictEqual(contained, "", "the sandbox's injection never reached the terminal")
      }),
    120_000
  )

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
        // The bridge as the host sees it while the call runs, once it is socat: its cgroups, uid and capabilities (the
        // probe's trial bridge, which runs in no call's group, done before).
        yield* bubblewrap.probe
        const socat = HostPaths.which("socat", process.env.PATH)!
        const bridged = new Map<string, string>()
        const sample = () => {
          for (const pid of bridges()) {
            try {
              if (!fs.readFileSync(`/proc/${pid}/cmdline`, "utf-8").startsWith(`${socat}\0`)) continue
              const status = fs.readFileSync(`/proc/${pid}/status`, "utf-8")
              const fields = ["Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb", "NoNewPrivs"]
                .map((name) => new RegExp(`^${name}:[ \t]*(.*)$`, "m").exec(status)?.[1]?.trim().replace(/\s+/g, " "))
              const groups = fs.readFileSync(`/proc/${pid}/cgroup`, "utf-8").split("\n")
                .filter((line) => /:(memory|pids):/.test(line)).map((line) => line.split(":").slice(1).join(":"))
              bridged.set(pid, JSON.stringify({ fields, groups: groups.sort() }))
            } catch {
              // Gone between the listing and the read.
            }
          }
        }
        const timer = setInterval(sample, 10)
        const reached = succeeded(
          yield* Effect.ensuring(
            runGranted(bubblewrap, [`127.0.0.1:${granted.port}`], "hostile.loopback", args),
            Effect.sync(() => clearInterval(timer))
          )
        )
        assert.deepStrictEqual(reached.proxied_granted, { ok: true, value: "reached" })
        assert.isAbove(bridged.size, 0, "the bridge was seen while the call ran")
        const call = [...bridged.values()].map((text) => JSON.parse(text))
        for (const { fields, groups } of call) {
          assert.deepStrictEqual(fields, [
            "65534 65534 65534 65534",
            "65534 65534 65534 65534",
            "",
            ...Array(5).fill("0000000000000000"),
            "1"
          ])
          assert.strictEqual(groups.length, 2)
          assert.match(groups[0], /^memory:\/writ\/call-[0-9a-f]{16}$/)
          assert.strictEqual(
            groups[1],
            `pids:${groups[0].slice("memory:".length)}`,
            "the call's pair, both controllers"
          )
        }
        yield* Effect.sleep("100 millis")
        for (const pid of bridged.keys()) assert.isFalse(fs.existsSync(`/proc/${pid}`), `the bridge ${pid} is gone`)
        const group = call[0].groups[1].slice("pids:".length)
        assert.isFalse(fs.existsSync(path.join("/sys/fs/cgroup/pids", group)), "its cgroup is removed")
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

  it.live(
    "policy roots: a governed call binds the policy's filesystem roots narrowed by the backend's, its denials over-mounted",
    () =>
      Effect.gen(function*() {
        // The backend's own roots are wide (the whole suite directory); the policy's are narrow.
        const wide = yield* BubblewrapBackend.make({ read: [root], write: [root], execArgv })
        const narrow = yield* BubblewrapBackend.make({ read: [readRoot], execArgv })
        const locked = path.join(writeRoot, "locked")
        const rules = [
          { kind: "action", effect: "allow", action_patterns: ["*"] },
          { kind: "filesystem", effect: "allow", roots: [`${readRoot}/**`], modes: ["read"] },
          { kind: "filesystem", effect: "allow", roots: [writeRoot], modes: ["read", "write"] },
          { kind: "filesystem", effect: "deny", roots: [path.join(readRoot, "hidden")], modes: ["read"] },
          { kind: "filesystem", effect: "deny", roots: [locked], modes: ["write"] }
        ]
        // Run `calls` in a task boundary of its own, under `policy`, on `backend`.
        const governed = <A>(
          policy: unknown,
          backend: ActionExecutionBackend.Service,
          calls: (
            call: (action: string, args: Record<string, unknown>) => Effect.Effect<any, any, any>
          ) => Effect.Effect<A, any, any>
        ) =>
          Effect.gen(function*() {
            const ref = yield* installPolicy(policy as typeof secretPolicy)
            const boundary = yield* Governance.openBoundary(ref)
            return yield* calls((action, args) =>
              Effect.map(
                run(action, args, {}, { policy_snapshot: ref, effect_backend: backend.ref }, { boundary }),
                succeeded
              )
            )
          }).pipe(
            Effect.provide(governedInMemory(actions, {}, Layer.succeed(ActionExecutionBackend, backend)))
          ) as Effect.Effect<A>
        const outside = fresh(dirs.outside)
        const lockedFile = path.join(locked, randomBytes(6).toString("hex"))
        const inside = fresh(dirs.write)
        const seen = yield* governed({ policy_id: "roots", version: "1", rules }, wide, (call) =>
          Effect.all({
            canary: call("hostile.read_file", { path: canaryPath }),
            written: call("hostile.write_paths", { paths: [outside, lockedFile, inside] }),
            hidden: call("hostile.read_file", { path: path.join(readRoot, "hidden", "secret") }),
            visible: call("hostile.read_file", { path: path.join(readRoot, "visible.txt") })
          }))
        // The policy is no wider than the backend either: it allows the whole suite directory, the backend one root.
        const widened = yield* governed(
          {
            policy_id: "wide",
            version: "1",
            rules: [rules[0], { kind: "filesystem", effect: "allow", roots: [`${root}/**`], modes: ["read"] }]
          },
          narrow,
          (call) => call("hostile.read_file", { path: canaryPath })
        )
        // The control: the same wide backend under a policy with no filesystem rule binds its own roots, canary and all.
        const control = yield* governed(secretPolicy, wide, (call) => call("hostile.read_file", { path: canaryPath }))
        const escaped = {
          canary: seen.canary.ok,
          outside: fs.existsSync(outside),
          locked: fs.existsSync(lockedFile),
          hidden: seen.hidden.ok,
          widened: widened.ok
        }
        const names: Record<keyof typeof escaped, string> = {
          canary: "read a canary inside the backend's roots and outside the policy's",
          outside: "write inside the backend's write root and outside the policy's",
          locked: "write where the policy denies writing, inside its write root",
          hidden: "read where the policy denies reading, inside its read root",
          widened: "read a canary the policy allows and the backend's roots do not"
        }
        for (const [attack, verdict] of Object.entries(escaped)) {
          matrix.push({
            capability: "policy roots",
            attack: names[attack as keyof typeof escaped],
            bubblewrap: verdict ? "escaped" : "blocked",
            uncontained: control.ok && control.value === canary ? "escaped" : "blocked"
          })
        }
        assert.deepStrictEqual(control, { ok: true, value: canary }, "the backend's own roots hold the canary")
        assert.deepStrictEqual(escaped, { canary: false, outside: false, locked: false, hidden: false, widened: false })
        assert.deepStrictEqual(seen.visible, { ok: true, value: "visible" }, "the policy's read root is bound")
        assert.strictEqual(fs.readFileSync(inside, "utf-8"), "escaped", "the policy's write root is bound writable")
        fs.rmSync(inside)
      }),
    240_000
  )

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
    for (const row of matrix) {
      assert.isTrue(
        row.bubblewrap === "blocked" || row.bubblewrap.endsWith("(not claimed)"),
        `${row.attack}: ${row.bubblewrap}`
      )
    }
    for (const [kind, level] of Object.entries(report.containment) as Array<[ContainmentKind, string]>) {
      if (level !== "enforced") continue
      const expected = attacks.filter((attack) => attack.capability === kind).map((attack) => attack.name)
      assert.isAbove(expected.length, 0, `${kind} is claimed, and the suite has no attack on it`)
      assert.deepStrictEqual([...(verified.get(kind) ?? [])].sort(), expected.sort(), `${kind}: attacks not verified`)
    }
  })
})
