/**
 * The `harness` benchmark: `writ harness run`'s library path (store, probe, compile, admit, spawn with writ's callback
 * deciding by a policy, observations parsed live) against the same CLI run directly with exactly the argv, config
 * files, hook, environment and working directory writ generated, a bare loopback server answering the hook's
 * callback, against the same scripted model, in alternating rounds: spawn-to-first-event and total run time, medians
 * in absolute milliseconds. Then each provider's stream parser against `JSON.parse` over the same lines (the run's
 * real stdout, repeated), in MB/s of CPU time.
 * `WRIT_BENCH_HARNESS_PROVIDERS=claude-code,codex` picks providers; `WRIT_BENCH_HARNESS_ROUNDS` the rounds.
 */
import { Effect, Either, Layer, Redacted } from "effect"
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { homedir, tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { createInterface } from "node:readline"
import * as ClaudeCodeHarness from "../adapters/node/ClaudeCodeHarness.ts"
import * as CodexHarness from "../adapters/node/CodexHarness.ts"
import * as GeminiCliHarness from "../adapters/node/GeminiCliHarness.ts"
import * as HarnessStore from "../adapters/node/HarnessStore.ts"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import * as NodeHarnessProcess from "../adapters/node/NodeHarnessProcess.ts"
import * as ScriptedAnthropic from "../adapters/node/ScriptedAnthropic.ts"
import type { ScriptedCall, ScriptedModel } from "../adapters/node/ScriptedAnthropic.ts"
import * as ScriptedGemini from "../adapters/node/ScriptedGemini.ts"
import * as ScriptedOpenAI from "../adapters/node/ScriptedOpenAI.ts"
import * as ClaudeCode from "../core/harness/ClaudeCode.ts"
import * as ClaudeCodeStream from "../core/harness/ClaudeCodeStream.ts"
import type { StreamParser } from "../core/harness/ClaudeCodeStream.ts"
import * as CodexStream from "../core/harness/CodexStream.ts"
import * as GeminiCliStream from "../core/harness/GeminiCliStream.ts"
import * as HarnessAdapter from "../core/harness/HarnessAdapter.ts"
import type { Provider } from "../core/harness/HarnessControl.ts"
import type { HarnessPlan } from "../core/harness/HarnessPlan.ts"
import * as HarnessPolicy from "../core/harness/HarnessPolicy.ts"
import { HarnessProcess, type ProcessSpec } from "../core/harness/HarnessProcess.ts"
import * as HarnessSpec from "../core/harness/HarnessSpec.ts"
import { ToolResult } from "../core/harness/ProviderObservation.ts"
import * as PermissionPolicy from "../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../core/policy/PolicySnapshot.ts"
import type { Benchmark } from "./internal/measure.ts"
import { median } from "./internal/measure.ts"

const ROUNDS = Number(process.env.WRIT_BENCH_HARNESS_ROUNDS ?? 7)
const PARSE_BYTES = 8 * 1024 * 1024
const PARSE_ROUNDS = 7
const KEY = "sk-bench-scripted-model-key"
/** The one tool call each run makes: allowed by the bench's policy, with output enough for a real tool result. */
const COMMAND = "seq 1 300"

/** The policy `writ harness run --policy` would load: the one command allowed. */
const policy = { policy_id: "bench-harness", version: "1", mode: "rules", allow: { "shell.exec": ["seq *"] } }

interface Target {
  readonly provider: Provider
  readonly model: string
  readonly tools: ReadonlyArray<string>
  readonly call: ScriptedCall
  readonly start: (calls: ReadonlyArray<ScriptedCall>) => Promise<ScriptedModel>
  readonly make: (
    store: HarnessStore.HarnessStore
  ) => Effect.Effect<HarnessAdapter.HarnessAdapter.Service, never, HarnessProcess>
  readonly makeParser: (secrets: ReadonlyArray<string>) => StreamParser
  /** Where config homes go (codex refuses one under /tmp). */
  readonly homes: (data: string) => string
}

const targets: ReadonlyArray<Target> = [
  {
    provider: "claude-code",
    model: "scripted",
    tools: ["Bash"],
    call: { name: "Bash", input: { command: COMMAND, description: "bench" } },
    start: (calls) => ScriptedAnthropic.start(calls),
    make: (store) => ClaudeCodeHarness.make({ store }),
    makeParser: ClaudeCodeStream.makeParser,
    homes: () => tmpdir()
  },
  {
    provider: "codex",
    model: "scripted",
    tools: [],
    call: { name: "exec_command", input: { cmd: COMMAND } },
    start: ScriptedOpenAI.start,
    make: (store) => CodexHarness.make({ store }),
    makeParser: CodexStream.makeParser,
    homes: (data) => join(data, "homes")
  },
  {
    provider: "gemini-cli",
    model: "gemini-2.5-pro",
    tools: ["run_shell_command"],
    call: { name: "run_shell_command", input: { command: COMMAND } },
    start: ScriptedGemini.start,
    make: (store) => GeminiCliHarness.make({ store }),
    makeParser: GeminiCliStream.makeParser,
    homes: () => tmpdir()
  }
]

/**
 * The process port over Node's, remembering the last CLI run's whole spec and when it was handed over (not the probe's
 * `--version`, which it counts).
 */
const recording = () => {
  const seen: { last?: ProcessSpec; spawnedAt: number; probes: number } = { spawnedAt: 0, probes: 0 }
  const layer = Layer.effect(
    HarnessProcess,
    Effect.map(HarnessProcess, (inner): HarnessProcess.Service => ({
      run: (spec) => {
        if (spec.args.includes("--version")) seen.probes++
        else {
          seen.last = spec
          seen.spawnedAt = performance.now()
        }
        return inner.run(spec)
      }
    }))
  ).pipe(Layer.provide(NodeHarnessProcess.layer))
  return { seen, layer }
}

/** The floor's callback: a bare loopback server answering every hook request `allow`. */
const bareCallback = () =>
  new Promise<{ readonly url: string; readonly close: () => Promise<void> }>((resolve) => {
    const server = http.createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end("{\"decision\":\"allow\"}")
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/pre-tool`,
        close: () => new Promise((done) => server.close(() => done()))
      }))
  })

interface Timed {
  readonly first: number
  readonly total: number
  readonly ok: boolean
  /** From the run's start to the CLI's spawn. */
  readonly before: number
}

/** The floor: write the plan's files, spawn exactly writ's process spec, read lines until the CLI has exited. */
const direct = (
  target: Target,
  plan: HarnessPlan,
  spec: ProcessSpec,
  callbackUrl: string
): Promise<Timed & { readonly lines: ReadonlyArray<string> }> => {
  const started = performance.now()
  rmSync(plan.home, { recursive: true, force: true })
  for (const file of plan.config_files) {
    mkdirSync(dirname(file.path), { recursive: true, mode: 0o700 })
    writeFileSync(file.path, file.content, { mode: 0o600 })
  }
  for (const file of plan.secret_files) {
    mkdirSync(dirname(file.path), { recursive: true, mode: 0o700 })
    writeFileSync(
      file.path,
      file.ref === ClaudeCode.callbackRef ? JSON.stringify({ url: callbackUrl, token: "bench" }) : KEY,
      {
        mode: 0o600
      }
    )
  }
  const parser = target.makeParser([KEY])
  const lines: Array<string> = []
  let first = 0
  const before = performance.now() - started
  return new Promise((resolve, reject) => {
    const child = spawn(spec.command, [...spec.args], {
      env: spec.env,
      cwd: spec.cwd,
      detached: true,
      stdio: ["pipe", "pipe", "pipe"]
    })
    child.stdin.end()
    child.stderr.resume()
    child.on("error", reject)
    createInterface({ input: child.stdout }).on("line", (line) => {
      lines.push(line)
      if (first === 0 && parser.line(line).length > 0) first = performance.now()
    })
    child.on("close", (code) => {
      rmSync(plan.home, { recursive: true, force: true })
      resolve({
        first: first - started,
        total: performance.now() - started,
        before,
        ok: code === 0 && lines.some((line) => line.includes("300")),
        lines
      })
    })
  })
}

const benchProvider = async (target: Target) => {
  const data = realpathSync(mkdtempSync(join(target.provider === "codex" ? homedir() : tmpdir(), ".writ-bench-")))
  const ws = join(realpathSync(mkdtempSync(join(tmpdir(), "writ-bench-ws-"))))
  mkdirSync(target.homes(data), { recursive: true })
  const model = await target.start(Array.from({ length: 1 }, () => target.call))
  const callback = await bareCallback()
  const { layer, seen } = recording()
  try {
    const store = HarnessStore.make(data)
    const spec = Either.getOrThrow(HarnessSpec.decode({
      spec_version: 1,
      provider: target.provider,
      model: { name: target.model, endpoint: model.baseUrl, api_key: "writ:bench.key" },
      workspace: ws,
      tools: { allow: target.tools, callback: true }
    }))
    const snapshot = await Effect.runPromise(
      Effect.flatMap(PermissionPolicy.decode(policy), (declared) => PolicySnapshot.compile(declared)).pipe(
        Effect.provide(NodeDigest.layer)
      )
    )
    const decide = HarnessPolicy.decider(snapshot, "harness")
    const secrets = new Map([["writ:bench.key", Redacted.make(KEY)]])

    // `writ harness run`'s library path: the adapter, the verify store, probe, compile and admit, then spawn.
    const viaWrit = (home: string) =>
      Effect.gen(function*() {
        const started = performance.now()
        let first = 0
        // A fresh adapter each run, as each `writ harness run` process has: nothing of the last run's probe is kept.
        const adapter = yield* Effect.provide(target.make(store), layer)
        const verifications = yield* store.verifications
        const admitted = yield* HarnessAdapter.prepare(adapter, { spec, prompt: "go", home, verifications })
        const prepared = performance.now() - started
        const result = yield* adapter.spawn(admitted, {
          secrets,
          decide,
          observe: () => Effect.sync(() => (first ||= performance.now()))
        })
        const exit = result.observations.at(-1)
        const ok = exit?._tag === "exit" && exit.code === 0 &&
          result.decisions.some((d) => d.decision.decision === "allow") &&
          result.observations.some((o) => o instanceof ToolResult && o.content.includes("300"))
        return {
          first: first - started,
          total: performance.now() - started,
          before: seen.spawnedAt - started,
          ok,
          prepared,
          plan: admitted.plan
        }
      })
    const homeW = join(target.homes(data), "writ-side")
    const homeD = join(target.homes(data), "direct-side")
    // Warm-up, and the floor's inputs: writ's plan and whole process spec for the direct side's home.
    const captured = await Effect.runPromise(viaWrit(homeD))
    const processSpec = seen.last!
    const probesAtWarmup = seen.probes
    if (!captured.ok) throw new Error(`harness bench: ${target.provider}'s warm-up run did not make its call`)
    const warm = await direct(target, captured.plan, processSpec, callback.url)
    if (!warm.ok) throw new Error(`harness bench: ${target.provider}'s direct run did not make its call`)

    const rows: Array<{ writ: Timed & { prepared: number }; direct: Timed }> = []
    let lines: ReadonlyArray<string> = warm.lines
    for (let round = 0; round < ROUNDS; round++) {
      const runWrit = () => Effect.runPromise(viaWrit(homeW))
      const runDirect = () => direct(target, captured.plan, processSpec, callback.url)
      let w: Awaited<ReturnType<typeof runWrit>>
      let d: Awaited<ReturnType<typeof runDirect>>
      // Alternate which side goes first.
      if (round % 2 === 0) {
        w = await runWrit()
        d = await runDirect()
      } else {
        d = await runDirect()
        w = await runWrit()
      }
      if (!w.ok || !d.ok) throw new Error(`harness bench: ${target.provider} round ${round} did not make its call`)
      rows.push({ writ: w, direct: d })
      lines = d.lines
    }
    const med = (pick: (row: (typeof rows)[number]) => number) => median(rows.map(pick))
    const result = {
      firstWrit: med((r) => r.writ.first),
      firstDirect: med((r) => r.direct.first),
      totalWrit: med((r) => r.writ.total),
      totalDirect: med((r) => r.direct.total),
      prepared: med((r) => r.writ.prepared),
      beforeWrit: med((r) => r.writ.before),
      beforeDirect: med((r) => r.direct.before)
    }
    const pct = (a: number, b: number) => `${(((a - b) / b) * 100).toFixed(1)}%`
    console.log(`harness ${target.provider}: ${ROUNDS} alternating rounds, one allowed tool call, medians`)
    console.log(
      `  spawn-to-first-event: writ ${result.firstWrit.toFixed(0)} ms, direct ${
        result.firstDirect.toFixed(0)
      } ms (overhead ${pct(result.firstWrit, result.firstDirect)})`
    )
    console.log(
      `  total run:            writ ${result.totalWrit.toFixed(0)} ms, direct ${
        result.totalDirect.toFixed(0)
      } ms (overhead ${pct(result.totalWrit, result.totalDirect)})`
    )
    console.log(
      `  before spawn:         writ ${result.beforeWrit.toFixed(0)} ms (store, probe, compile and admit ${
        result.prepared.toFixed(0)
      } ms; home, files and callback the rest), direct ${result.beforeDirect.toFixed(1)} ms; --version spawned ${
        seen.probes - probesAtWarmup
      } times in the timed rounds`
    )
    console.log(
      `  per round (writ/direct total ms): ${
        rows.map((r) => `${r.writ.total.toFixed(0)}/${r.direct.total.toFixed(0)}`).join(" ")
      }`
    )
    console.log(
      `harness-${target.provider}-overhead: total ${pct(result.totalWrit, result.totalDirect)}, first event ${
        pct(result.firstWrit, result.firstDirect)
      } (target < 5%)`
    )
    return lines
  } finally {
    await callback.close()
    await model.close()
    rmSync(data, { recursive: true, force: true })
    rmSync(ws, { recursive: true, force: true })
  }
}

/** MB/s (by CPU time) of the provider's parser and of `JSON.parse` over the same lines, medians of alternating rounds. */
const throughput = (target: Target, stream: ReadonlyArray<string>) => {
  const lines: Array<string> = []
  let bytes = 0
  while (bytes < PARSE_BYTES) {
    for (const line of stream) {
      lines.push(line)
      bytes += Buffer.byteLength(line)
    }
  }
  let sink = 0
  const jsonPass = () => {
    for (const line of lines) {
      try {
        sink += JSON.parse(line) === null ? 0 : 1
      } catch {
        sink -= 1
      }
    }
  }
  const parserPass = () => {
    const parser = target.makeParser([KEY, "a-per-run-callback-token"])
    for (const line of lines) sink += parser.line(line).length
  }
  const timed = (pass: () => void) => {
    // No forced collection per pass: a full GC drops the maps JSON.parse's records had, so each pass would begin with
    // the parser's code deoptimised (about 0.4x instead of 0.8x), measuring re-warming rather than parsing.
    // CPU time, not wall: the same work either side, whatever else the machine runs meanwhile.
    const started = process.cpuUsage()
    pass()
    const used = process.cpuUsage(started)
    return bytes / (1024 * 1024) / ((used.user + used.system) / 1_000_000)
  }
  globalThis.gc?.()
  jsonPass()
  parserPass()
  const json: Array<number> = []
  const parsed: Array<number> = []
  for (let round = 0; round < PARSE_ROUNDS; round++) {
    if (round % 2 === 0) {
      json.push(timed(jsonPass))
      parsed.push(timed(parserPass))
    } else {
      parsed.push(timed(parserPass))
      json.push(timed(jsonPass))
    }
  }
  const [j, p] = [median(json), median(parsed)]
  console.log(
    `harness-${target.provider}-parse: ${p.toFixed(1)} MB/s vs JSON.parse ${j.toFixed(1)} MB/s (CPU time): ${
      (p / j).toFixed(2)
    }x (target >= 0.5x; ${stream.length} real lines repeated to ${(bytes / 1024 / 1024).toFixed(0)} MB${
      sink === 0 ? "" : ""
    })`
  )
}

const run = async (): Promise<void> => {
  const wanted = process.env.WRIT_BENCH_HARNESS_PROVIDERS?.split(",")
  for (const target of targets.filter((t) => wanted === undefined || wanted.includes(t.provider))) {
    const lines = await benchProvider(target)
    throughput(target, lines)
  }
}

/** `writ harness run`'s path vs the CLI run directly with writ's argv, files and environment; stream parsing MB/s. */
export const benchmark: Benchmark = { name: "harness", run }
