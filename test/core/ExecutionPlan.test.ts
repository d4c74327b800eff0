/**
 * The plan is the table that runs: in every profile and configuration, a call enters exactly the stages its plan runs,
 * in order; one that concludes early enters a prefix of them ending at its concluding stage.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import * as Action from "../../core/action/Action.ts"
import * as Time from "../../core/base/Time.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as IdempotencyStore from "../../core/execution/IdempotencyStore.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { StageTrace } from "../../core/execution/internal/executor/env.ts"
import type { Stage } from "../../core/execution/Stage.ts"
import type { Run } from "../../core/state/StateStore.ts"
import { base, durableInMemory, governedInMemory, run, runningRun } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const held: { gate?: Deferred.Deferred<void>; entered?: Deferred.Deferred<void> } = {}

const actions = [
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: ({ text }) => text
  }),
  Action.make({
    name: "notes.hold",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () =>
      held.gate === undefined || held.entered === undefined
        ? Effect.succeed("free")
        : Effect.zipRight(Deferred.succeed(held.entered, undefined), Effect.as(Deferred.await(held.gate), "held"))
  }),
  Action.make({ name: "notes.publish", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined })
]

const declaration = {
  policy_id: "plan",
  version: "1",
  rules: [
    { rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["notes.write", "notes.hold"] },
    { rule_id: "no-publish", kind: "action", effect: "deny", action_patterns: ["notes.publish"] }
  ],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow", "no-publish"] }]
}

const entered = new Map<string, Array<Stage>>()
const trace = Layer.succeed(StageTrace, (attempt_id, stage) => {
  const stages = entered.get(attempt_id) ?? []
  stages.push(stage)
  entered.set(attempt_id, stages)
})

const governed = (config: ActionExecutor.Config) => governedInMemory(actions, config)

const checked = { full: 0, early: 0 }

/** The call entered exactly its plan's run stages, or a prefix of them ending where it concluded. */
const conforms = (outcome: ExecutionOutcome) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const plan = yield* executor.plan({ name: outcome.action.name })
    const runs = plan.stages.filter((stage) => stage.mode === "run").map((stage) => stage.stage)
    const expected = outcome.stage === "outcome" ? runs : runs.slice(0, runs.indexOf(outcome.stage) + 1)
    assert.include(runs, outcome.stage, `${outcome.action.name} concluded at ${outcome.stage}, which its plan skips`)
    assert.deepStrictEqual(entered.get(outcome.attempt_id), expected, `${outcome._tag} at ${outcome.stage}`)
    if (outcome.stage === "outcome") checked.full++
    else checked.early++
    return outcome
  })

const exec = (...args: Parameters<typeof run>) => Effect.flatMap(run(...args), conforms)

/** Seeded ids repeat across tests: each test traces its own calls. */
const traced = <A, E, R>(test: Effect.Effect<A, E, R>) => Effect.zipRight(Effect.sync(() => entered.clear()), test)

const allowPolicy = Interceptor.make("allow", "policy", () => Interceptor.allow())
const denyPublish = Interceptor.make(
  "no-publish",
  "guard",
  (e) => e.descriptor.name === "notes.publish" ? Interceptor.deny("policy.denied") : Interceptor.allow()
)
const upper = {
  id: "upper",
  transform: (e: Interceptor.Evaluation) =>
    Effect.succeed(
      e.descriptor.name === "notes.write" ? { text: String(e.arguments.text).toUpperCase() } : e.arguments
    )
}
const observers = [{ id: "watch", observe: () => Effect.void }]

/** A call held inside its handler under a capacity of one, a second call deferred, then the first released. */
const deferral = (extra: Parameters<typeof run>[4] = {}, binding: Parameters<typeof run>[3] = {}) =>
  Effect.gen(function*() {
    const entered = yield* Deferred.make<void>()
    held.gate = yield* Deferred.make<void>()
    held.entered = entered
    const first = yield* Effect.fork(exec("notes.hold", {}, {}, binding, extra))
    // The first call holds the lease once its handler runs.
    yield* Deferred.await(entered)
    const second = yield* exec("notes.hold", {}, {}, binding, extra)
    assert.strictEqual(second._tag, "deferred")
    yield* Deferred.succeed(held.gate, undefined)
    delete held.gate
    delete held.entered
    return yield* Fiber.join(first)
  })

