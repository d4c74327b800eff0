/**
 * The StateStore port (spec/runs.md): Runs with a compare-and-set lifecycle and one terminal
 * outcome, operation attempts committed with their outbox intents in one transaction, outbox
 * delivery state, and the durable projection of committed evidence with its cursor.
 */
import { Context, Effect, Either, Schema } from "effect"
import type { Option } from "effect"
import * as Canonical from "../base/Canonical.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { ActionName, Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import { RecordType, terminalTypes } from "../evidence/Evidence.ts"
import { Cursor } from "../evidence/EvidenceStore.ts"
import type { ExecutionOutcome } from "../execution/ExecutionOutcome.ts"
import { callExecuted, reasonCode } from "../execution/ExecutionOutcome.ts"

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------

/** A Run's status: `preparing -> queued -> running <-> paused -> completed | failed | cancelled | timed_out`. */
export const RunStatus = Schema.Literal(
  "preparing",
  "queued",
  "running",
  "paused",
  "completed",
  "failed",
  "cancelled",
  "timed_out"
)

/** A Run's status. */
export type RunStatus = typeof RunStatus.Type

/** The statuses a Run can still leave. */
export const ActiveRunStatus = Schema.Literal("preparing", "queued", "running", "paused")

/** A status a Run can still leave. */
export type ActiveRunStatus = typeof ActiveRunStatus.Type

/** The statuses a Run never leaves; exactly one is ever reached. */
export const TerminalStatus = Schema.Literal("completed", "failed", "cancelled", "timed_out")

/** A status a Run never leaves. */
export type TerminalStatus = typeof TerminalStatus.Type

/** How a Run relates to its parent: none (root), or a retry, resume, replay or fork of it. */
export const Lineage = Schema.Literal("root", "retry", "resume", "replay", "fork")

/** How a Run relates to its parent. */
export type Lineage = typeof Lineage.Type

/** Whether the Run's result was accepted by whoever judges it. */
export const Acceptance = Schema.Literal("accepted", "rejected", "not_applicable", "unknown")

/** How complete the Run's work is. */
export const Quality = Schema.Literal("full", "degraded", "partial", "indeterminate")

/** A reference to one committed evidence record. */
export class EvidenceRef extends Schema.Class<EvidenceRef>("EvidenceRef")({
  chain_id: Uuid,
  record_id: Uuid
}) {}

/** A Run's terminal outcome, facet by facet; a missing cost is null, never 0. */
export class RunTerminal extends Schema.Class<RunTerminal>("RunTerminal")({
  status: TerminalStatus,
  acceptance: Acceptance,
  quality: Quality,
  reason_code: Schema.NonEmptyString,
  evidence: Schema.Array(EvidenceRef),
  cost: Schema.NullOr(Schema.NonNegativeInt)
}) {}

const terminalStatuses: ReadonlySet<RunStatus> = new Set<RunStatus>(TerminalStatus.literals)

/** Whether a status is terminal. */
export const isTerminal = (status: RunStatus): status is TerminalStatus => terminalStatuses.has(status)

// Timestamps have one fixed width, so their string order is their time order.
const runInvariant = (run: {
  readonly status: RunStatus
  readonly created_at: string
  readonly started_at: string | null
  readonly ended_at: string | null
  readonly parent_run_id: string | null
  readonly lineage: Lineage
  readonly terminal: { readonly status: TerminalStatus } | null
}): string | true => {
  if ((run.lineage === "root") !== (run.parent_run_id === null)) return "a root Run has no parent; any other has one"
  if (isTerminal(run.status) !== (run.terminal !== null)) {
    return "a Run has a terminal outcome exactly when it is terminal"
  }
  if (run.terminal !== null && run.terminal.status !== run.status) return "a terminal Run's status is its outcome's"
  if ((run.ended_at === null) !== (run.terminal === null)) return "a Run has ended exactly when it is terminal"
  if ((run.status === "running" || run.status === "paused") && run.started_at === null) {
    return "a running or paused Run has started"
  }
  if (run.started_at !== null && run.started_at < run.created_at) return "started_at precedes created_at"
  if (run.ended_at !== null && run.ended_at < (run.started_at ?? run.created_at)) return "ended_at precedes its start"
  return true
}

