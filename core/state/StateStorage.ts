/**
 * The storage driver under the state stores: rows in, rows out, and transactions, with no rule of its own. The Run,
 * attempt and projection stores are built once over it (their rules live in this folder), so a new backend supplies
 * only its statements and cannot forget a rule.
 */
import { Context } from "effect"
import type { Effect, Option } from "effect"
import type { Sha256Hex } from "../base/Digest.ts"
import type { Cursor } from "../evidence/EvidenceStore.ts"
import type { CommittedAttempt, OperationAttempt, OutboxIntent } from "./Attempt.ts"
import type {
  OperationFilter,
  ProjectedOperation,
  ProjectedRecord,
  ProjectionBasis,
  RecordFilter
} from "./Projection.ts"
import type { Run, RunFilter, RunObservation, RunStatus } from "./Run.ts"
import type { StateStoreUnavailableError } from "./StateError.ts"

/** One projection batch as a store writes it, in one step: new rows, changed operations, attempts and the cursor. */
export interface ProjectionWrite {
  readonly projector: string
  readonly cursor: Cursor
  readonly inserts: ReadonlyArray<ProjectedRecord>
  readonly operations: ReadonlyArray<ProjectedOperation>
  readonly attempts: ReadonlyArray<CommittedAttempt>
}

type Fails<A> = Effect.Effect<A, StateStoreUnavailableError>

/** Rows of the state stores, and the transaction that makes a read-decide-write one step. */
export class StateStorage extends Context.Tag("writ/StateStorage")<StateStorage, StateStorage.Service>() {}

/** The StateStorage service. */
export declare namespace StateStorage {
  /** Every operation; each write is atomic on its own, and `transaction` makes a sequence of them one. */
  export interface Service {
    /** Whether rows survive a restart. */
    readonly durable: boolean
    /** Run `body` as one transaction: no other transaction writes between its reads and its writes; a failure writes nothing. Transactions do not nest. */
    readonly transaction: <A, E>(body: Effect.Effect<A, E>) => Effect.Effect<A, E | StateStoreUnavailableError>
    /** A Run by id. */
    readonly getRun: (run_id: string) => Fails<Option.Option<Run>>
    /** Store a new Run. */
    readonly insertRun: (run: Run) => Fails<void>
    /** Replace a Run while it is still in `expected`: whether it was. */
    readonly replaceRun: (next: Run, expected: RunStatus) => Fails<boolean>
    /** Runs in creation order, by status or parent. */
    readonly listRuns: (filter: RunFilter) => Fails<ReadonlyArray<Run>>
    /** Store one observation. */
    readonly insertObservation: (observation: RunObservation) => Fails<void>
    /** A Run's observations in sequence order. */
    readonly observations: (run_id: string) => Fails<ReadonlyArray<RunObservation>>
    /** Whether an attempt id is stored. */
    readonly hasAttempt: (attempt_id: string) => Fails<boolean>
    /** Store an attempt and its intents together. */
    readonly insertAttempt: (committed: CommittedAttempt) => Fails<void>
    /** A Run's attempts in commit order. */
    readonly listAttempts: (run_id: string) => Fails<ReadonlyArray<OperationAttempt>>
    /** An intent by id. */
    readonly getIntent: (intent_id: string) => Fails<Option.Option<OutboxIntent>>
    /** Store an intent's delivery fields. */
    readonly saveDelivery: (intent: OutboxIntent) => Fails<void>
    /** Up to `limit` pending intents, oldest first. */
    readonly pendingIntents: (limit: number) => Fails<ReadonlyArray<OutboxIntent>>
    /** A projector's stored cursor. */
    readonly cursor: (projector: string) => Fails<Option.Option<Cursor>>
    /** Every stored row sharing a record id or a chain position with `rows`, and every operation they name. */
    readonly projectionBasis: (rows: ReadonlyArray<ProjectedRecord>) => Fails<ProjectionBasis>
    /** Store one projection batch. */
    readonly writeProjection: (write: ProjectionWrite) => Fails<void>
    /** Projected operations in first-seen order. */
    readonly operations: (filter: OperationFilter) => Fails<ReadonlyArray<ProjectedOperation>>
    /** How many projection rows are stored. */
    readonly recordCount: (filter: RecordFilter) => Fails<number>
    /** The chain hash of the first projected row at a chain position. */
    readonly hashAt: (chain_id: string, sequence: number) => Fails<Option.Option<Sha256Hex>>
  }
}