describe("the plan is the table that runs", () => {
  it.effect("minimal, bare and fully configured", () =>
    traced(Effect.gen(function*() {
      assert.strictEqual((yield* exec("notes.write", { text: "a" }))._tag, "succeeded")
      assert.strictEqual((yield* exec("notes.write", { text: 1 }))._tag, "denied")
      assert.strictEqual(
        (yield* exec("notes.write", { text: "a" }, { deadline: Time.fromMicros(0) }))._tag,
        "timed_out"
      )
    })).pipe(
      Effect.provide(ActionExecutor.layerMinimal().pipe(Layer.provideMerge(base(actions)), Layer.provide(trace)))
    ))

  it.effect("minimal with interceptors, a transformer, observers, a capacity and an idempotency store", () =>
    traced(Effect.gen(function*() {
      const written = yield* exec("notes.write", { text: "a" }, { idempotency_key: "k1" })
      assert.deepStrictEqual(written._tag === "succeeded" && [written.result, written.recheck?.ran], ["A", true])
      const replayed = yield* exec("notes.write", { text: "a" }, { idempotency_key: "k1" })
      assert.strictEqual(replayed._tag === "succeeded" && replayed.replay_of, written.attempt_id)
      assert.strictEqual((yield* exec("notes.publish", {}))._tag, "denied")
      assert.strictEqual((yield* deferral())._tag, "succeeded")
    })).pipe(Effect.provide(
      ActionExecutor.layerMinimal({
        interceptors: [allowPolicy, denyPublish],
        transformers: [upper],
        observers,
        capacity: [Capacity.bounded({ id: "one", permits: 1 })]
      }).pipe(Layer.provideMerge(Layer.merge(base(actions), IdempotencyStore.layerMemory)), Layer.provide(trace))
    )))

  it.effect("durable, in a Run and one-shot, with a denial committed at its stage", () =>
    traced(Effect.gen(function*() {
      const running = yield* runningRun
      const scope = DurableRun.make({ run_id: running.run_id })
      assert.strictEqual((yield* exec("notes.write", { text: "a" }, { execution_scope: scope }))._tag, "succeeded")
      assert.strictEqual((yield* exec("notes.publish", {}, { execution_scope: scope }))._tag, "denied")
      const newRun = yield* Deferred.make<Run>()
      assert.strictEqual((yield* exec("notes.write", { text: "b" }, {}, {}, { newRun }))._tag, "succeeded")
      assert.strictEqual((yield* deferral({ newRun: yield* Deferred.make<Run>() }))._tag, "succeeded")
    })).pipe(Effect.provide(
      ActionExecutor.layerDurable({
        interceptors: [denyPublish],
        observers,
        capacity: [Capacity.bounded({ id: "one", permits: 1 })]
      }).pipe(Layer.provideMerge(durableInMemory), Layer.provideMerge(base(actions)), Layer.provide(trace))
    )))

  it.effect("durable without evaluators, bound to the arguments' digest only where they have one", () =>
    traced(Effect.gen(function*() {
      const running = yield* runningRun
      const scope = DurableRun.make({ run_id: running.run_id })
      assert.strictEqual((yield* exec("notes.write", { text: "a" }, { execution_scope: scope }))._tag, "succeeded")
    })).pipe(Effect.provide(
      ActionExecutor.layerDurable().pipe(
        Layer.provideMerge(durableInMemory),
        Layer.provideMerge(base(actions)),
        Layer.provide(trace)
      )
    )))

  it.effect("governed, in a boundary and in a durable Run projected at stage 14, with a transformer and a capacity", () =>
    traced(Effect.gen(function*() {
      const ref = yield* installPolicy(declaration)
      const boundary = yield* Governance.openBoundary(ref)
      const binding = { policy_snapshot: ref }
      assert.strictEqual((yield* exec("notes.write", { text: "a" }, {}, binding, { boundary }))._tag, "succeeded")
      assert.strictEqual((yield* exec("notes.publish", {}, {}, binding, { boundary }))._tag, "denied")
      assert.strictEqual((yield* exec("notes.write", { text: "a" }, {}, binding))._tag, "denied")
      const running = yield* runningRun
      const scope = DurableRun.make({ run_id: running.run_id })
      const inRun = yield* exec("notes.write", { text: "a" }, { execution_scope: scope }, binding, { boundary })
      assert.deepStrictEqual([inRun._tag, inRun.projection_pending], ["succeeded", undefined])
      assert.strictEqual((yield* deferral({ boundary }, binding))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      assert.isAbove(checked.full, 8)
      assert.isAbove(checked.early, 8)
    })).pipe(Effect.provide(
      governed({ transformers: [upper], observers, capacity: [Capacity.bounded({ id: "one", permits: 1 })] }).pipe(
        Layer.provide(trace)
      )
    )))

  it.effect("the governed plan runs the checkpoint and the projection it enters, and says why it skips what it skips", () =>
    traced(Effect.gen(function*() {
      const plan = yield* Effect.flatMap(
        ActionExecutor.ActionExecutor,
        (executor) => executor.plan({ name: "notes.write" })
      )
      const modes = Object.fromEntries(plan.stages.map((stage) => [stage.stage, stage.mode]))
      assert.deepStrictEqual([modes.governed_start, modes.evidence_checkpoint, modes.persist], ["run", "run", "run"])
      const bind = plan.stages.find((stage) => stage.stage === "bind_context")!
      assert.include(bind.detail, "a lease on each capacity (one, policy.quota)")
      assert.notInclude(bind.detail, "unbounded")
    })).pipe(Effect.provide(
      governed({ capacity: [Capacity.bounded({ id: "one", permits: 1 })] })
    )))
})
