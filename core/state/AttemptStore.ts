/**
 * The AttemptStore port (spec/runs.md): operation attempts committed with their outbox intents in one transaction,
 * and the outbox's delivery state, built once over the StateStorage driver in context.
 */
import { Context, Layer } from "effect"
import type { Effect } from "effect"
import type { IdGenerator } from "../base/IdGenerator.ts"
import type { CommitAttempt, CommittedAttempt, MarkFailedOptions, OperationAttempt, OutboxIntent } from "./Attempt.ts"
import { makeAttempts } from "./internal/attempts.ts"
import type {
  DuplicateAttemptError,
  StateInputError,
  StateNotFoundError,
  StateStoreUnavailableError
} from "./StateError.ts"
import type { StateStorage } from "./StateStorage.ts"

/** Operation attempts and their outbox intents. */
export class AttemptStore extends Context.Tag("writ/AttemptStore")<AttemptStore, AttemptStore.Service>() {}

/** The AttemptStore service. */
export declare namespace AttemptStore {
  /** Every method; a durable store commits each write atomically and survives restart. */
  export interface Service {
    /**
     * Commit an attempt and its outbox intents in one transaction; a duplicate attempt id commits nothing, and neither
     * does an attempt or intent its schema refuses (StateInputError).
     */
    readonly commitAttempt: (
      input: CommitAttempt
    ) => Effect.Effect<
      CommittedAttempt,
      StateInputError | StateNotFoundError | DuplicateAttemptError | StateStoreUnavailableError
    >
    /** A Run's attempts in commit order. */
    readonly listAttempts: (
      run_id: string
    ) => Effect.Effect<ReadonlyArray<OperationAttempt>, StateStoreUnavailableError>
    /** Up to `limit` intents awaiting delivery, oldest first. */
    readonly pendingIntents: (limit: number) => Effect.Effect<ReadonlyArray<OutboxIntent>, StateStoreUnavailableError>
    /** Record a delivery; an intent already delivered or failed for good stays as it is. */
    readonly markDelivered: (
      intent_id: string
    ) => Effect.Effect<OutboxIntent, StateNotFoundError | StateStoreUnavailableError>
    /** Record a failed delivery: failed for good, or still pending with `retry`; a settled intent stays as it is. */
    readonly markFailed: (
      intent_id: string,
      reason_code: string,
      options?: MarkFailedOptions
    ) => Effect.Effect<OutboxIntent, StateNotFoundError | StateStoreUnavailableError>
  }
}

/** The AttemptStore over a StateStorage driver; intent ids and times come from the IdGenerator and Clock in context. */
export const make: Effect.Effect<AttemptStore.Service, never, StateStorage | IdGenerator> = makeAttempts

/** The AttemptStore layer over the StateStorage in context. */
export const layer: Layer.Layer<AttemptStore, never, StateStorage | IdGenerator> = Layer.effect(AttemptStore, make)
