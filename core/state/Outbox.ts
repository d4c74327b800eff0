/**
 * Outbox delivery: committed intents handed to a sink, oldest first, at least once. Delivery never changes the
 * committed attempt or an intent's content; its result changes only the intent's delivery state: delivered, still
 * pending for a later pass, or failed for good. An intent whose delivery succeeded but was not yet marked (a crash,
 * an interruption) is delivered again by a later pass, so a sink should treat `intent_id` as its idempotency key.
 */
import { Context, Effect, Either, Schema } from "effect"
import { Identifier } from "../base/Refs.ts"
import type { OutboxIntent } from "./Attempt.ts"
import { AttemptStore } from "./AttemptStore.ts"
import type { StateNotFoundError, StateStoreUnavailableError } from "./StateError.ts"

/** Why a sink did not take an intent: the reason code recorded on it, and whether a later pass may try again. */
export class DeliveryError extends Schema.TaggedError<DeliveryError>()("DeliveryError", {
  reason_code: Identifier,
  retryable: Schema.Boolean
}) {
  override get message() {
    return `delivery refused (${this.reason_code}${this.retryable ? ", retryable" : ""})`
  }
}

/** The sink cannot take anything now (its output is gone, say): the pass stops, and no intent is charged an attempt. */
export class SinkUnavailableError extends Schema.TaggedError<SinkUnavailableError>()("SinkUnavailableError", {
  reason_code: Identifier
}) {
  override get message() {
    return `the outbox sink is unavailable (${this.reason_code})`
  }
}

/** Where committed intents are delivered. */
export class OutboxSink extends Context.Tag("writ/OutboxSink")<OutboxSink, OutboxSink.Service>() {}

/** The OutboxSink service. */
export declare namespace OutboxSink {
  /**
   * Take one intent. A DeliveryError refuses that intent (a defect counts as a retryable `outbox.sink_defect`); a
   * SinkUnavailableError stops the pass with the intent untouched.
   */
  export interface Service {
    readonly deliver: (intent: OutboxIntent) => Effect.Effect<void, DeliveryError | SinkUnavailableError>
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

/** What one pass did to each intent it took, by intent id, in delivery order, and what stopped it early, if anything. */
export interface DeliveryReport {
  readonly delivered: ReadonlyArray<string>
  readonly retrying: ReadonlyArray<string>
  readonly failed: ReadonlyArray<string>
  /** The reason code of the SinkUnavailableError that stopped the pass, or null when it took every intent it read. */
  readonly halted: string | null
}

const positive = (name: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Either.right(fallback)
    : Number.isSafeInteger(value) && value > 0
    ? Either.right(value)
    : Either.left(new DeliverOptionsError({ detail: `${name} must be a positive integer, got ${value}` }))

/** The options of a pass with their defaults, or the first one that cannot be honoured. */
export const checkOptions = (
  options: DeliverOptions
): Either.Either<{ readonly limit: number; readonly maxAttempts: number }, DeliverOptionsError> =>
  Either.flatMap(
    positive("limit", options.limit, 100),
    (limit) => Either.map(positive("maxAttempts", options.maxAttempts, 5), (maxAttempts) => ({ limit, maxAttempts }))
  )

const sinkDefect = new DeliveryError({ reason_code: "outbox.sink_defect", retryable: true })

/**
 * One delivery pass: up to `limit` pending intents, oldest first, each handed to the sink and then marked delivered,
 * or, when refused, kept pending (retryable, attempts left) or failed for good. A refused intent does not hold back
 * the ones after it; an unavailable sink stops the pass. Intents kept pending wait for the next pass.
 */
export const deliverPending = (
  options: DeliverOptions = {}
): Effect.Effect<
  DeliveryReport,
  DeliverOptionsError | StateNotFoundError | StateStoreUnavailableError,
  AttemptStore | OutboxSink
> =>
  Effect.gen(function*() {
    const { limit, maxAttempts } = yield* checkOptions(options)
    const store = yield* AttemptStore
    const sink = yield* OutboxSink
    const report = {
      delivered: [] as Array<string>,
      retrying: [] as Array<string>,
      failed: [] as Array<string>,
      halted: null as string | null
    }
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
      if (delivery.left._tag === "SinkUnavailableError") {
        report.halted = delivery.left.reason_code
        break
      }
      const retry = delivery.left.retryable && intent.delivery_attempts + 1 < maxAttempts
      yield* store.markFailed(intent.intent_id, delivery.left.reason_code, { retry })
      ;(retry ? report.retrying : report.failed).push(intent.intent_id)
    }
    return report
  })
