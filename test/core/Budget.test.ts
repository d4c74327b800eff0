import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Either, FastCheck as fc, Layer, Schema, TestClock } from "effect"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionUsage from "../../core/action/ActionUsage.ts"
import { meter } from "../../core/action/internal/usage.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import type { Interceptor } from "../../core/execution/Interceptor.ts"
import { exec, install, minute, summary } from "../fixtures/budgets.ts"
import { base, run } from "../fixtures/layers.ts"

let invoked = 0
const Amount = Schema.optionalWith(Schema.Number, { default: () => 0 })
const actions = [
  // Takes `micros` of Clock time, reports what it is told to, then fails or succeeds.
  Action.make({
    name: "model.complete",
    input: Schema.Struct({ micros: Amount, tokens: Amount, cost: Amount, fail: Schema.optional(Schema.Boolean) }),
    output: Schema.String,
    handler: ({ cost, fail, micros, tokens }) =>
      Effect.gen(function*() {
        invoked++
        yield* TestClock.adjust(Duration.micros(BigInt(micros)))
        yield* ActionUsage.report({ tokens, cost_microunits: cost })
        if (fail === true) return yield* new Action.ActionError({ code: "model.failed", message: "no completion" })
        return "done"
      })
  }),
  // Makes one of the reports below and returns the refusal, if any, as its result.
  Action.make({
    name: "model.report",
    input: Schema.Struct({ report: Schema.Literal("negative", "fraction", "infinite", "half_bad", "full", "none") }),
    output: Schema.String,
    handler: ({ report }) =>
      Effect.map(
        Effect.either(ActionUsage.report(reports[report])),
        Either.match({ onLeft: (error) => `${error.reason} ${error.field}`, onRight: () => "charged" })
      )
  })
]

const promised = [
  // A Promise handler reports through its context; an invalid report throws and charges nothing.
  Action.make({
    name: "model.promise",
    aliases: ["complete"],
    input: Schema.Struct({ tokens: Schema.Number }),
    output: Schema.String,
    handler: ({ tokens }, context) => {
      context.report({ tokens })
      return Promise.resolve("done")
    }
  })
]

const reports: Record<string, ActionUsage.Report> = {
  negative: { tokens: -1 },
  fraction: { tokens: 1.5 },
  infinite: { cost_microunits: Number.POSITIVE_INFINITY },
  half_bad: { tokens: 5, cost_microunits: -2 },
  full: { tokens: 5 },
  none: {}
}

const layer = () =>
  ActionExecutor.layerPolicyGated().pipe(
    Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base([...actions, ...promised]))))
  )

/** One call that consumes `amount` of the kind under test. */
const spending = {
  tokens: (amount: number) => ({ tokens: amount }),
  cost_microunits: (amount: number) => ({ cost: amount }),
  wall_microseconds: (amount: number) => ({ micros: amount })
} as const

