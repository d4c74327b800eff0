import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Ref } from "effect"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as SqlStateStore from "../../adapters/sql/SqlStateStore.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { deliverPending, DeliveryError, OutboxSink, SinkUnavailableError } from "../../core/state/Outbox.ts"
import * as StateStore from "../../core/state/StateStore.ts"
import { runningRun } from "../fixtures/layers.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"
import { attempt } from "../fixtures/state.ts"

const layers = [
  ["memory", MemoryStateStore.layer],
  ["sqlite", SqlStateStore.layer.pipe(Layer.provide(sqliteLayer()))]
] as const

/** One attempt committed with intents on `topics`, in a running Run: the committed intents. */
const commitWith = (...topics: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const run = yield* runningRun
    const committed = yield* (yield* StateStore.AttemptStore).commitAttempt({
      attempt: attempt(run.run_id, yield* IdGenerator.uuid),
      intents: topics.map((topic) => StateStore.IntentDraft.make({ topic, payload_json: `{"topic":"${topic}"}` }))
    })
    return committed
  })

/**
 * A sink answering by topic (`refuse.*` retryable, `reject.*` not, `down.*` the sink unavailable, `crash.*` dies) and
 * recording what it took.
 */
// How the sink answers an intent of a topic.
const answerTo = (topic: string): Effect.Effect<void, DeliveryError | SinkUnavailableError> =>
  topic.startsWith("refuse.")
    ? new DeliveryError({ reason_code: "sink.busy", retryable: true })
    : topic.startsWith("reject.")
    ? new DeliveryError({ reason_code: "sink.rejected", retryable: false })
    : topic.startsWith("down.")
    ? new SinkUnavailableError({ reason_code: "sink.gone" })
    : topic.startsWith("crash.")
    ? Effect.sync(() => {
      throw new Error("sink bug")
    })
    : Effect.void

const recordingSink = Effect.map(Ref.make<ReadonlyArray<string>>([]), (taken) => ({
  taken,
  sink: OutboxSink.of({
    deliver: (intent) => Effect.zipRight(Ref.update(taken, (all) => [...all, intent.topic]), answerTo(intent.topic))
  })
}))

for (const [name, layer] of layers) {
  describe(`Outbox delivery over the ${name} StateStore`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, StateStore.StateStores | IdGenerator.IdGenerator>) =>
      Effect.provide(effect, Layer.fresh(layer).pipe(Layer.provideMerge(IdGenerator.layerCrypto)))

    it.effect("delivers pending intents oldest first, once each, and never changes the attempt or an intent's content", () =>
      provided(Effect.gen(function*() {
        const store = yield* StateStore.AttemptStore
        const first = yield* commitWith("audit.one", "audit.two")
        const second = yield* commitWith("audit.three")
        const { sink, taken } = yield* recordingSink
        const report = yield* Effect.provideService(deliverPending(), OutboxSink, sink)
        const ids = [...first.intents, ...second.intents].map((intent) => intent.intent_id)
        assert.deepStrictEqual(report, { delivered: ids, retrying: [], failed: [], halted: null })
        assert.deepStrictEqual(yield* Ref.get(taken), ["audit.one", "audit.two", "audit.three"])
        assert.deepStrictEqual(yield* store.pendingIntents(10), [])
        assert.deepStrictEqual(
          yield* Effect.provideService(deliverPending(), OutboxSink, sink),
          { delivered: [], retrying: [], failed: [], halted: null }
        )
        assert.strictEqual((yield* Ref.get(taken)).length, 3, "a delivered intent is not delivered again")
        assert.deepStrictEqual(yield* store.listAttempts(first.attempt.run_id), [first.attempt])
        const settled = yield* store.markDelivered(ids[0]!)
        assert.deepStrictEqual(
          [settled.delivery_state, settled.delivery_attempts, settled.payload_json, settled.topic],
          ["delivered", 1, first.intents[0]!.payload_json, "audit.one"]
        )
      })))

    it.effect("a refusal keeps its intent pending until its attempts run out; a final refusal or a defect is recorded and does not hold back the rest", () =>
      provided(Effect.gen(function*() {
        const store = yield* StateStore.AttemptStore
        const { intents } = yield* commitWith("refuse.later", "reject.now", "crash.sink", "audit.fine")
        const [refused, rejected, crashed, fine] = intents.map((intent) => intent.intent_id)
        const { sink } = yield* recordingSink
        const pass = Effect.provideService(deliverPending({ maxAttempts: 2 }), OutboxSink, sink)

        assert.deepStrictEqual(yield* pass, {
          delivered: [fine!],
          retrying: [refused!, crashed!],
          failed: [rejected!],
          halted: null
        })
        const pending = yield* store.pendingIntents(10)
        assert.deepStrictEqual(
          pending.map((intent) => [intent.intent_id, intent.delivery_attempts, intent.last_reason_code]),
          [[refused!, 1, "sink.busy"], [crashed!, 1, "outbox.sink_defect"]]
        )
        assert.deepStrictEqual(yield* pass, { delivered: [], retrying: [], failed: [refused!, crashed!], halted: null })
        assert.deepStrictEqual(yield* store.pendingIntents(10), [])
        const last = yield* store.markFailed(refused!, "ignored")
        assert.deepStrictEqual(
          [last.delivery_state, last.delivery_attempts, last.last_reason_code],
          ["failed", 2, "sink.busy"],
          "an intent failed for good stays as it was"
        )
      })))

    it.effect("an unavailable sink stops the pass: that intent and the rest stay pending, charged no attempt", () =>
      provided(Effect.gen(function*() {
        const store = yield* StateStore.AttemptStore
        const { intents } = yield* commitWith("audit.first", "down.now", "audit.after")
        const { sink, taken } = yield* recordingSink
        const report = yield* Effect.provideService(deliverPending({ maxAttempts: 1 }), OutboxSink, sink)
        assert.deepStrictEqual(report, {
          delivered: [intents[0]!.intent_id],
          retrying: [],
          failed: [],
          halted: "sink.gone"
        })
        assert.deepStrictEqual(yield* Ref.get(taken), ["audit.first", "down.now"])
        assert.deepStrictEqual(
          (yield* store.pendingIntents(10)).map((intent) => [intent.topic, intent.delivery_attempts]),
          [["down.now", 0], ["audit.after", 0]]
        )
      })))

    it.effect("a pass takes at most `limit` intents; options it cannot honour deliver and mark nothing", () =>
      provided(Effect.gen(function*() {
        const store = yield* StateStore.AttemptStore
        const { intents } = yield* commitWith("audit.a", "audit.b", "audit.c")
        const { sink, taken } = yield* recordingSink
        for (const options of [{ limit: 0 }, { limit: 1.5 }, { maxAttempts: -1 }, { limit: Number.NaN }]) {
          const error = yield* Effect.flip(Effect.provideService(deliverPending(options), OutboxSink, sink))
          assert.strictEqual(error._tag, "DeliverOptionsError")
          assert.match(error.message, /must be a positive integer/)
        }
        assert.deepStrictEqual(yield* Ref.get(taken), [])
        assert.strictEqual((yield* store.pendingIntents(10)).length, 3)
        const report = yield* Effect.provideService(deliverPending({ limit: 2 }), OutboxSink, sink)
        assert.deepStrictEqual(report.delivered, intents.slice(0, 2).map((intent) => intent.intent_id))
        assert.deepStrictEqual((yield* store.pendingIntents(10)).map((intent) => intent.topic), ["audit.c"])
      })))
  })
}
