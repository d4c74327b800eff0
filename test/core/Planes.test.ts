import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Ref } from "effect"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { toolSet } from "../fixtures/actions.ts"
import { executor, run } from "../fixtures/layers.ts"

const tools = toolSet()

const limitA = Interceptor.make(
  "a-at-most-10",
  "policy",
  (e) => (e.arguments.a as number) <= 10 ? Interceptor.allow() : Interceptor.deny("policy.denied", "a is too large")
)

describe("interceptors, transformers and observers", () => {
  it.effect("security stages run in fixed order whatever order they were configured in", () =>
    Effect.gen(function*() {
      const outcome = yield* run("add", { a: 1, b: 2 })
      assert.deepStrictEqual(outcome.decisions.map((d) => [d.stage, d.evaluator]), [
        ["authorise", "who"],
        ["guard", "guard"],
        ["policy", "a-at-most-10"]
      ])
      const digests = new Set(outcome.decisions.map((d) => d.arguments_digest))
      assert.strictEqual(digests.size, 1)
      assert.match([...digests][0]!, /^[0-9a-f]{64}$/)
      assert.strictEqual(outcome.recheck?.reason, "no_transformation")
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [
        limitA,
        Interceptor.make("guard", "guard", () => Interceptor.allow()),
        Interceptor.make("who", "authorise", () => Interceptor.allow())
      ]
    }))))

  it.effect("a deny stops the plan: later evaluators and the callable are not reached", () =>
    Effect.gen(function*() {
      const before = tools.counter.count("add")
      const outcome = yield* run("add", { a: 11, b: 2 })
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag !== "denied") return
      assert.deepStrictEqual({ ...outcome.reason }, { code: "policy.denied", detail: "a is too large" })
      assert.strictEqual(outcome.stage, "policy")
      assert.strictEqual(tools.counter.count("add"), before)
    }).pipe(Effect.provide(executor(tools.actions, { interceptors: [limitA] }))))

  it.effect("defer and escalate are their own outcomes, not denials", () =>
    Effect.gen(function*() {
      const deferred = yield* run("add", { a: 1, b: 1 })
      assert.strictEqual(deferred._tag, "deferred")
      if (deferred._tag === "deferred") assert.strictEqual(deferred.retry_at, "2030-01-01T00:00:00.000000Z")
      const escalated = yield* run("add", { a: 2, b: 1 })
      assert.strictEqual(escalated._tag, "escalated")
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [{
        id: "gate",
        stage: "policy",
        evaluate: (e) =>
          Effect.succeed(
            e.arguments.a === 1
              ? { disposition: "defer", code: "capacity.unavailable", retry_at: "2030-01-01T00:00:00.000000Z" as never }
              : { disposition: "escalate", code: "approval.required" }
          )
      }]
    }))))

  it.effect("an evaluator that fails or throws denies with control.evaluator_error", () =>
    Effect.gen(function*() {
      const outcome = yield* run("add", { a: 1, b: 2 })
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "control.evaluator_error")
      assert.strictEqual(outcome.decisions[0]!.evaluator, "broken")
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [Interceptor.make("broken", "guard", () => {
        throw new Error("secret detail")
      })]
    }))))

  it.effect("a transformation that changes the arguments forces revalidation and a recheck on the new digest", () =>
    Effect.gen(function*() {
      const before = tools.counter.count("add")
      const outcome = yield* run("add", { a: 5, b: 2 })
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag !== "denied") return
      assert.strictEqual(outcome.stage, "recheck")
      assert.strictEqual(outcome.recheck?.ran, true)
      assert.notStrictEqual(outcome.recheck?.digest_before, outcome.recheck?.digest_after)
      const [first, second] = outcome.decisions
      assert.strictEqual(first!.disposition, "allow")
      assert.strictEqual(second!.stage, "recheck")
      assert.strictEqual(second!.disposition, "deny")
      assert.strictEqual(second!.arguments_digest, outcome.recheck?.digest_after)
      assert.strictEqual(tools.counter.count("add"), before)
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [limitA],
      transformers: [{
        id: "times-ten",
        transform: (e) => Effect.succeed({ ...e.arguments, a: (e.arguments.a as number) * 10 })
      }]
    }))))

  it.effect("a transformation into invalid arguments is denied at revalidate", () =>
    Effect.gen(function*() {
      const outcome = yield* run("add", { a: 5, b: 2 })
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "schema.invalid")
      assert.strictEqual(outcome.stage, "revalidate")
    }).pipe(Effect.provide(executor(tools.actions, {
      transformers: [{ id: "breaks", transform: (e) => Effect.succeed({ ...e.arguments, a: "five" }) }]
    }))))

  it.effect("an unchanged digest skips the recheck and records why", () =>
    Effect.gen(function*() {
      const outcome = yield* run("add", { a: 5, b: 2 })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.deepStrictEqual(
        { ran: outcome.recheck?.ran, reason: outcome.recheck?.reason },
        { ran: false, reason: "arguments_unchanged" }
      )
      assert.strictEqual(outcome.decisions.length, 1)
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [limitA],
      transformers: [{ id: "reorder", transform: (e) => Effect.succeed({ b: e.arguments.b, a: e.arguments.a }) }]
    }))))

  it.effect("observers see every conclusion; a failing observer changes nothing", () =>
    Effect.gen(function*() {
      const seen = yield* Ref.make<Array<ExecutionOutcome>>([])
      const outcomes = yield* Effect.provide(
        Effect.all([run("add", { a: 1, b: 2 }), run("add", { a: "x" })]),
        executor(tools.actions, {
          observers: [
            { id: "dies", observe: () => Effect.die("observer defect") },
            {
              id: "throws",
              observe: () => {
                throw new Error("observer threw before making its effect")
              }
            },
            { id: "fails", observe: () => Effect.fail("observer failure") },
            { id: "records", observe: (event) => Ref.update(seen, (all) => [...all, event.outcome]) }
          ]
        })
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["succeeded", "denied"])
      assert.deepStrictEqual((yield* Ref.get(seen)).map((o) => o._tag), ["succeeded", "denied"])
    }))

  const stuck = { told: 0 }
  it.effect("an interrupted execution waits for no observer", () =>
    Effect.gen(function*() {
      const running = yield* Effect.fork(run("sleep", { millis: 60_000 }))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(running)
      assert.isTrue((yield* Fiber.await(running))._tag === "Failure")
      yield* Effect.yieldNow()
      assert.strictEqual(stuck.told, 1, "the stuck observer was still told, in the background")
    }).pipe(Effect.provide(executor(tools.actions, {
      observers: [{ id: "stuck", observe: () => Effect.zipRight(Effect.sync(() => void stuck.told++), Effect.never) }]
    }))))
})
