/**
 * Outbox delivery: committed intents handed to a sink, oldest first, at least once. Delivery never changes the
 * committed attempt or an intent's content; its result changes only the intent's delivery state: delivered, still
 * pending for a later pass, or failed for good. An intent whose delivery succeeded but was not yet marked (a crash,
 * an interruption) is delivered again by a later pass, so a sink should treat `intent_id` as its idempotency key.
 */
import { Context, Effect, Either, Schema } from "effect"
import { Identifier } from "./Refs.ts"
import type { OutboxIntent, StateNotFoundError, StateStoreUnavailableError } from "./StateStore.ts"
import { StateStore } from "./StateStore.ts"

/** Why a sink did not take an intent: the reason code recorded on it, and whether a later pass may try again. */
export class DeliveryError extends Schema.TaggedError<DeliveryError>()("DeliveryError", {
  reason_code: Identifier,
  retryable: Schema.Boolean
}) {
  override get message() {
    return `delivery refused (${this.reason_code}${this.retryable ? ", retryable" : ""})`
  }
}

/** Where committed intents are delivered. */
export class OutboxSink extends Context.Tag("writ/OutboxSink")<OutboxSink, OutboxSink.Service>() {}

/** The OutboxSink service. */
export declare namespace OutboxSink {
  /** Take one intent; a failure is a DeliveryError, and a defect counts as a retryable `outbox.sink_defect`. */
  export interface Service {
    readonly deliver: (intent: OutboxIntent) => Effect.Effect<void, DeliveryError>
  }
}

/** Options that cannot be honoured: nothing is delivered or marked. */
export class DeliverOptionsError extends Schema.TaggedError<DeliverOptionsError>()("DeliverOptionsError", {
  detail: Schema.String
}) {
  override get message() {
    return `invalid outbox delivery options: ${this.detail}`
  }
}

/** How one pass delivers. */
export interface DeliverOptions {
  /** The most intents one pass takes, a positive integer (default 100). */
  readonly limit?: number | undefined
  /** Delivery attempts an intent gets before a retryable refusal fails it for good, a positive integer (default 5). */
  readonly maxAttempts?: number | undefined
}

/** What one pass did to each intent it took, by intent id, in delivery order. */
export interface DeliveryReport {
  readonly delivered: ReadonlyArray<string>
  readonly retrying: ReadonlyArray<string>
  readonly failed: ReadonlyArray<string>
}

const positive = (name: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isSafeInteger(value) && value > 0
    ? Effect.succeed(value)
    : Effect.fail(new DeliverOptionsError({ detail: `${name} must be a positive integer, got ${value}` }))

const sinkDefect = new DeliveryError({ reason_code: "outbox.sink_defect", retryable: true })

/**
 * One delivery pass: up to `limit` pending intents, oldest first, each handed to the sink and then marked delivered,
 * or, when refused, kept pending (retryable, attempts left) or failed for good. A refused intent does not hold back
 * the ones after it. Intents kept pending wait for the next pass.
 */
export const deliverPending = (
  options: DeliverOptions = {}
): Effect.Effect<
  DeliveryReport,
  DeliverOptionsError | StateNotFoundError | StateStoreUnavailableError,
  StateStore | OutboxSink
> =>
  Effect.gen(function*() {
    const limit = yield* positive("limit", options.limit, 100)
    const maxAttempts = yield* positive("maxAttempts", options.maxAttempts, 5)
    const store = yield* StateStore
    const sink = yield* OutboxSink
    const report = { delivered: [] as Array<string>, retrying: [] as Array<string>, failed: [] as Array<string> }
    for (const intent of yield* store.pendingIntents(limit)) {
      const delivery = yield* Effect.either(
        Effect.suspend(() => sink.deliver(intent)).pipe(
          Effect.catchAllDefect((defect) =>
            Effect.zipRight(Effect.logWarning(`outbox sink defect on intent ${intent.intent_id}`, defect), sinkDefect)
          )
        )
      )
      if (Either.isRight(delivery)) {
        yield* store.markDelivered(intent.intent_id)
        report.delivered.push(intent.intent_id)
        continue
      }
      const retry = delivery.left.retryable && intent.delivery_attempts + 1 < maxAttempts
      yield* store.markFailed(intent.intent_id, delivery.left.reason_code, { retry })
      ;(retry ? report.retrying : report.failed).push(intent.intent_id)
    }
    return report
  })
