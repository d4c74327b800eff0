import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, FiberId, Layer, Schema } from "effect"
import * as Action from "../../core/action/Action.ts"
import * as ActionOutbox from "../../core/action/ActionOutbox.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import type { Interceptor } from "../../core/execution/Interceptor.ts"
import { base, durableInMemory, executor, run, runningRun } from "../fixtures/layers.ts"
import { stateStores } from "../fixtures/state.ts"

const To = Schema.Struct({ to: Schema.String })

/** What a staging call answered: `staged`, or the refusal's reason. */
const tried = (staging: Effect.Effect<void, ActionOutbox.ActionOutboxError, ActionOutbox.ActionOutbox>) =>
  Effect.match(staging, { onFailure: (error) => error.reason, onSuccess: () => "staged" })

// A handler's fiber that outlives its call: it stages once `gate` opens, and says what it was answered.
const leak = { gate: Deferred.unsafeMake<void>(FiberId.none), answer: Deferred.unsafeMake<string>(FiberId.none) }

const actions = [
  Action.make({
    name: "mail.leak",
    input: To,
    output: Schema.String,
    handler: ({ to }) =>
      Effect.gen(function*() {
        const outbox = yield* ActionOutbox.ActionOutbox
        yield* Effect.forkDaemon(
          Deferred.await(leak.gate).pipe(
            Effect.zipRight(tried(outbox.stage("mail.send", { to }))),
            Effect.flatMap((answer) => Deferred.succeed(leak.answer, answer))
          )
        )
        return "left running"
      })
  }),
  Action.make({
    name: "mail.queue",
    input: To,
    output: Schema.String,
    handler: ({ to }) =>
      Effect.gen(function*() {
        yield* ActionOutbox.stage("mail.send", { to, template: "welcome" })
        yield* ActionOutbox.stage("audit.note", { queued: 1 })
        return "queued"
      })
  }),
  Action.make({
    name: "mail.queue_async",
    input: To,
    output: Schema.String,
    handler: async ({ to }, context) => {
      await Promise.resolve()
      context.stage("mail.send", { to })
      return "queued"
    }
  }),
  Action.make({
    name: "mail.queue_then_fail",
    input: To,
    output: Schema.String,
    handler: ({ to }) =>
      Effect.zipRight(
        ActionOutbox.stage("mail.send", { to }),
        Effect.fail(new Action.ActionError({ code: "mail.refused", message: "no such mailbox" }))
      )
  }),
  Action.make({
    name: "mail.try",
    input: To,
    output: Schema.Array(Schema.String),
    handler: ({ to }) =>
      Effect.all([
        tried(ActionOutbox.stage("", { to })),
        tried(ActionOutbox.stage("mail.send", { to, weight: 1.5 })),
        tried(ActionOutbox.stage("mail.send", { to }))
      ])
  })
]

// An interceptor that meters every call: its charge, after the call, lets the leaked fiber stage and waits for it.
const meter: Interceptor = {
  id: "test.meter",
  stage: "policy",
  evaluate: () => Effect.succeed({ disposition: "allow", code: "test.allowed", metered: true }),
  charge: () => Effect.zipRight(Deferred.succeed(leak.gate, undefined), Deferred.await(leak.answer))
}

const metered = ActionExecutor.layerDurable({ interceptors: [meter] }).pipe(
  Layer.provideMerge(durableInMemory),
  Layer.provideMerge(base(actions))
)

const durable = ActionExecutor.layerDurable().pipe(
  Layer.provideMerge(durableInMemory),
  Layer.provideMerge(base(actions))
)

/** One call of `action` in a new running Run: its outcome and the intents its Run's attempt committed. */
const inRun = (action: string, to: string) =>
  Effect.gen(function*() {
    const { run_id } = yield* runningRun
    const outcome = yield* run(action, { to }, { execution_scope: DurableRun.make({ run_id }) })
    const intents = (yield* (yield* stateStores).pendingIntents(100))
      .filter((intent) => intent.attempt_id === outcome.attempt_id)
    return { outcome, intents: intents.map((intent) => [intent.topic, intent.payload_json]) }
  })

