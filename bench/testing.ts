/**
 * The `testing` benchmark: calls checked per second by writ/testing's harness (generation, a fresh executor and stores
 * per call, the laws) against the same calls sent straight to the same fresh executor, in alternating rounds, by wall
 * time (the ratio) and by the process's CPU time (for information: the machine is shared); the bare policy decider's
 * rate on the policy's witnesses is printed for information too.
 */
import { Effect, Schema } from "effect"
import fc from "fast-check"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import * as Action from "../core/action/Action.ts"
import * as PolicyComposition from "../core/policy/PolicyComposition.ts"
import * as Testing from "../runtime/Testing.ts"
import { runCase } from "../runtime/testing/internal/env.ts"
import type { Benchmark } from "./internal/measure.ts"
import { compare, compareCpu } from "./internal/measure.ts"

const CALLS = 200
const SEED = 11

const actions = [
  Action.make({
    name: "shell.exec",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => command
  }),
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: () => "ok"
  }),
  Action.make({
    name: "files.read",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.String,
    handler: ({ path }) => path
  })
]

const policy = {
  policy_id: "bench-testing",
  version: "1",
  mode: "safe",
  approver_class: "maintainer",
  deny: { "files.read": ["/etc/*"] }
} as const

const options = { policy, actions, profiles: ["minimal"] as const, digest: NodeDigest.layer }

const run = async (): Promise<void> => {
  const prepared = await Effect.runPromise(Testing.prepare(options))
  // The direct side sends exactly the calls the harness generates for this seed, in order: drawn as Testing.check draws
  // them (fast-check's runner, this seed, this many runs), and checked against those that reached its properties.
  const calls: Array<Testing.Call> = []
  const arbitrary = Testing.calls({ actions, snapshots: [prepared.snapshot], agent: prepared.boundAgent })
  fc.assert(fc.property(arbitrary, (call) => void calls.push(call)), { numRuns: CALLS, seed: SEED })
  const reached: Array<Testing.Call> = []
  const record = Testing.property("record the generated calls", ({ approval_id: _a, step, ...call }) => {
    if (step === "call") reached.push(call)
    return true
  })
  await Testing.check({ ...options, properties: [record], runs: CALLS, seed: SEED })
  const sent = calls.filter((call) => reached.some((r) => JSON.stringify(r) === JSON.stringify(call)))
  if (calls.length !== CALLS || JSON.stringify(sent) !== JSON.stringify(reached)) {
    throw new Error("the direct side's calls are not the harness's")
  }
  const direct = async (iterations: number) => {
    for (let i = 0; i < iterations; i++) await Effect.runPromise(runCase(prepared, "minimal", calls[i % calls.length]!))
  }
  const harness = async (iterations: number) => {
    await Testing.check({ ...options, properties: Testing.laws(), runs: iterations, seed: SEED })
  }
  const result = await compare(direct, harness, { iterations: CALLS, rounds: 9, warmup: 1 })
  const byCpu = await compareCpu(direct, harness, { iterations: CALLS, rounds: 9, warmup: 0 })
  const decide = PolicyComposition.decider(prepared.snapshot)
  const inputs = [...PolicyComposition.witnesses(prepared.snapshot.compiled_rules)]
  const start = performance.now()
  let decided = 0
  while (performance.now() - start < 200) {
    for (const input of inputs) if (decide(input).disposition.length > 0) decided++
  }
  const evaluatorRate = decided / ((performance.now() - start) / 1000)
  console.log(`testing: ${CALLS} generated calls per round, minimal profile, a fresh executor and stores per call`)
  console.log(`  direct to the executor: ${(1e6 / result.baseline).toFixed(0)} calls/s`)
  console.log(`  through Testing.check (generation, laws): ${(1e6 / result.subject).toFixed(0)} calls/s`)
  console.log(
    `  by CPU time: direct ${(1e6 / byCpu.baseline).toFixed(0)} calls/s, through Testing.check ${
      (1e6 / byCpu.subject).toFixed(0)
    } calls/s, ${(byCpu.baseline / byCpu.subject).toFixed(2)}x`
  )
  console.log(`  bare policy decider (for information): ${evaluatorRate.toFixed(0)} decisions/s`)
  console.log(`testing: ${(result.baseline / result.subject).toFixed(2)}x (target >= 0.8x)`)
}

/** The `testing` benchmark. */
export const benchmark: Benchmark = { name: "testing", run }
