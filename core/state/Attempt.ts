/**
 * Operation attempts and their outbox (spec/runs.md): one attempt per action execution inside a durable Run, committed
 * with its outbox intents in one transaction; only an intent's delivery fields ever change after that.
 */
import { Either, Schema } from "effect"
import { IntentDraft, JsonText } from "../action/ActionOutbox.ts"
import * as Canonical from "../base/Canonical.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { ActionName, Identifier, PolicySnapshotRef } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import type { ExecutionOutcome } from "../execution/ExecutionOutcome.ts"
import { callExecuted, reasonCode, Recheck } from "../execution/ExecutionOutcome.ts"

/** The tag of an ExecutionOutcome. */
export const OutcomeTag = Schema.Literal(
  "succeeded",
  "denied",
  "deferred",
  "escalated",
  "failed",
  "cancelled",
  "timed_out",
  "ambiguous"
)

/** An outcome reduced to what may be stored: its tag, reason code, whether the call ran, and a digest of the result. */
export class OutcomeSummary extends Schema.Class<OutcomeSummary>("OutcomeSummary")({
  tag: OutcomeTag,
  reason_code: Schema.String,
  call_executed: Schema.Boolean,
  result_digest: Schema.NullOr(Sha256Hex)
}) {}

/** The storable summary of an outcome; the raw result never reaches the store, only its digest. */
export const summarize = (outcome: ExecutionOutcome, result_digest: Sha256Hex | null = null): OutcomeSummary =>
  OutcomeSummary.make({
    tag: outcome._tag,
    reason_code: reasonCode(outcome),
    call_executed: callExecuted(outcome),
    result_digest
  })

/**
 * One action execution inside a durable Run; retries are new attempts. Never the raw arguments or result. `recheck`:
 * whether stage 10 re-ran the evaluators, why, and the inputs it compared (absent when the call did not get there).
 * `policy`: the snapshot its context was pinned to (absent when unknown or unpinned).
 */
export class OperationAttempt extends Schema.Class<OperationAttempt>("OperationAttempt")({
  attempt_id: Uuid,
  run_id: Uuid,
  request_id: Identifier,
  action_name: ActionName,
  action_version: Schema.NullOr(Identifier),
  arguments_digest: Schema.NullOr(Sha256Hex),
  outcome: OutcomeSummary,
  created_at: Timestamp,
  recheck: Schema.optional(Recheck),
  policy: Schema.optional(PolicySnapshotRef)
}) {}

export { IntentDraft, JsonText } from "../action/ActionOutbox.ts"

/** Where an intent's delivery stands: pending (including retries), delivered, or failed for good. */
export const DeliveryState = Schema.Literal("pending", "delivered", "failed")

/** Where an intent's delivery stands. */
export type DeliveryState = typeof DeliveryState.Type

/** A committed outbox intent; only its delivery fields ever change, and they never alter the attempt. */
export class OutboxIntent extends Schema.Class<OutboxIntent>("OutboxIntent")({
  intent_id: Uuid,
  run_id: Uuid,
  attempt_id: Uuid,
  topic: Identifier,
  payload_json: JsonText,
  created_at: Timestamp,
  delivery_state: DeliveryState,
  delivery_attempts: Schema.NonNegativeInt,
  last_reason_code: Schema.NullOr(Schema.String),
  delivered_at: Schema.NullOr(Timestamp)
}) {}

/** What `commitAttempt` commits: the attempt and its intents, in one transaction. */
export interface CommitAttempt {
  readonly attempt: OperationAttempt
  readonly intents: ReadonlyArray<IntentDraft>
}

/** A committed attempt and the intents committed with it. */
export class CommittedAttempt extends Schema.Class<CommittedAttempt>("CommittedAttempt")({
  attempt: OperationAttempt,
  intents: Schema.Array(OutboxIntent)
}) {}

/** How a failed delivery is recorded: `retry` keeps the intent pending, otherwise it is failed for good. */
export interface MarkFailedOptions {
  readonly retry?: boolean
}

/** The `writ.outcome` intent an attempt commits with: its id and outcome summary. */
export const outcomeIntent = (attempt: OperationAttempt): IntentDraft =>
  IntentDraft.make({
    topic: "writ.outcome",
    payload_json: Either.getOrThrow(Canonical.stringify({ attempt_id: attempt.attempt_id, ...attempt.outcome }))
  }, { disableValidation: true })
