/**
 * The attempt and outbox rules, applied once for every store: a commit's input checked, an intent staged, delivered
 * or refused.
 */
import { Either, Schema } from "effect"
import type { Uuid } from "../../base/IdGenerator.ts"
import type { Timestamp } from "../../base/Time.ts"
import type { CommitAttempt, MarkFailedOptions } from "../Attempt.ts"
import { IntentDraft, OperationAttempt, OutboxIntent } from "../Attempt.ts"
import { StateInputError } from "../StateError.ts"

/** A staged intent as committed with its attempt: pending, never yet delivered. */
export const pendingIntent = (
  draft: IntentDraft,
  intent_id: Uuid,
  attempt: OperationAttempt,
  now: Timestamp
): OutboxIntent =>
  OutboxIntent.make({
    intent_id,
    run_id: attempt.run_id,
    attempt_id: attempt.attempt_id,
    topic: draft.topic,
    payload_json: draft.payload_json,
    created_at: now,
    delivery_state: "pending",
    delivery_attempts: 0,
    last_reason_code: null,
    delivered_at: null
  })

/** An intent after one successful delivery attempt (a settled intent, delivered or failed for good, stays as it is). */
export const delivered = (intent: OutboxIntent, now: Timestamp): OutboxIntent =>
  intent.delivery_state !== "pending" ? intent : new OutboxIntent({
    ...intent,
    delivery_state: "delivered",
    delivery_attempts: intent.delivery_attempts + 1,
    delivered_at: now
  }, { disableValidation: true })

/** An intent after one failed delivery attempt (a settled intent, delivered or failed for good, stays as it is). */
export const undelivered = (intent: OutboxIntent, reason_code: string, options: MarkFailedOptions = {}): OutboxIntent =>
  intent.delivery_state !== "pending" ? intent : new OutboxIntent({
    ...intent,
    delivery_state: options.retry === true ? "pending" : "failed",
    delivery_attempts: intent.delivery_attempts + 1,
    last_reason_code: reason_code
  }, { disableValidation: true })

/** How many rows a `limit` asks for, the same in every store: its floor, at least 0; Infinity is every row, NaN none. */
export const rowLimit = (limit: number): number =>
  Number.isNaN(limit) ? 0 : Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.floor(limit)))

const decodeAttempt = Schema.decodeUnknownEither(OperationAttempt)
const decodeIntents = Schema.decodeUnknownEither(Schema.Array(IntentDraft))

/**
 * A commit's attempt and intents checked against their schemas before any store touches state (a Schema class checks
 * only that a value is its instance, not its fields, so each is decoded afresh; an intent's payload must be JSON): every
 * store refuses the same input the same way, and stores nothing of it.
 */
export const checkedCommit = (input: CommitAttempt): Either.Either<CommitAttempt, StateInputError> =>
  Either.flatMap(
    Either.mapLeft(decodeAttempt(input.attempt), (error) =>
      new StateInputError({ reason: "attempt", detail: error.message })),
    (attempt) =>
      Either.map(
        Either.mapLeft(decodeIntents(input.intents), (error) =>
          new StateInputError({ reason: "intent", detail: error.message })),
        (intents) => ({ attempt, intents })
      )
  )
