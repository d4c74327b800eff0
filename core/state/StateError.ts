/**
 * The state stores' typed errors: what is missing, what a lifecycle or a projection refuses, what input is refused,
 * and a store that cannot be reached.
 */
import { Schema } from "effect"
import { RunStatus } from "./Run.ts"

/** No Run or intent has this id. */
export class StateNotFoundError extends Schema.TaggedError<StateNotFoundError>()("StateNotFoundError", {
  reason: Schema.Literal("run", "intent"),
  id: Schema.String
}) {
  override get message() {
    return `no ${this.reason} ${this.id} is stored`
  }
}

/** A Run move refused: not an edge of the lifecycle, or the Run is no longer in the expected status. */
export class IllegalTransitionError extends Schema.TaggedError<IllegalTransitionError>()("IllegalTransitionError", {
  reason: Schema.Literal("not_an_edge", "stale_status"),
  run_id: Schema.String,
  from: RunStatus,
  to: RunStatus,
  actual: RunStatus
}) {
  override get message() {
    return this.reason === "not_an_edge"
      ? `run ${this.run_id}: ${this.from} -> ${this.to} is not a lifecycle edge`
      : `run ${this.run_id}: expected ${this.from}, found ${this.actual}`
  }
}

/** An attempt id committed twice; the second commit stores nothing. */
export class DuplicateAttemptError extends Schema.TaggedError<DuplicateAttemptError>()("DuplicateAttemptError", {
  attempt_id: Schema.String
}) {
  override get message() {
    return `attempt ${this.attempt_id} is already committed`
  }
}

/**
 * A projection row that contradicts a stored one: the record with another chain hash (under any projection version),
 * the record at another chain position or another record at its position, or an operation seen on another chain.
 */
export class ProjectionConflictError extends Schema.TaggedError<ProjectionConflictError>()("ProjectionConflictError", {
  reason: Schema.Literal("chain_hash", "chain_position", "operation_chain"),
  chain_id: Schema.String,
  record_id: Schema.String,
  projection_version: Schema.Number,
  stored: Schema.String,
  offered: Schema.String
}) {
  override get message() {
    return `projection of record ${this.record_id} on chain ${this.chain_id} (v${this.projection_version}) conflicts: ` +
      `${this.reason} stored ${this.stored}, offered ${this.offered}`
  }
}

/** Input a store refuses before it touches anything: an attempt or an outbox intent that its schema does not accept. */
export class StateInputError extends Schema.TaggedError<StateInputError>()("StateInputError", {
  reason: Schema.Literal("attempt", "intent"),
  detail: Schema.String
}) {
  override get message() {
    return `invalid ${this.reason}: ${this.detail}`
  }
}

/** The store could not be reached, could not commit, or returned a row that does not decode. */
export class StateStoreUnavailableError extends Schema.TaggedError<StateStoreUnavailableError>()(
  "StateStoreUnavailableError",
  { detail: Schema.String }
) {
  override get message() {
    return `state store unavailable: ${this.detail}`
  }
}