/** A Run: created once, moved by compare-and-set, ended by exactly one terminal outcome that never changes. */
export class Run extends Schema.Class<Run>("Run")(
  Schema.Struct({
    run_id: Uuid,
    status: RunStatus,
    created_at: Timestamp,
    started_at: Schema.NullOr(Timestamp),
    ended_at: Schema.NullOr(Timestamp),
    parent_run_id: Schema.NullOr(Uuid),
    lineage: Lineage,
    terminal: Schema.NullOr(RunTerminal)
  }).pipe(Schema.filter(runInvariant))
) {}

/** A terminal outcome offered after another had already won: kept as audit, never applied. */
export class RunObservation extends Schema.Class<RunObservation>("RunObservation")({
  run_id: Uuid,
  sequence: Schema.NonNegativeInt,
  terminal: RunTerminal,
  observed_at: Timestamp
}) {}

/** What `finish` came to: the Run's one terminal outcome, and whether this call is the one that set it. */
export class FinishResult extends Schema.Class<FinishResult>("FinishResult")({
  won: Schema.Boolean,
  run: Run
}) {}

/**
 * How a new Run is created: a root, or a child linked to an existing parent by lineage; `started` creates it already
 * `running` (through `queued`, in the one write), so no crash can leave it between creation and start.
 */
export type CreateRun =
  & (
    | { readonly lineage?: "root" }
    | { readonly lineage: Exclude<Lineage, "root">; readonly parent_run_id: Uuid }
  )
  & { readonly started?: boolean }

/** A new Run as `createRun` stores it: preparing (or, `started`, running since its creation), no terminal outcome. */
export const preparedRun = (run_id: Uuid, created_at: Timestamp, input: CreateRun): Run =>
  Run.make({
    run_id,
    status: input.started === true ? "running" : "preparing",
    created_at,
    started_at: input.started === true ? created_at : null,
    ended_at: null,
    parent_run_id: "parent_run_id" in input ? input.parent_run_id : null,
    lineage: input.lineage ?? "root",
    terminal: null
  })

/** Optional filters for listing Runs. */
export interface RunFilter {
  readonly status?: ReadonlyArray<RunStatus>
  readonly parent_run_id?: string
}

const edges: { readonly [From in ActiveRunStatus]: ReadonlyArray<ActiveRunStatus> } = {
  preparing: ["queued"],
  queued: ["running"],
  running: ["paused"],
  paused: ["running"]
}

/** Whether `from -> to` is an edge of the non-terminal lifecycle. */
export const canTransition = (from: RunStatus, to: RunStatus): boolean =>
  !isTerminal(from) && edges[from].some((next) => next === to)

/** Whether a Run in `from` may end as `to`: any active status may fail, be cancelled or time out; only a started one completes. */
export const canFinish = (from: RunStatus, to: TerminalStatus): boolean =>
  !isTerminal(from) && (to !== "completed" || from === "running" || from === "paused")

const latest = (now: Timestamp, floor: Timestamp): Timestamp => now < floor ? floor : now

/** A Run moved to `to` at `now`; entering `running` the first time stamps `started_at` (never before `created_at`). */
export const advanced = (run: Run, to: ActiveRunStatus, now: Timestamp): Run =>
  new Run({
    ...run,
    status: to,
    started_at: run.started_at ?? (to === "running" ? latest(now, run.created_at) : null)
  }, { disableValidation: true })

/** The terminal outcome `finish` was given, checked before anything is read: one that is not a valid RunTerminal is a defect. */
export const checkedTerminal = (terminal: RunTerminal): Effect.Effect<RunTerminal> =>
  Effect.orDie(Schema.validate(RunTerminal)(terminal))

/** How many rows a `limit` asks for, the same in every store: its floor, at least 0; Infinity is every row, NaN none. */
export const rowLimit = (limit: number): number =>
  Number.isNaN(limit) ? 0 : Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.floor(limit)))