describe("budgets on reported and measured usage", () => {
  it.effect.each(Object.entries(spending))(
    "a %s budget defers with budget.exhausted until the window ends once its usage reaches the limit, and refills",
    ([kind, spend]) =>
      Effect.gen(function*() {
        const ref = yield* install(kind, 100)
        const before = invoked
        const outcomes = []
        for (let i = 0; i < 3; i++) outcomes.push(summary(yield* exec("model.complete", spend(60), ref)))
        // The second call is admitted at 60 of 100 and overruns to 120; the third is refused before its callable.
        assert.deepStrictEqual(outcomes, ["succeeded", "succeeded", "deferred budget.exhausted"])
        assert.strictEqual(invoked, before + 2)
        const deferred = yield* exec("model.complete", spend(60), ref)
        assert.strictEqual(deferred.stage, "bind_context")
        assert.include(deferred._tag === "deferred" ? deferred.reason.detail : "", `120 of 100 ${kind}`)
        // The window is the first minute of the clock: the call may come back when it ends.
        assert.strictEqual(deferred._tag === "deferred" ? deferred.retry_at : undefined, Time.fromMicros(minute))
        assert.strictEqual(invoked, before + 2)
        yield* TestClock.adjust(Duration.micros(BigInt(minute)))
        assert.strictEqual(summary(yield* exec("model.complete", spend(60), ref)), "succeeded")
      }).pipe(Effect.provide(layer()))
  )

  it.effect.each(Object.entries(spending))(
    "a %s budget is partitioned by principal",
    ([kind, spend]) =>
      Effect.gen(function*() {
        const ref = yield* install(kind, 10)
        assert.strictEqual(summary(yield* exec("model.complete", spend(10), ref, "alice")), "succeeded")
        assert.strictEqual(summary(yield* exec("model.complete", spend(10), ref, "alice")), "deferred budget.exhausted")
        assert.strictEqual(summary(yield* exec("model.complete", spend(10), ref, "bob")), "succeeded")
        assert.strictEqual(summary(yield* exec("model.complete", spend(10), ref, "bob")), "deferred budget.exhausted")
      }).pipe(Effect.provide(layer()))
  )

  it.effect("an interceptor's charge sees an invocation's usage only when its verdict metered that invocation", () => {
    const charged: Array<ActionUsage.Usage> = []
    let metered = false
    const counter: Interceptor = {
      id: "test.meter",
      stage: "policy",
      evaluate: () => Effect.sync(() => ({ disposition: "allow", code: "test.allowed", metered })),
      charge: (_, usage) => Effect.sync(() => void charged.push(usage))
    }
    return Effect.gen(function*() {
      assert.strictEqual(summary(yield* run("model.complete", { tokens: 7, micros: 5 })), "succeeded")
      assert.deepStrictEqual(charged, [])
      metered = true
      assert.strictEqual(summary(yield* run("model.complete", { tokens: 7, micros: 5 })), "succeeded")
      assert.deepStrictEqual(charged, [{ wall_microseconds: 5, tokens: 7, cost_microunits: 0 }])
    }).pipe(
      Effect.provide(ActionExecutor.layerMinimal({ interceptors: [counter] }).pipe(Layer.provideMerge(base(actions))))
    )
  })

  it.effect.each(["calls", ...Object.keys(spending)])(
    "a %s budget with no window is a lifetime limit: spent, it denies at stage 7 and never refills",
    (kind) =>
      Effect.gen(function*() {
        const ref = yield* install(kind, 1, ["model.*"], "none")
        const before = invoked
        assert.strictEqual(summary(yield* exec("model.complete", { tokens: 1, cost: 1, micros: 1 }, ref)), "succeeded")
        const denied = yield* exec("model.complete", {}, ref)
        assert.deepStrictEqual([summary(denied), denied.stage], ["denied budget.exhausted", "policy"])
        assert.include(denied._tag === "denied" ? denied.reason.detail : "", `1 of 1 ${kind} (no window)`)
        yield* TestClock.adjust(Duration.micros(BigInt(10 * minute)))
        assert.strictEqual(summary(yield* exec("model.complete", {}, ref)), "denied budget.exhausted")
        assert.strictEqual(invoked, before + 1)
      }).pipe(Effect.provide(layer()))
  )

  it.effect("a limit of zero defers every matching call", () =>
    Effect.gen(function*() {
      const ref = yield* install("tokens", 0)
      assert.strictEqual(summary(yield* exec("model.complete", {}, ref)), "deferred budget.exhausted")
    }).pipe(Effect.provide(layer())))

  it.effect("the wall time of a failed call counts against the budget", () =>
    Effect.gen(function*() {
      const ref = yield* install("wall_microseconds", 10_000_000)
      const failed = yield* exec("model.complete", { micros: 10_000_000, fail: true }, ref)
      assert.strictEqual(summary(failed), "failed")
      assert.strictEqual(summary(yield* exec("model.complete", {}, ref)), "deferred budget.exhausted")
    }).pipe(Effect.provide(layer())))

  it.effect("usage is charged to the window in which the call concluded", () =>
    Effect.gen(function*() {
      const ref = yield* install("wall_microseconds", 30_000_000)
      yield* TestClock.adjust(Duration.micros(BigInt(minute - 10_000_000)))
      // Admitted in the first window, concluded 30 s later in the second: the second window is spent.
      assert.strictEqual(summary(yield* exec("model.complete", { micros: 30_000_000 }, ref)), "succeeded")
      assert.strictEqual(summary(yield* exec("model.complete", {}, ref)), "deferred budget.exhausted")
      yield* TestClock.adjust(Duration.micros(BigInt(minute)))
      assert.strictEqual(summary(yield* exec("model.complete", {}, ref)), "succeeded")
    }).pipe(Effect.provide(layer())))

  it.effect("a negative or non-integer report is a typed error naming the field, and charges nothing of it", () =>
    Effect.gen(function*() {
      const ref = yield* install("tokens", 5)
      const results = []
      for (const report of ["negative", "fraction", "infinite", "half_bad"]) {
        const outcome = yield* exec("model.report", { report }, ref)
        results.push(outcome._tag === "succeeded" ? outcome.result : outcome._tag)
      }
      assert.deepStrictEqual(results, [
        "negative tokens",
        "not_integer tokens",
        "not_integer cost_microunits",
        "negative cost_microunits"
      ])
      const full = yield* exec("model.report", { report: "full" }, ref)
      assert.strictEqual(full._tag === "succeeded" ? full.result : full._tag, "charged")
      assert.strictEqual(summary(yield* exec("model.report", { report: "none" }, ref)), "deferred budget.exhausted")
    }).pipe(Effect.provide(layer())))

  it.effect("a refused report the callable does not handle fails the call with a redacted failure", () =>
    Effect.gen(function*() {
      const ref = yield* install("tokens", 5)
      const outcome = yield* exec("model.complete", { tokens: -3 }, ref)
      assert.strictEqual(outcome._tag === "failed" ? outcome.failure.code : outcome._tag, "handler.failed")
      assert.strictEqual(summary(yield* exec("model.complete", { tokens: 5 }, ref)), "succeeded")
    }).pipe(Effect.provide(layer())))

  it.effect("a Promise handler reports through its context, and an invalid report fails its call uncharged", () =>
    Effect.gen(function*() {
      const ref = yield* install("tokens", 10)
      assert.strictEqual(summary(yield* exec("model.promise", { tokens: 6 }, ref)), "succeeded")
      const refused = yield* exec("model.promise", { tokens: -1 }, ref)
      assert.strictEqual(refused._tag === "failed" ? refused.failure.code : refused._tag, "handler.failed")
      assert.strictEqual(summary(yield* exec("model.promise", { tokens: 4 }, ref)), "succeeded")
      assert.strictEqual(summary(yield* exec("model.promise", { tokens: 1 }, ref)), "deferred budget.exhausted")
    }).pipe(Effect.provide(layer())))

  it.effect("a budget written against an alias binds the action whatever name the call uses", () =>
    Effect.gen(function*() {
      const ref = yield* install("calls", 1, ["complete"])
      assert.strictEqual(summary(yield* exec("model.promise", { tokens: 0 }, ref)), "succeeded")
      assert.strictEqual(summary(yield* exec("complete", { tokens: 0 }, ref)), "deferred budget.exhausted")
      assert.strictEqual(summary(yield* exec("model.promise", { tokens: 0 }, ref)), "deferred budget.exhausted")
    }).pipe(Effect.provide(layer())))

  it.effect("a report after the invocation concluded is refused", () =>
    Effect.gen(function*() {
      const usage = meter()
      yield* usage.service.report({ tokens: 3 })
      assert.deepStrictEqual(usage.close(7), { wall_microseconds: 7, tokens: 3, cost_microunits: 0 })
      const late = yield* Effect.flip(usage.service.report({ tokens: 1 }))
      assert.strictEqual(late.reason, "concluded")
    }))

  it.effect.prop(
    "in one window a call is admitted exactly while the usage charged before it is under the limit",
    [fc.integer({ min: 0, max: 200 }), fc.array(fc.integer({ min: 0, max: 80 }), { minLength: 1, maxLength: 6 })],
    ([limit, amounts]) =>
      Effect.gen(function*() {
        const ref = yield* install("tokens", limit)
        let charged = 0
        for (const tokens of amounts) {
          const expected = charged < limit ? "succeeded" : "deferred budget.exhausted"
          assert.strictEqual(summary(yield* exec("model.complete", { tokens }, ref)), expected)
          if (charged < limit) charged += tokens
        }
      }).pipe(Effect.provide(layer())),
    { fastCheck: { numRuns: 25 } }
  )
})

describe("ActionUsage.validate", () => {
  it.prop("accepts a non-negative safe integer", [fc.nat()], ([n]) => {
    assert.isUndefined(ActionUsage.validate({ tokens: n, cost_microunits: n }))
  })

  it.prop(
    "refuses a negative amount as negative and anything else that is not a safe integer as not_integer",
    [fc.oneof(fc.integer({ max: -1 }), fc.double().filter((n) => !Number.isSafeInteger(n)))],
    ([n]) => {
      const refused = ActionUsage.validate({ cost_microunits: n })
      assert.strictEqual(refused?.field, "cost_microunits")
      assert.strictEqual(refused?.reason, Number.isSafeInteger(n) ? "negative" : "not_integer")
      assert.include(refused?.message, "cost_microunits is")
    }
  )
})
