/**
 * Gate 3, typed lifecycle: allow, defer, deny, escalate, successful None, failure, cancellation,
 * timeout and ambiguous results are distinct, stable outcomes, each naming its profile.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Schema, TestClock } from "effect"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor } from "../../core/execution/ActionExecutor.ts"
import { callExecuted, ExecutionOutcome, reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { started, toolSet } from "../fixtures/actions.ts"
import { call, executor, run } from "../fixtures/layers.ts"

const tools = toolSet()

const byArgument = Interceptor.make("by-argument", "policy", (e) => {
  switch (e.arguments.a) {
    case 100:
      return { disposition: "defer", code: "capacity.unavailable" }
    case 200:
      return { disposition: "escalate", code: "approval.required" }
    case 300:
      return Interceptor.deny("policy.denied")
    default:
      return Interceptor.allow()
  }
})

const sleepStarted = (before: number) => started(() => tools.counter.count("sleep"), before)

const cancelled = Effect.gen(function*() {
  const executor = yield* ActionExecutor
  const cancel = yield* Deferred.make<void>()
  const { context, request } = yield* call("sleep", { millis: 60_000 })
  const before = tools.counter.count("sleep")
  const fiber = yield* Effect.fork(executor.execute(request, { context, cancel }))
  yield* sleepStarted(before)
  yield* TestClock.adjust("1 second")
  yield* Deferred.succeed(cancel, undefined)
  return yield* Fiber.join(fiber)
})

const timedOut = Effect.gen(function*() {
  const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
  const before = tools.counter.count("sleep")
  const fiber = yield* Effect.fork(run("sleep", { millis: 60_000 }, { deadline }))
  yield* sleepStarted(before)
  yield* TestClock.adjust("2 seconds")
  return yield* Fiber.join(fiber)
})

describe("gate 3: typed lifecycle", () => {
  it.effect("each way an execution can end has its own outcome and reason", () =>
    Effect.gen(function*() {
      const outcomes = {
        allow: yield* run("add", { a: 1, b: 2 }),
        defer: yield* run("add", { a: 100, b: 0 }),
        escalate: yield* run("add", { a: 200, b: 0 }),
        deny: yield* run("add", { a: 300, b: 0 }),
        none: yield* run("noop", {}),
        failure: yield* run("refuse", {}),
        cancellation: yield* cancelled,
        timeout: yield* timedOut
      }
      const summary = Object.fromEntries(
        Object.entries(outcomes).map(([name, o]) => [name, [o._tag, reasonCode(o), callExecuted(o), o.profile]])
      )
      assert.deepStrictEqual(summary, {
        allow: ["succeeded", "ok", true, "minimal"],
        defer: ["deferred", "capacity.unavailable", false, "minimal"],
        escalate: ["escalated", "approval.required", false, "minimal"],
        deny: ["denied", "policy.denied", false, "minimal"],
        none: ["succeeded", "ok", true, "minimal"],
        failure: ["failed", "upstream.unavailable", true, "minimal"],
        cancellation: ["cancelled", "execution.cancelled", true, "minimal"],
        timeout: ["timed_out", "execution.deadline_exceeded", true, "minimal"]
      })
    }).pipe(Effect.provide(executor(tools.actions, { interceptors: [byArgument] }))))

  it("ambiguous is a closed variant of its own, and the union admits nothing else", () => {
    const decode = Schema.decodeUnknownEither(ExecutionOutcome)
    const common = {
      request_id: "r1",
      attempt_id: "00000000-0000-4000-8000-000000000001",
      action: { name: "remote.call" },
      profile: "minimal",
      stage: "invoke",
      decisions: []
    }
    const ambiguous = decode({ ...common, _tag: "ambiguous", reason: { code: "backend.lost" } })
    assert.isTrue(Either.isRight(ambiguous))
    if (Either.isRight(ambiguous)) assert.isTrue(callExecuted(ambiguous.right))
    assert.isTrue(Either.isLeft(decode({ ...common, _tag: "maybe" })))
    assert.isTrue(Either.isLeft(decode({ ...common, _tag: "succeeded", result: 1, profile: "imaginary" })))
    const { profile: _, ...withoutProfile } = common
    assert.isTrue(Either.isLeft(decode({ ...withoutProfile, _tag: "succeeded", result: 1 })))
  })

  it.effect("outcomes survive the wire: encode then decode gives the same outcome", () =>
    Effect.gen(function*() {
      for (
        const outcome of [
          yield* run("add", { a: 1, b: 2 }),
          yield* run("add", { a: "x" }),
          yield* run("explode", { secret: "s" })
        ]
      ) {
        const wire = JSON.parse(JSON.stringify(Schema.encodeSync(ExecutionOutcome)(outcome)))
        assert.deepStrictEqual(Schema.decodeUnknownSync(ExecutionOutcome)(wire), outcome)
      }
    }).pipe(Effect.provide(executor(tools.actions))))
})
