import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Schema, Stream, TestClock } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { StoredRecord } from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { PolicyInputs } from "../../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { PathResolver } from "../../core/policy/PolicyPath.ts"
import type * as StateStore from "../../core/state/StateStore.ts"
import { base, durableInMemory, governedInMemory, run, runningRun } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { stateStores } from "../fixtures/state.ts"

const saved: Array<string> = []
const actions = [
  Action.make({
    name: "notes.save",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.Void,
    effects: ["filesystem.write"],
    handler: ({ path }) => void saved.push(path)
  })
]

// A symlink the caller does not control: a transformer's side effect (or anyone's) may swap where it points.
const link = { swapped: false }
const resolver = Layer.succeed(PathResolver, {
  resolve: (path) => Effect.sync(() => link.swapped ? path.replace(/^\/work/, "/secrets") : path)
})

const unchanged = (id: string, effect: Effect.Effect<void> = Effect.void): Interceptor.Transformer => ({
  id,
  transform: (evaluation) => Effect.as(effect, evaluation.arguments)
})

const governed = (transformers: ReadonlyArray<Interceptor.Transformer>) =>
  governedInMemory(actions, { transformers }).pipe(Layer.provideMerge(resolver))

const policy = (rules: ReadonlyArray<Record<string, unknown>> = []) =>
  installPolicy({
    policy_id: "fs",
    version: "1",
    rules: [
      { rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
      { rule_id: "fs", kind: "filesystem", effect: "allow", roots: ["/"], modes: ["write"] },
      { rule_id: "fs-secrets", kind: "filesystem", effect: "deny", roots: ["/secrets"], modes: ["write"] },
      ...rules
    ],
    gates: [{
      gate_id: "base",
      level: "hard",
      order: 0,
      rule_ids: ["allow", "fs", "fs-secrets", ...rules.map((rule) => rule.rule_id as string)]
    }]
  })

const save = (path: string) =>
  Effect.gen(function*() {
    const ref = yield* policy()
    const boundary = yield* Governance.openBoundary(ref)
    const outcome = yield* run("notes.save", { path }, {}, { policy_snapshot: ref }, { boundary })
    const chain = yield* Effect.flatMap(EvidenceStore, (store) => Stream.runCollect(store.read(boundary.chain_id)))
    const gates = Chunk.toReadonlyArray(chain as Chunk.Chunk<StoredRecord>)
      .filter((record) => record.record_type === "gate_evaluated")
      .map((record) => JSON.parse(record.payload_json))
    return { outcome, gates }
  })

describe("stage 10 compares every policy input, not only the digest", () => {
  it.effect("a resolved path that changes after the decision, with the digest unchanged, is rechecked and denied", () =>
    Effect.gen(function*() {
      link.swapped = false
      const before = saved.length
      const { gates, outcome } = yield* save("/work/a.txt")
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag !== "denied") return
      assert.strictEqual(outcome.stage, "recheck")
      assert.strictEqual(outcome.recheck?.ran, true)
      assert.strictEqual(outcome.recheck?.reason, "inputs_changed")
      assert.strictEqual(outcome.recheck?.digest_before, outcome.recheck?.digest_after)
      const guards = outcome.recheck?.compared?.find((compared) => compared.evaluator === "policy.guards")
      assert.deepStrictEqual([guards?.decided.resolved_path, guards?.current?.resolved_path], [
        "/work/a.txt",
        "/secrets/a.txt"
      ])
      assert.strictEqual(saved.length, before, "the callable was not reached")
      const recorded = gates.map((gate) => gate.recheck?.reason)
      assert.isTrue(recorded.length > 0 && recorded.every((reason) => reason === "inputs_changed"))
      assert.deepStrictEqual(gates.at(-1).recheck.compared.find((c: any) => c.evaluator === "policy.guards").current, {
        snapshot: outcome.recheck?.compared?.[0]?.decided.snapshot,
        resolved_path: "/secrets/a.txt",
        time_or_budget: false
      })
    }).pipe(Effect.provide(governed([unchanged("swap-link", Effect.sync(() => void (link.swapped = true)))]))))

  it.effect("a skip is recorded with the inputs compared, on the outcome and in every pre-call gate record", () =>
    Effect.gen(function*() {
      link.swapped = false
      const before = saved.length
      const { gates, outcome } = yield* save("/work/b.txt")
      assert.strictEqual(outcome._tag, "succeeded")
      assert.deepStrictEqual([outcome.recheck?.ran, outcome.recheck?.reason], [false, "inputs_unchanged"])
      assert.deepStrictEqual(outcome.recheck?.compared?.map((compared) => compared.evaluator), [
        "policy.pin",
        "policy.guards",
        "policy.rules"
      ])
      assert.strictEqual(saved.length, before + 1)
      assert.isTrue(gates.length > 0)
      for (const gate of gates) {
        assert.deepStrictEqual([gate.recheck.ran, gate.recheck.reason], [false, "inputs_unchanged"])
        assert.strictEqual(gate.recheck.compared.length, 3)
        assert.strictEqual(gate.recheck.compared[1].decided.resolved_path, "/work/b.txt")
      }
    }).pipe(Effect.provide(governed([unchanged("noop")]))))

  it.effect("an expiry rule always rechecks: a call whose policy expired during the transformation is denied", () =>
    Effect.gen(function*() {
      link.swapped = false
      const before = saved.length
      const ref = yield* policy([{
        rule_id: "until",
        kind: "expiry",
        effect: "allow",
        expires_at: "1970-01-01T00:00:01.000000Z"
      }])
      const boundary = yield* Governance.openBoundary(ref)
      const outcome = yield* run("notes.save", { path: "/work/c.txt" }, {}, { policy_snapshot: ref }, { boundary })
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag !== "denied") return
      assert.deepStrictEqual([outcome.stage, outcome.reason.code], ["recheck", "policy.expired"])
      assert.deepStrictEqual([outcome.recheck?.ran, outcome.recheck?.reason], [true, "time_or_budget_rule"])
      assert.strictEqual(saved.length, before)
    }).pipe(Effect.provide(governed([unchanged("slow", TestClock.adjust("2 seconds"))]))))
})