describe("an action's outbox intents", () => {
  it.effect("commit with its attempt, after its outcome intent, in the order staged: from an Effect or a Promise handler", () =>
    Effect.gen(function*() {
      const effect = yield* inRun("mail.queue", "ana@example.org")
      assert.strictEqual(effect.outcome._tag, "succeeded")
      assert.deepStrictEqual(effect.intents.slice(1), [
        ["mail.send", "{\"template\":\"welcome\",\"to\":\"ana@example.org\"}"],
        ["audit.note", "{\"queued\":1}"]
      ])
      assert.strictEqual(effect.intents[0]![0], "writ.outcome")
      const promise = yield* inRun("mail.queue_async", "bo@example.org")
      assert.deepStrictEqual(promise.intents.map(([topic]) => topic), ["writ.outcome", "mail.send"])
    }).pipe(Effect.provide(durable)))

  it.effect("are dropped when the call does not succeed: only the outcome intent commits", () =>
    Effect.gen(function*() {
      const { intents, outcome } = yield* inRun("mail.queue_then_fail", "cy@example.org")
      assert.strictEqual(outcome._tag, "failed")
      assert.deepStrictEqual(intents.map(([topic]) => topic), ["writ.outcome"])
    }).pipe(Effect.provide(durable)))

  it.effect("a malformed intent is refused to the handler, naming what is wrong, and is not staged", () =>
    Effect.gen(function*() {
      const { intents, outcome } = yield* inRun("mail.try", "di@example.org")
      assert.deepStrictEqual(outcome._tag === "succeeded" && outcome.result, [
        "invalid_intent",
        "invalid_intent",
        "staged"
      ])
      assert.deepStrictEqual(intents.map(([topic]) => topic), ["writ.outcome", "mail.send"])
      const [topic, payload] = [
        ActionOutbox.draftOf("", {}),
        ActionOutbox.draftOf("mail.send", { weight: 1.5 })
      ]
      assert.isTrue(topic._tag === "Left" && /^topic: /.test(topic.left.detail))
      assert.isTrue(payload._tag === "Left" && /float/.test(payload.left.detail))
      assert.isTrue(ActionOutbox.draftOf("mail.send", [1])._tag === "Left")
    }).pipe(Effect.provide(durable)))

  it.effect("cannot be staged once the invocation has ended: a fiber it left running is refused (concluded)", () =>
    Effect.gen(function*() {
      // The metering interceptor's charge runs after the call and before the attempt commits: the leaked fiber
      // stages right then.
      const { intents, outcome } = yield* inRun("mail.leak", "fy@example.org")
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(yield* Deferred.await(leak.answer), "concluded")
      assert.deepStrictEqual(intents.map(([topic]) => topic), ["writ.outcome"])
      const pending = yield* (yield* stateStores).pendingIntents(100)
      assert.notInclude(pending.map((intent) => intent.payload_json).join(), "fy@example.org")
    }).pipe(Effect.provide(metered)))

  it.effect("may not use writ's own topics: the outcome intent is a fact no action can forge", () =>
    Effect.gen(function*() {
      for (const topic of ["writ", "writ.outcome", "writ.anything"]) {
        const refused = ActionOutbox.draftOf(topic, { attempt_id: "someone-else", tag: "succeeded" })
        assert.isTrue(refused._tag === "Left" && refused.left.reason === "invalid_intent", topic)
      }
      assert.isTrue(ActionOutbox.draftOf("writer.note", {})._tag === "Right")
    }))

  it.effect("outside the durable profile, staging is refused (not_durable): no store would keep the intent", () =>
    Effect.gen(function*() {
      const outcome = yield* run("mail.try", { to: "ed@example.org" })
      assert.deepStrictEqual(outcome._tag === "succeeded" && outcome.result, [
        "invalid_intent",
        "invalid_intent",
        "not_durable"
      ])
      const refused = yield* run("mail.queue", { to: "ed@example.org" })
      assert.strictEqual(refused._tag, "failed", "a handler that does not handle the refusal fails")
    }).pipe(Effect.provide(executor(actions))))
})