export const concluded = (run: Run, terminal: RunTerminal, now: Timestamp): Run =>
  new Run({
    ...run,
    status: terminal.status,
    ended_at: latest(now, run.started_at ?? run.created_at),
    terminal
  }, { disableValidation: true })

// ---------------------------------------------------------------------------------------------
// Operation attempts and outbox
// ---------------------------------------------------------------------------------------------

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

/** One action execution inside a durable Run; retries are new attempts. Never the raw arguments or result. */
export class OperationAttempt extends Schema.Class<OperationAttempt>("OperationAttempt")({
  attempt_id: Uuid,
  run_id: Uuid,
  request_id: Identifier,
  action_name: ActionName,
  action_version: Schema.NullOr(Identifier),
  arguments_digest: Schema.NullOr(Sha256Hex),
  outcome: OutcomeSummary,
  created_at: Timestamp
}) {}

const parseJson = Schema.decodeEither(Schema.parseJson())

/** A string that parses as JSON. */
export const JsonText = Schema.String.pipe(
  Schema.filter((text) => Either.isRight(parseJson(text)) || "not JSON text")
)

/** An outbox intent as staged with its attempt; the store gives it an id, its run, attempt and time. */
export class IntentDraft extends Schema.Class<IntentDraft>("IntentDraft")({
  topic: Identifier,
  payload_json: JsonText
}) {}

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

// ---------------------------------------------------------------------------------------------
// Evidence projection
// ---------------------------------------------------------------------------------------------

/** One committed evidence record as projected; its idempotency key is (chain_id, record_id, projection_version). */
export class ProjectedRecord extends Schema.Class<ProjectedRecord>("ProjectedRecord")({
  chain_id: Uuid,
  record_id: Uuid,
  projection_version: Schema.NonNegativeInt,
  chain_hash: Sha256Hex,
  sequence: Schema.NonNegativeInt,
  record_type: RecordType,
  operation_id: Schema.NullOr(Uuid)
}) {}

/** One governed operation as its projected records show it: started, and how many terminal records it has. */
export class ProjectedOperation extends Schema.Class<ProjectedOperation>("ProjectedOperation")({
  operation_id: Uuid,
  chain_id: Uuid,
  started_record_id: Schema.NullOr(Uuid),
  terminal_record_id: Schema.NullOr(Uuid),
  terminal_type: Schema.NullOr(RecordType),
  terminal_count: Schema.NonNegativeInt
}) {}

/**
 * What one projection batch commits: rows under a projector's name, its advanced cursor, and the attempts of governed
 * operations in a durable Run that the batch concluded, each with its outcome intent (one already stored is kept; one
 * whose Run this store does not hold is not an attempt here).
 */
export interface ApplyProjection {
  readonly projector: string
  readonly rows: ReadonlyArray<ProjectedRecord>
  readonly cursor: Cursor
  readonly attempts?: ReadonlyArray<OperationAttempt>
}

/** A committed projection batch: rows newly inserted, rows already present (replay), and the stored cursor. */
export class ProjectionApplied extends Schema.Class<ProjectionApplied>("ProjectionApplied")({
  projector: Schema.String,
  cursor: Cursor,
  inserted: Schema.NonNegativeInt,
  unchanged: Schema.NonNegativeInt
}) {}

/** Optional filters for the operations projection; `open_only` keeps started operations with no terminal record. */
export interface OperationFilter {
  readonly chain_id?: string
  readonly operation_id?: string
  readonly open_only?: boolean
}

