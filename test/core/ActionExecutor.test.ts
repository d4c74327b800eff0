import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Schema, TestClock, Tracer } from "effect"
import * as Action from "../../core/action/Action.ts"
import { ActionRegistry } from "../../core/action/ActionRegistry.ts"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor } from "../../core/execution/ActionExecutor.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { stages } from "../../core/execution/Stage.ts"
import { started, toolSet } from "../fixtures/actions.ts"
import { call, executor, run } from "../fixtures/layers.ts"

const tools = toolSet()

describe("ActionExecutor (minimal profile)", () => {
  it.effect("an allowed call succeeds with the encoded result and names its profile", () =>
    Effect.gen(function*() {
      const before = tools.counter.count("add")
      const outcome = yield* run("add", { a: 2, b: 3 })
      assert.strictEqual(outcome._tag, "succeeded")
      if (outcome._tag !== "succeeded") return
      assert.strictEqual(outcome.result, 5)
      assert.strictEqual(outcome.profile, "minimal")
      assert.strictEqual(outcome.stage, "outcome")
      assert.deepStrictEqual({ ...outcome.action }, { name: "add", version: "1" })
      assert.strictEqual(tools.counter.count("add"), before + 1)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("resolves an alias to the canonical action", () =>
    Effect.gen(function*() {
      const outcome = yield* run("sum", { a: 1, b: 1 })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(outcome.action.name, "add")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("an undefined result is success, not failure", () =>
    Effect.gen(function*() {
      const outcome = yield* run("noop", {})
      assert.strictEqual(outcome._tag, "succeeded")
      if (outcome._tag === "succeeded") assert.strictEqual(outcome.result, undefined)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("schema-invalid arguments are denied naming the field, and the callable is not reached", () =>
    Effect.gen(function*() {
      const before = tools.counter.count("add")
      const outcome = yield* run("add", { a: 2, b: "three" })
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag !== "denied") return
      assert.strictEqual(outcome.reason.code, "schema.invalid")
      assert.include(outcome.reason.detail, "arguments.b")
      assert.notInclude(outcome.reason.detail ?? "", "three")
      assert.strictEqual(outcome.stage, "normalise")
      assert.strictEqual(tools.counter.count("add"), before)
      const extra = yield* run("add", { a: 1, b: 2, c: 3 })
      assert.strictEqual(extra._tag === "denied" && extra.reason.detail, "arguments.c: is not an accepted field")
      const missing = yield* run("add", { a: 1 })
      assert.strictEqual(missing._tag === "denied" && missing.reason.detail, "arguments.b: is missing")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("an action without inputs refuses any argument", () =>
    Effect.gen(function*() {
      const outcome = yield* run("noop", { sneaky: true })
      assert.strictEqual(
        outcome._tag === "denied" && outcome.reason.detail,
        "arguments.sneaky: is not an accepted field"
      )
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("an unknown action is denied at resolve", () =>
    Effect.gen(function*() {
      const outcome = yield* run("nope", {})
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag === "denied") {
        assert.strictEqual(outcome.reason.code, "action.not_found")
        assert.strictEqual(outcome.stage, "resolve")
      }
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a thrown error is a captured, redacted failure", () =>
    Effect.gen(function*() {
      const outcome = yield* run("explode", { secret: "hunter2" })
      assert.strictEqual(outcome._tag, "failed")
      if (outcome._tag !== "failed") return
      assert.strictEqual(outcome.failure.code, "handler.failed")
      assert.strictEqual(outcome.failure.message, undefined)
      assert.notInclude(JSON.stringify(Schema.encodeSync(Schema.Unknown)(outcome)), "hunter2")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("an ActionError keeps its public code and message", () =>
    Effect.gen(function*() {
      const outcome = yield* run("refuse", {})
      assert.strictEqual(outcome._tag, "failed")
      if (outcome._tag === "failed") {
        assert.deepStrictEqual({ ...outcome.failure }, {
          code: "upstream.unavailable",
          message: "the upstream is down"
        })
      }
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a result that breaks the output Schema is a failure after the call", () =>
    Effect.gen(function*() {
      const outcome = yield* run("liar", {})
      assert.strictEqual(outcome._tag, "failed")
      if (outcome._tag === "failed") assert.strictEqual(outcome.failure.code, "output.invalid")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a deadline that passes during the call is timed_out, with teardown completed", () =>
    Effect.gen(function*() {
      const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
      const before = tools.counter.count("sleep")
      const fiber = yield* Effect.fork(run("sleep", { millis: 60_000 }, { deadline }))
      yield* started(() => tools.counter.count("sleep"), before)
      yield* TestClock.adjust("2 seconds")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome._tag, "timed_out")
      if (outcome._tag !== "timed_out") return
      assert.isTrue(outcome.call_executed)
      assert.strictEqual(outcome.teardown, "completed")
      assert.strictEqual(outcome.stage, "invoke")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a deadline already past is timed_out before the callable", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("10 seconds")
      const before = tools.counter.count("sleep")
      const outcome = yield* run("sleep", { millis: 1 }, { deadline: Time.fromMicros(1) })
      assert.strictEqual(outcome._tag, "timed_out")
      if (outcome._tag === "timed_out") assert.isFalse(outcome.call_executed)
      assert.strictEqual(tools.counter.count("sleep"), before)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a deadline that passes during the pre-call stages is timed_out before the callable", () =>
    Effect.gen(function*() {
      const before = tools.counter.count("sleep")
      const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
      const outcome = yield* run("sleep", { millis: 1 }, { deadline })
      assert.strictEqual(outcome._tag, "timed_out")
      if (outcome._tag === "timed_out") assert.isFalse(outcome.call_executed)
      assert.strictEqual(tools.counter.count("sleep"), before)
    }).pipe(Effect.provide(executor(tools.actions, {
      // A slow policy stage: the deadline passes after its admission and before the call.
      interceptors: [{
        id: "slow",
        stage: "policy",
        evaluate: () => Effect.as(TestClock.adjust("2 seconds"), Interceptor.allow())
      }]
    }))))

  it.effect("a cancellation request interrupts the callable and returns cancelled", () =>
    Effect.gen(function*() {
      const executor = yield* ActionExecutor
      const cancel = yield* Deferred.make<void>()
      const { context, request } = yield* call("sleep", { millis: 60_000 })
      const before = tools.counter.count("sleep")
      const fiber = yield* Effect.fork(executor.execute(request, { context, cancel }))
      yield* started(() => tools.counter.count("sleep"), before)
      yield* TestClock.adjust("1 second")
      yield* Deferred.succeed(cancel, undefined)
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome._tag, "cancelled")
      if (outcome._tag === "cancelled") assert.isTrue(outcome.call_executed)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a teardown that outlasts its bound is reported abandoned", () =>
    Effect.gen(function*() {
      const registry = yield* ActionRegistry
      yield* registry.register(Action.make({
        name: "stubborn",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => {
          tools.counter.hit("stubborn")
          return Effect.acquireRelease(Effect.void, () => Effect.sleep("1 hour")).pipe(Effect.zipRight(Effect.never))
        }
      }))
      const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
      const before = tools.counter.count("stubborn")
      const fiber = yield* Effect.fork(run("stubborn", {}, { deadline }))
      yield* started(() => tools.counter.count("stubborn"), before)
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("1 second")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome._tag, "timed_out")
      if (outcome._tag === "timed_out") assert.strictEqual(outcome.teardown, "abandoned")
    }).pipe(Effect.provide(executor(tools.actions, { teardown: "500 millis" }))))

  it.effect("an outer interruption waits for the callable's teardown only within its bound, with or without a deadline", () =>
    Effect.gen(function*() {
      const registry = yield* ActionRegistry
      yield* registry.register(Action.make({
        name: "clinging",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => {
          tools.counter.hit("clinging")
          return Effect.acquireRelease(Effect.void, () => Effect.sleep("1 hour")).pipe(Effect.zipRight(Effect.never))
        }
      }))
      // Whether a fiber has ended once every fiber that can run has run.
      const ended = (fiber: Fiber.RuntimeFiber<unknown, unknown>) =>
        Effect.map(Effect.zipRight(Effect.repeatN(Effect.yieldNow(), 50), Fiber.poll(fiber)), Option.isSome)
      for (const deadline of [undefined, Time.fromMicros((yield* Time.nowMicros) + 3_600_000_000)]) {
        const before = tools.counter.count("clinging")
        const execution = yield* Effect.fork(run("clinging", {}, deadline === undefined ? {} : { deadline }))
        yield* started(() => tools.counter.count("clinging"), before)
        const interrupting = yield* Effect.fork(Fiber.interrupt(execution))
        yield* TestClock.adjust("400 millis")
        assert.isFalse(yield* ended(interrupting), "the teardown is given its bound")
        yield* TestClock.adjust("200 millis")
        assert.isTrue(yield* ended(interrupting), "the interruption returns once the bound has passed")
      }
    }).pipe(Effect.provide(executor(tools.actions, { teardown: "500 millis" }))))

  it.effect("each execution is a new attempt with its own identity", () =>
    Effect.gen(function*() {
      const first = yield* run("add", { a: 1, b: 2 })
      const second = yield* run("add", { a: 1, b: 2 })
      assert.strictEqual(first.request_id, second.request_id)
      assert.notStrictEqual(first.attempt_id, second.attempt_id)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("each execute is one span, ActionExecutor.execute, under the caller's, taking no stack trace, the handler in it", () =>
    Effect.gen(function*() {
      const native = yield* Effect.tracer
      const opened: Array<{ readonly span: Tracer.Span; readonly options: Tracer.SpanOptions | undefined }> = []
      const recording = Tracer.make({
        span: (...args) => {
          const span = native.span(...args)
          opened.push({ span, options: args[6] })
          return span
        },
        context: (f, fiber) => native.context(f, fiber)
      })
      const registry = yield* ActionRegistry
      yield* registry.register(Action.make({
        name: "span.read",
        input: Schema.Struct({}),
        output: Schema.Array(Schema.String),
        handler: () =>
          Effect.map(Effect.currentSpan, (span) => {
            const names: Array<string> = []
            let at: Option.Option<Tracer.AnySpan> = Option.some(span)
            while (Option.isSome(at) && at.value._tag === "Span") {
              names.push(at.value.name)
              at = at.value.parent
            }
            return names
          })
      }))
      const outcome = yield* run("span.read", {}).pipe(Effect.withSpan("caller"), Effect.withTracer(recording))
      assert.strictEqual(outcome._tag, "succeeded")
      if (outcome._tag !== "succeeded") return
      assert.deepStrictEqual(outcome.result, ["ActionExecutor.execute", "caller"])
      const executes = () => opened.filter(({ span }) => span.name === "ActionExecutor.execute")
      assert.strictEqual(executes().length, 1)
      assert.strictEqual(executes()[0]!.span.status._tag, "Ended")
      assert.strictEqual(executes()[0]!.options?.captureStackTrace, false)
      yield* run("add", { a: 1, b: 2 }).pipe(Effect.withTracer(recording))
      assert.strictEqual(executes().length, 2)
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("an action registered after the executor was built still runs every stage", () =>
    Effect.gen(function*() {
      const registry = yield* ActionRegistry
      yield* registry.register(Action.make({
        name: "late",
        input: Schema.Struct({}),
        output: Schema.String,
        handler: () => "late"
      }))
      const executor = yield* ActionExecutor
      const plan = yield* executor.plan({ name: "late" })
      assert.deepStrictEqual(plan.stages.map((s) => s.stage), [...stages])
      const outcome = yield* run("late", {})
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "policy.denied")
      assert.strictEqual(outcome.stage, "policy")
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [Interceptor.make("deny-late", "policy", (e) =>
        e.descriptor.name === "late" ? Interceptor.deny("policy.denied") : Interceptor.allow())]
    }))))
})