// A user interceptor that reports what it read: a setting outside the arguments that a transformer may change.
const setting = { mode: "safe" }
const bySetting: Interceptor.Interceptor = {
  id: "by-setting",
  stage: "policy",
  evaluate: () => Effect.sync(() => setting.mode === "safe" ? Interceptor.allow() : Interceptor.deny("setting.unsafe")),
  inputs: () => Effect.sync(() => PolicyInputs.make({ approval_state: setting.mode }))
}

const durable = (state: Layer.Layer<StateStore.StateStores, never, IdGenerator.IdGenerator>, flip: boolean) =>
  ActionExecutor.layerDurable({
    interceptors: [bySetting],
    transformers: [unchanged("flip", Effect.sync(() => void (flip && (setting.mode = "unsafe"))))]
  }).pipe(Layer.provideMerge(state), Layer.provideMerge(base(actions)))

const inRun = Effect.gen(function*() {
  const run = yield* runningRun
  const executor = yield* ActionExecutor.ActionExecutor
  const execution_scope = DurableRun.make({ run_id: run.run_id })
  const context = yield* Ingress.bind({
    execution_scope,
    authenticated_principal: { id: "alice" },
    effect_backend: InProcessBackend.make.ref
  })
  const request = ExecutionRequest.make({
    request_id: yield* IdGenerator.uuid,
    action: { name: "notes.save" },
    arguments: { path: "/work/d.txt" },
    execution_scope
  })
  const outcome = yield* executor.execute(request, { context })
  const [attempt] = yield* Effect.flatMap(stateStores, (store) => store.listAttempts(run.run_id))
  return { outcome, attempt: attempt! }
})

const stores = [["memory", durableInMemory]] as const

describe("the durable attempt records stage 10's decision and the inputs compared", () => {
  for (const [name, state] of stores) {
    it.effect(`${name}: a skip, read back with what was compared`, () =>
      Effect.gen(function*() {
        setting.mode = "safe"
        const { attempt, outcome } = yield* inRun
        assert.strictEqual(outcome._tag, "succeeded")
        assert.deepStrictEqual(attempt.recheck, outcome.recheck)
        assert.deepStrictEqual([attempt.recheck?.ran, attempt.recheck?.reason], [false, "inputs_unchanged"])
        assert.deepStrictEqual(attempt.recheck?.compared?.map((c) => [c.evaluator, c.decided.approval_state]), [
          ["by-setting", "safe"]
        ])
      }).pipe(Effect.provide(durable(state, false))))

    it.effect(`${name}: an input changed by the transformation reruns the evaluator, which denies`, () =>
      Effect.gen(function*() {
        setting.mode = "safe"
        const before = saved.length
        const { attempt, outcome } = yield* inRun
        assert.deepStrictEqual([outcome._tag, outcome.stage], ["denied", "recheck"])
        assert.strictEqual(saved.length, before)
        assert.deepStrictEqual([attempt.outcome.tag, attempt.recheck?.reason], ["denied", "inputs_changed"])
        assert.deepStrictEqual(attempt.recheck?.compared?.[0]?.current?.approval_state, "unsafe")
      }).pipe(Effect.provide(durable(state, true))))
  }
})
