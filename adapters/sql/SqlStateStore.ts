/**
 * The SQL StateStore over `@effect/sql`'s SqlClient: durable Runs, attempts, outbox and evidence
 * projection. Every multi-statement write is one transaction; SQL and decode failures surface only
 * as StateStoreUnavailableError.
 *
 * Runtimes: any with a SqlClient (no driver imported; tested on @effect/sql-sqlite-node)
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Array as Arr, Effect, Layer, Option, Predicate, Schema } from "effect"
import type { ParseResult } from "effect"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { IdGenerator } from "../../core/base/IdGenerator.ts"
import type { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { Cursor } from "../../core/evidence/EvidenceStore.ts"
import * as StateStore from "../../core/state/StateStore.ts"
import { writeTransaction } from "./internal/transaction.ts"

const TerminalColumns = Schema.Struct({
  status: Schema.String,
  acceptance: Schema.String,
  quality: Schema.String,
  reason_code: Schema.String,
  evidence_json: Schema.parseJson(),
  cost: Schema.NullOr(Schema.Number)
})

const TerminalFromColumns = Schema.transform(TerminalColumns, StateStore.RunTerminal, {
  strict: false,
  decode: ({ evidence_json, ...columns }) => ({ ...columns, evidence: evidence_json }),
  encode: ({ evidence, ...terminal }) => ({ ...terminal, evidence_json: evidence })
})

const RunRow = Schema.Struct({
  run_id: Schema.String,
  status: Schema.String,
  created_at: Schema.String,
  started_at: Schema.NullOr(Schema.String),
  ended_at: Schema.NullOr(Schema.String),
  parent_run_id: Schema.NullOr(Schema.String),
  lineage: Schema.String,
  acceptance: Schema.NullOr(Schema.String),
  quality: Schema.NullOr(Schema.String),
  reason_code: Schema.NullOr(Schema.String),
  evidence_json: Schema.NullOr(Schema.parseJson()),
  cost: Schema.NullOr(Schema.Number)
})

const RunFromRow = Schema.transform(RunRow, StateStore.Run, {
  strict: false,
  decode: ({ acceptance, cost, evidence_json, quality, reason_code, ...run }) => ({
    ...run,
    terminal: acceptance === null
      ? null
      : { status: run.status, acceptance, quality, reason_code, evidence: evidence_json, cost }
  }),
  encode: ({ terminal, ...run }) => ({
    ...run,
    acceptance: terminal?.acceptance ?? null,
    quality: terminal?.quality ?? null,
    reason_code: terminal?.reason_code ?? null,
    evidence_json: terminal?.evidence ?? null,
    cost: terminal?.cost ?? null
  })
})

const ObservationFromRow = Schema.transform(
  Schema.Struct({
    run_id: Schema.String,
    sequence: Schema.Number,
    observed_at: Schema.String,
    ...TerminalColumns.fields
  }),
  StateStore.RunObservation,
  {
    strict: false,
    decode: ({ evidence_json, observed_at, run_id, sequence, ...terminal }) => ({
      run_id,
      sequence,
      observed_at,
      terminal: { ...terminal, evidence: evidence_json }
    }),
    encode: ({ terminal: { evidence, ...terminal }, ...observation }) => ({
      ...observation,
      ...terminal,
      evidence_json: evidence
    })
  }
)

const AttemptFromRow = Schema.transform(
  Schema.Struct({
    attempt_id: Schema.String,
    run_id: Schema.String,
    request_id: Schema.String,
    action_name: Schema.String,
    action_version: Schema.NullOr(Schema.String),
    arguments_digest: Schema.NullOr(Schema.String),
    outcome_tag: Schema.String,
    reason_code: Schema.String,
    call_executed: Schema.Number,
    result_digest: Schema.NullOr(Schema.String),
    created_at: Schema.String
  }),
  StateStore.OperationAttempt,
  {
    strict: false,
    decode: ({ call_executed, outcome_tag, reason_code, result_digest, ...attempt }) => ({
      ...attempt,
      outcome: { tag: outcome_tag, reason_code, call_executed: call_executed !== 0, result_digest }
    }),
    encode: ({ outcome, ...attempt }) => ({
      ...attempt,
      outcome_tag: outcome.tag,
      reason_code: outcome.reason_code,
      call_executed: outcome.call_executed ? 1 : 0,
      result_digest: outcome.result_digest
    })
  }
)

const Count = Schema.Struct({ count: Schema.Number })

const ProjectedHash = Schema.Struct({ chain_hash: Sha256Hex })

const ChainPosition = Schema.Struct({ chain_id: Schema.String, sequence: Schema.Number })

const isStorageError = <E>(error: E): error is Extract<E, SqlError | ParseResult.ParseError> =>
  Predicate.isTagged(error, "SqlError") || Predicate.isTagged(error, "ParseError")

const describe = (error: SqlError | ParseResult.ParseError) =>
  error._tag === "ParseError"
    ? `a stored row does not decode: ${error.message}`
    : `${error.message}${error.cause === undefined ? "" : `: ${String(error.cause)}`}`

// SQL and decode failures leave the port only as StateStoreUnavailableError.
const storage = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchIf(
    effect,
    isStorageError,
    (error) => Effect.fail(new StateStore.StateStoreUnavailableError({ detail: describe(error) }))
  )

// Keeps each statement well under SQLite's bound-parameter limit.
const batch = 400

/** A StateStore over the SqlClient in context (its schema comes from the 0002_state migration). */
export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)
  const ids = yield* IdGenerator

  const findRun = SqlSchema.findOne({
    Request: Schema.String,
    Result: RunFromRow,
    execute: (run_id) => sql`SELECT * FROM runs WHERE run_id = ${run_id}`
  })

  const loadRun = (run_id: string) =>
    Effect.flatMap(findRun(run_id), (found) =>
      Option.match(found, {
        onNone: () => Effect.fail(new StateStore.StateNotFoundError({ reason: "run", id: run_id })),
        onSome: Effect.succeed
      }))

  const insertRun = SqlSchema.void({
    Request: RunFromRow,
    execute: (row) => sql`INSERT INTO runs ${sql.insert(row)}`
  })

  // Compare-and-set: writes `next` only while the stored Run is still in `expected`.
  const casRun = (next: StateStore.Run, expected: StateStore.RunStatus) =>
    Effect.map(
      SqlSchema.findAll({
        Request: RunFromRow,
        Result: Schema.Struct({ run_id: Schema.String }),
        execute: (row) =>
          sql`UPDATE runs SET ${sql.update(row, ["run_id"])}
            WHERE run_id = ${row.run_id} AND status = ${expected} RETURNING run_id`
      })(next),
      (updated) => updated.length === 1
    )

  const insertObservation = (run_id: string, observed_at: Time.Timestamp) =>
    SqlSchema.void({
      Request: TerminalFromColumns,
      execute: (t) =>
        sql`INSERT INTO run_observations
          (run_id, sequence, status, acceptance, quality, reason_code, evidence_json, cost, observed_at)
          SELECT ${run_id}, COALESCE(MAX(sequence) + 1, 0), ${t.status}, ${t.acceptance}, ${t.quality},
            ${t.reason_code}, ${t.evidence_json}, ${t.cost}, ${observed_at}
          FROM run_observations WHERE run_id = ${run_id}`
    })

  const findProjectedHash = SqlSchema.findOne({
    Request: ChainPosition,
    Result: ProjectedHash,
    execute: ({ chain_id, sequence }) =>
      // One record and one hash per position (applyProjection refuses any other); the order only makes the pick explicit.
      sql`SELECT chain_hash FROM projected_records WHERE chain_id = ${chain_id} AND sequence = ${sequence}
        ORDER BY projection_version, record_id LIMIT 1`
  })

  const findIntent = SqlSchema.findOne({
    Request: Schema.String,
    Result: StateStore.OutboxIntent,
    execute: (intent_id) => sql`SELECT * FROM outbox_intents WHERE intent_id = ${intent_id}`
  })

  const loadIntent = (intent_id: string) =>
    Effect.flatMap(findIntent(intent_id), (found) =>
      Option.match(found, {
        onNone: () => Effect.fail(new StateStore.StateNotFoundError({ reason: "intent", id: intent_id })),
        onSome: Effect.succeed
      }))

  const saveDelivery = (intent: StateStore.OutboxIntent) =>
    sql`UPDATE outbox_intents SET delivery_state = ${intent.delivery_state},
      delivery_attempts = ${intent.delivery_attempts}, last_reason_code = ${intent.last_reason_code},
      delivered_at = ${intent.delivered_at} WHERE intent_id = ${intent.intent_id}`

  // Read, decide, write: one transaction, so a failure at any step leaves the intent as it was.
  const redeliver = (intent_id: string, step: (intent: StateStore.OutboxIntent) => StateStore.OutboxIntent) =>
    transaction(() =>
      Effect.gen(function*() {
        const intent = yield* loadIntent(intent_id)
        const next = step(intent)
        if (next !== intent) yield* saveDelivery(next)
        return next
      })
    )

  const insertAttempt = SqlSchema.void({
    Request: AttemptFromRow,
    execute: (row) => sql`INSERT INTO operation_attempts ${sql.insert(row)}`
  })

  // A governed attempt projected from its terminal record, with its outcome intent; one already stored is kept, and
  // one whose Run this store does not hold is not an attempt here.
  const projectAttempt = (attempt: StateStore.OperationAttempt, intent_id: Uuid, now: Time.Timestamp) =>
    Effect.gen(function*() {
      const existing = yield* sql`SELECT 1 FROM operation_attempts WHERE attempt_id = ${attempt.attempt_id}`
      if (existing.length > 0 || Option.isNone(yield* findRun(attempt.run_id))) return
      yield* insertAttempt(attempt)
      yield* insertIntents([StateStore.pendingIntent(StateStore.outcomeIntent(attempt), intent_id, attempt, now)])
    })

  const insertIntents = SqlSchema.void({
    Request: Schema.Array(StateStore.OutboxIntent),
    execute: (rows) =>
      Effect.forEach(Arr.chunksOf(rows, batch), (chunk) => sql`INSERT INTO outbox_intents ${sql.insert(chunk)}`, {
        discard: true
      })
  })

  const recordsByIds = SqlSchema.findAll({
    Request: Schema.Array(Schema.String),
    Result: StateStore.ProjectedRecord,
    execute: (record_ids) => sql`SELECT * FROM projected_records WHERE record_id IN ${sql.in(record_ids)}`
  })

  const recordsAtPositions = SqlSchema.findAll({
    Request: Schema.Struct({ chain_id: Schema.String, sequences: Schema.Array(Schema.Number) }),
    Result: StateStore.ProjectedRecord,
    execute: ({ chain_id, sequences }) =>
      sql`SELECT * FROM projected_records WHERE chain_id = ${chain_id} AND sequence IN ${sql.in(sequences)}`
  })

  const operationsByIds = SqlSchema.findAll({
    Request: Schema.Array(Schema.String),
    Result: StateStore.ProjectedOperation,
    execute: (operation_ids) => sql`SELECT * FROM projected_operations WHERE operation_id IN ${sql.in(operation_ids)}`
  })

  const insertRecords = SqlSchema.void({
    Request: Schema.Array(StateStore.ProjectedRecord),
    execute: (rows) => sql`INSERT INTO projected_records ${sql.insert(rows)}`
  })

  const upsertOperations = SqlSchema.void({
    Request: Schema.Array(StateStore.ProjectedOperation),
    execute: (rows) =>
      sql`INSERT INTO projected_operations ${sql.insert(rows)} ON CONFLICT (operation_id) DO UPDATE SET
        started_record_id = excluded.started_record_id, terminal_record_id = excluded.terminal_record_id,
        terminal_type = excluded.terminal_type, terminal_count = excluded.terminal_count`
  })

  const inBatches = <A, B, E, R>(
    items: ReadonlyArray<A>,
    f: (chunk: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<B>, E, R>
  ) => Effect.map(Effect.forEach(Arr.chunksOf(items, batch), f), (chunks) => chunks.flat())

  const service: StateStore.StateStore.Service = {
    durable: true,
    createRun: Effect.fn("StateStore.createRun")(function*(input: StateStore.CreateRun = {}) {
      const run_id = yield* ids.uuid
      const created_at = yield* Time.now
      const parent_run_id = "parent_run_id" in input ? input.parent_run_id : null
      // The parent is looked up before the Run is built: a parent id no stored Run has (a malformed one included) is
      // StateNotFoundError, as in every store, never a Run that fails to build.
      return yield* transaction(() =>
        Effect.gen(function*() {
          if (parent_run_id !== null) yield* loadRun(parent_run_id)
          const run = StateStore.preparedRun(run_id, created_at, input)
          yield* insertRun(run)
          return run
        })
      )
    }, storage),
    getRun: Effect.fn("StateStore.getRun")(function*(run_id: string) {
      return yield* loadRun(run_id)
    }, storage),
    listRuns: Effect.fn("StateStore.listRuns")(function*(filter: StateStore.RunFilter = {}) {
      const where = [
        ...(filter.status === undefined ? [] : [sql.in("status", filter.status)]),
        ...(filter.parent_run_id === undefined ? [] : [sql`parent_run_id = ${filter.parent_run_id}`])
      ]
      return yield* SqlSchema.findAll({
        Request: Schema.Void,
        Result: RunFromRow,
        execute: () => sql`SELECT * FROM runs WHERE ${sql.and(where)} ORDER BY position`
      })(undefined)
    }, storage),
    transition: Effect.fn("StateStore.transition")(
      function*(run_id: string, from: StateStore.ActiveRunStatus, to: StateStore.ActiveRunStatus) {
        const now = yield* Time.now
        const refuse = (reason: "not_an_edge" | "stale_status", actual: StateStore.RunStatus) =>
          Effect.fail(new StateStore.IllegalTransitionError({ reason, run_id, from, to, actual }))
        return yield* transaction(() =>
          Effect.gen(function*() {
            const run = yield* loadRun(run_id)
            if (!StateStore.canTransition(from, to)) return yield* refuse("not_an_edge", run.status)
            if (run.status !== from) return yield* refuse("stale_status", run.status)
            const next = StateStore.advanced(run, to, now)
            if (yield* casRun(next, from)) return next
            return yield* refuse("stale_status", (yield* loadRun(run_id)).status)
          })
        )
      },
      storage
    ),
    finish: Effect.fn("StateStore.finish")(function*(run_id: string, offered: StateStore.RunTerminal) {
      const terminal = yield* StateStore.checkedTerminal(offered)
      const now = yield* Time.now
      // Under SQLite the transaction serialises writers; under a weaker isolation a lost compare-and-set decides again.
      const decide: Effect.Effect<
        StateStore.FinishResult,
        StateStore.StateNotFoundError | StateStore.IllegalTransitionError | SqlError | ParseResult.ParseError
      > = Effect.gen(function*() {
        const run = yield* loadRun(run_id)
        if (StateStore.isTerminal(run.status)) {
          yield* insertObservation(run_id, now)(terminal)
          return StateStore.FinishResult.make({ won: false, run })
        }
        if (!StateStore.canFinish(run.status, terminal.status)) {
          return yield* new StateStore.IllegalTransitionError({
            reason: "not_an_edge",
            run_id,
            from: run.status,
            to: terminal.status,
            actual: run.status
          })
        }
        const next = StateStore.concluded(run, terminal, now)
        if (yield* casRun(next, run.status)) return StateStore.FinishResult.make({ won: true, run: next })
        return yield* Effect.suspend(() => decide)
      })
      return yield* transaction(() => decide)
    }, storage),
    observations: Effect.fn("StateStore.observations")(function*(run_id: string) {
      return yield* SqlSchema.findAll({
        Request: Schema.String,
        Result: ObservationFromRow,
        execute: (id) => sql`SELECT * FROM run_observations WHERE run_id = ${id} ORDER BY sequence`
      })(run_id)
    }, storage),
    commitAttempt: Effect.fn("StateStore.commitAttempt")(function*(offered: StateStore.CommitAttempt) {
      const input = yield* StateStore.checkedCommit(offered)
      const { attempt } = input
      const intent_ids: Array<Uuid> = []
      for (let i = 0; i < input.intents.length; i++) intent_ids.push(yield* ids.uuid)
      const now = yield* Time.now
      const intents = input.intents.map((draft, i) => StateStore.pendingIntent(draft, intent_ids[i]!, attempt, now))
      yield* transaction(() =>
        Effect.gen(function*() {
          yield* loadRun(attempt.run_id)
          const existing = yield* sql`SELECT 1 FROM operation_attempts WHERE attempt_id = ${attempt.attempt_id}`
          if (existing.length > 0) {
            return yield* new StateStore.DuplicateAttemptError({ attempt_id: attempt.attempt_id })
          }
          yield* insertAttempt(attempt)
          yield* insertIntents(intents)
        })
      )
      return StateStore.CommittedAttempt.make({ attempt, intents })
    }, storage),
    listAttempts: Effect.fn("StateStore.listAttempts")(function*(run_id: string) {
      return yield* SqlSchema.findAll({
        Request: Schema.String,
        Result: AttemptFromRow,
        execute: (id) => sql`SELECT * FROM operation_attempts WHERE run_id = ${id} ORDER BY position`
      })(run_id)
    }, storage),
    pendingIntents: Effect.fn("StateStore.pendingIntents")(function*(limit: number) {
      return yield* SqlSchema.findAll({
        Request: Schema.NonNegativeInt,
        Result: StateStore.OutboxIntent,
        execute: (n) => sql`SELECT * FROM outbox_intents WHERE delivery_state = 'pending' ORDER BY position LIMIT ${n}`
      })(StateStore.rowLimit(limit))
    }, storage),
    markDelivered: Effect.fn("StateStore.markDelivered")(function*(intent_id: string) {
      const now = yield* Time.now
      return yield* redeliver(intent_id, (intent) => StateStore.delivered(intent, now))
    }, storage),
    markFailed: Effect.fn("StateStore.markFailed")(
      function*(intent_id: string, reason_code: string, options?: StateStore.MarkFailedOptions) {
        return yield* redeliver(intent_id, (intent) => StateStore.undelivered(intent, reason_code, options))
      },
      storage
    ),
    projectionCursor: Effect.fn("StateStore.projectionCursor")(function*(projector: string) {
      const found = yield* SqlSchema.findOne({
        Request: Schema.String,
        Result: Schema.Struct({ cursor: Cursor }),
        execute: (name) => sql`SELECT cursor FROM projection_cursors WHERE projector = ${name}`
      })(projector)
      return Option.map(found, (row) => row.cursor)
    }, storage),
    applyProjection: Effect.fn("StateStore.applyProjection")(function*(input: StateStore.ApplyProjection) {
      const concluded = input.attempts ?? []
      const intent_ids: Array<Uuid> = []
      for (let i = 0; i < concluded.length; i++) intent_ids.push(yield* ids.uuid)
      const now = yield* Time.now
      const record_ids = Arr.dedupe(input.rows.map((row) => row.record_id))
      const operation_ids = Arr.dedupe(input.rows.flatMap((row) => row.operation_id ?? []))
      const positions = Object.entries(Arr.groupBy(input.rows, (row) => row.chain_id)).map(([chain_id, rows]) =>
        [chain_id, Arr.dedupe(rows.map((row) => row.sequence))] as const
      )
      return yield* transaction(() =>
        Effect.gen(function*() {
          const atPositions = yield* Effect.forEach(positions, ([chain_id, sequences]) =>
            inBatches(sequences, (chunk) => recordsAtPositions({ chain_id, sequences: chunk })))
          const plan = yield* StateStore.planProjection(input.rows, {
            records: [...(yield* inBatches(record_ids, recordsByIds)), ...atPositions.flat()],
            operations: yield* inBatches(operation_ids, operationsByIds)
          })
          yield* Effect.forEach(Arr.chunksOf(plan.inserts, batch), insertRecords, { discard: true })
          yield* Effect.forEach(Arr.chunksOf(plan.operations, batch), upsertOperations, { discard: true })
          yield* Effect.forEach(concluded, (attempt, i) =>
            projectAttempt(attempt, intent_ids[i]!, now), {
            discard: true
          })
          yield* sql`INSERT INTO projection_cursors (projector, cursor) VALUES (${input.projector}, ${input.cursor})
          ON CONFLICT (projector) DO UPDATE SET cursor = excluded.cursor`
          return StateStore.ProjectionApplied.make({
            projector: input.projector,
            cursor: input.cursor,
            inserted: plan.inserts.length,
            unchanged: plan.unchanged
          })
        })
      )
    }, storage),
    projectedOperations: Effect.fn("StateStore.projectedOperations")(
      function*(filter: StateStore.OperationFilter = {}) {
        const where = [
          ...(filter.chain_id === undefined ? [] : [sql`chain_id = ${filter.chain_id}`]),
          ...(filter.operation_id === undefined ? [] : [sql`operation_id = ${filter.operation_id}`]),
          ...(filter.open_only === true ? [sql`started_record_id IS NOT NULL AND terminal_count = 0`] : [])
        ]
        return yield* SqlSchema.findAll({
          Request: Schema.Void,
          Result: StateStore.ProjectedOperation,
          execute: () => sql`SELECT * FROM projected_operations WHERE ${sql.and(where)} ORDER BY position`
        })(undefined)
      },
      storage
    ),
    projectedRecordCount: Effect.fn("StateStore.projectedRecordCount")(function*(filter: StateStore.RecordFilter = {}) {
      const where = filter.chain_id === undefined ? [] : [sql`chain_id = ${filter.chain_id}`]
      const [row] = yield* SqlSchema.findAll({
        Request: Schema.Void,
        Result: Count,
        execute: () => sql`SELECT COUNT(*) AS count FROM projected_records WHERE ${sql.and(where)}`
      })(undefined)
      return row?.count ?? 0
    }, storage),
    projectedHash: Effect.fn("StateStore.projectedHash")(function*(chain_id: string, sequence: number) {
      const row = yield* findProjectedHash({ chain_id, sequence })
      return Option.map(row, (found) => found.chain_hash)
    }, storage)
  }
  return service
})

/** The SQL StateStore (durable); needs a migrated SqlClient and an IdGenerator. */
export const layer: Layer.Layer<StateStore.StateStore, never, SqlClient.SqlClient | IdGenerator> = Layer.effect(
  StateStore.StateStore,
  make
)