/** Optional filters for counting projected records. */
export interface RecordFilter {
  readonly chain_id?: string
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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

/** The store could not be reached, could not commit, or returned a row that does not decode. */
export class StateStoreUnavailableError extends Schema.TaggedError<StateStoreUnavailableError>()(
  "StateStoreUnavailableError",
  { detail: Schema.String }
) {
  override get message() {
    return `state store unavailable: ${this.detail}`
  }
}

// ---------------------------------------------------------------------------------------------
// The projection reducer every adapter shares
// ---------------------------------------------------------------------------------------------

/** What one projection batch changes: the rows to insert and every operation whose projection changes, in full. */
export interface ProjectionPlan {
  readonly inserts: ReadonlyArray<ProjectedRecord>
  readonly operations: ReadonlyArray<ProjectedOperation>
  readonly unchanged: number
}

/**
 * What a store already holds for a batch: every row sharing a record id or a chain position (chain id and sequence)
 * with it, every operation it names.
 */
export interface ProjectionBasis {
  readonly records: ReadonlyArray<ProjectedRecord>
  readonly operations: ReadonlyArray<ProjectedOperation>
}

const rowKey = (row: ProjectedRecord) => `${row.chain_id}/${row.record_id}/${row.projection_version}`
const recordKey = (row: ProjectedRecord) => `${row.chain_id}/${row.record_id}`

/** The key of a chain position, as `projectedHash` looks it up. */
export const positionKey = (chain_id: string, sequence: number) => `${chain_id}#${sequence}`

/**
 * Plan a batch against what is stored: a known key with the same hash is unchanged. A record is one fact of its
 * chain whatever projection version brings it, so another chain hash for it (under any version), another position
 * for it, or another record at its position is a conflict: a chain position then always has one record and one
 * hash, and every store's `projectedHash` gives the same answer. The operations projection counts each (chain,
 * record) once.
 */
export const planProjection = (
  rows: ReadonlyArray<ProjectedRecord>,
  basis: ProjectionBasis
): Either.Either<ProjectionPlan, ProjectionConflictError> => {
  const byKey = new Map<string, ProjectedRecord>()
  const byRecord = new Map<string, ProjectedRecord>()
  const byPosition = new Map<string, ProjectedRecord>()
  const remember = (row: ProjectedRecord) => {
    byKey.set(rowKey(row), row)
    if (!byRecord.has(recordKey(row))) byRecord.set(recordKey(row), row)
    const position = positionKey(row.chain_id, row.sequence)
    if (!byPosition.has(position)) byPosition.set(position, row)
  }
  basis.records.forEach(remember)
  const operations = new Map(basis.operations.map((op) => [op.operation_id, op]))
  const changed = new Set<Uuid>()
  const inserts: Array<ProjectedRecord> = []
  let unchanged = 0
  const conflict = (row: ProjectedRecord, reason: ProjectionConflictError["reason"], stored: string, offered: string) =>
    Either.left(
      new ProjectionConflictError({
        reason,
        chain_id: row.chain_id,
        record_id: row.record_id,
        projection_version: row.projection_version,
        stored,
        offered
      })
    )
  for (const row of rows) {
    const same = byRecord.get(recordKey(row))
    if (same !== undefined && same.chain_hash !== row.chain_hash) {
      return conflict(row, "chain_hash", same.chain_hash, row.chain_hash)
    }
    if (same !== undefined && same.sequence !== row.sequence) {
      return conflict(row, "chain_position", String(same.sequence), String(row.sequence))
    }
    const occupant = byPosition.get(positionKey(row.chain_id, row.sequence))
    if (occupant !== undefined && occupant.record_id !== row.record_id) {
      return conflict(row, "chain_position", occupant.record_id, row.record_id)
    }
    if (byKey.has(rowKey(row))) {
      unchanged++
      continue
    }
    const operation = row.operation_id === null ? undefined : operations.get(row.operation_id)
    if (operation !== undefined && operation.chain_id !== row.chain_id) {
      return conflict(row, "operation_chain", operation.chain_id, row.chain_id)
    }
    remember(row)
    inserts.push(row)
    if (same !== undefined) continue
    const started = row.record_type === "operation_started"
    if (row.operation_id === null || (!started && !terminalTypes.has(row.record_type))) continue
    const base = operation ?? {
      operation_id: row.operation_id,
      chain_id: row.chain_id,
      started_record_id: null,
      terminal_record_id: null,
      terminal_type: null,
      terminal_count: 0
    }
    operations.set(
      row.operation_id,
      new ProjectedOperation(
        started
          ? { ...base, started_record_id: base.started_record_id ?? row.record_id }
          : {
            ...base,
            terminal_record_id: base.terminal_record_id ?? row.record_id,
            terminal_type: base.terminal_type ?? row.record_type,
            terminal_count: base.terminal_count + 1
          },
        { disableValidation: true }
      )
    )
    changed.add(row.operation_id)
  }
  return Either.right({ inserts, unchanged, operations: [...changed].map((id) => operations.get(id)!) })
}

/** Whether a projected operation matches a filter. */
export const matchesOperation = (operation: ProjectedOperation, filter: OperationFilter = {}): boolean =>
  (filter.chain_id === undefined || operation.chain_id === filter.chain_id) &&
  (filter.operation_id === undefined || operation.operation_id === filter.operation_id) &&
  (filter.open_only !== true || (operation.started_record_id !== null && operation.terminal_count === 0))

// ---------------------------------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------------------------------

/** Runs, operation attempts, the outbox and the evidence projection. */
export class StateStore extends Context.Tag("writ/StateStore")<StateStore, StateStore.Service>() {}

/** The StateStore service. */
export declare namespace StateStore {
  /** Every method; durable stores commit each write atomically and survive restart. */
  export interface Service {
    /** Whether state survives a restart; an in-memory store is not durable and cannot claim resume or history. */
    readonly durable: boolean
    /** Create a Run in `preparing` (or `running`, `started`), its id minted by the store; a child names an existing parent. */
    readonly createRun: (
      input?: CreateRun
    ) => Effect.Effect<Run, StateNotFoundError | StateStoreUnavailableError>
    /** A Run by id. */
    readonly getRun: (run_id: string) => Effect.Effect<Run, StateNotFoundError | StateStoreUnavailableError>
    /** Runs in creation order, optionally by status or parent. */
    readonly listRuns: (filter?: RunFilter) => Effect.Effect<ReadonlyArray<Run>, StateStoreUnavailableError>
    /** Compare-and-set one non-terminal lifecycle edge: refused unless the Run is in `from` and `from -> to` is an edge. */
    readonly transition: (
      run_id: string,
      from: ActiveRunStatus,
      to: ActiveRunStatus
    ) => Effect.Effect<Run, StateNotFoundError | IllegalTransitionError | StateStoreUnavailableError>
    /** One compare-and-set to a terminal outcome: the first wins; a later one is recorded as an observation and gets the winner. */
    readonly finish: (
      run_id: string,
      terminal: RunTerminal
    ) => Effect.Effect<FinishResult, StateNotFoundError | IllegalTransitionError | StateStoreUnavailableError>
    /** The terminal outcomes offered after a Run had ended, in order. */
    readonly observations: (
      run_id: string
    ) => Effect.Effect<ReadonlyArray<RunObservation>, StateStoreUnavailableError>
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
    /** Where a projector stopped, if it ever committed. */
    readonly projectionCursor: (
      projector: string
    ) => Effect.Effect<Option.Option<Cursor>, StateStoreUnavailableError>
    /** Commit projection rows, attempts and the advanced cursor in one transaction; replay is a no-op, a conflict commits nothing. */
    readonly applyProjection: (
      input: ApplyProjection
    ) => Effect.Effect<ProjectionApplied, ProjectionConflictError | StateStoreUnavailableError>
    /** The operations projection in first-seen order. */
    readonly projectedOperations: (
      filter?: OperationFilter
    ) => Effect.Effect<ReadonlyArray<ProjectedOperation>, StateStoreUnavailableError>
    /** How many projection rows are stored (every projection version counts). */
    readonly projectedRecordCount: (filter?: RecordFilter) => Effect.Effect<number, StateStoreUnavailableError>
    /**
     * The chain hash the projected record at `sequence` of a chain carries, if that record is projected (one record
     * and one hash per position, under every projection version: `applyProjection` refuses any other).
     */
    readonly projectedHash: (
      chain_id: string,
      sequence: number
    ) => Effect.Effect<Option.Option<Sha256Hex>, StateStoreUnavailableError>
  }
}
