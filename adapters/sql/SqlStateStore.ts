/**
 * The SQL state stores: a StateStorage of statements over `@effect/sql`'s SqlClient under the shared Run, attempt and
 * projection rules. Every multi-statement write is one transaction; SQL and decode failures surface only as
 * StateStoreUnavailableError.
 *
 * Runtimes: any with a SqlClient (no driver imported; tested on @effect/sql-sqlite-node)
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Array as Arr, Effect, Layer, Option, Predicate, Schema } from "effect"
import type { ParseResult } from "effect"
import { Sha256Hex } from "../../core/base/Digest.ts"
import type { IdGenerator } from "../../core/base/IdGenerator.ts"
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
  cost: Schema.NullOr(Schema.Number),
  policy_json: Schema.NullOr(Schema.parseJson())
})

const RunFromRow = Schema.transform(RunRow, StateStore.Run, {
  strict: false,
  decode: ({ acceptance, cost, evidence_json, policy_json, quality, reason_code, ...run }) => ({
    ...run,
    ...(policy_json === null ? {} : { policy: policy_json }),
    terminal: acceptance === null
      ? null
      : { status: run.status, acceptance, quality, reason_code, evidence: evidence_json, cost }
  }),
  encode: ({ policy, terminal, ...run }) => ({
    ...run,
    policy_json: policy ?? null,
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
    created_at: Schema.String,
    recheck_json: Schema.NullOr(Schema.parseJson()),
    policy_json: Schema.NullOr(Schema.parseJson())
  }),
  StateStore.OperationAttempt,
  {
    strict: false,
    decode: ({ call_executed, outcome_tag, policy_json, reason_code, recheck_json, result_digest, ...attempt }) => ({
      ...attempt,
      outcome: { tag: outcome_tag, reason_code, call_executed: call_executed !== 0, result_digest },
      ...(recheck_json === null ? {} : { recheck: recheck_json }),
      ...(policy_json === null ? {} : { policy: policy_json })
    }),
    encode: ({ outcome, policy, recheck, ...attempt }) => ({
      ...attempt,
      outcome_tag: outcome.tag,
      reason_code: outcome.reason_code,
      call_executed: outcome.call_executed ? 1 : 0,
      result_digest: outcome.result_digest,
      recheck_json: recheck ?? null,
      policy_json: policy ?? null
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

/** A StateStorage over the SqlClient in context (its schema comes from the 0002_state migration). */
export const makeStorage = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)

  const getRun = SqlSchema.findOne({
    Request: Schema.String,
    Result: RunFromRow,
    execute: (run_id) => sql`SELECT * FROM runs WHERE run_id = ${run_id}`
  })

  const insertRun = SqlSchema.void({
    Request: RunFromRow,
    execute: (row) => sql`INSERT INTO runs ${sql.insert(row)}`
  })

  // Compare-and-set: writes `next` only while the stored Run is still in `expected`.
  const replaceRun = (next: StateStore.Run, expected: StateStore.RunStatus) =>
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

  const insertObservation = SqlSchema.void({
    Request: ObservationFromRow,
    execute: (row) => sql`INSERT INTO run_observations ${sql.insert(row)}`
  })

  const insertAttempt = SqlSchema.void({
    Request: AttemptFromRow,
    execute: (row) => sql`INSERT INTO operation_attempts ${sql.insert(row)}`
  })

  const insertIntents = SqlSchema.void({
    Request: Schema.Array(StateStore.OutboxIntent),
    execute: (rows) =>
      Effect.forEach(Arr.chunksOf(rows, batch), (chunk) => sql`INSERT INTO outbox_intents ${sql.insert(chunk)}`, {
        discard: true
      })
  })

  const storeAttempt = ({ attempt, intents }: StateStore.CommittedAttempt) =>
    Effect.zipRight(insertAttempt(attempt), insertIntents(intents))

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

  const storageDriver: StateStore.StateStorage.Service = {
    durable: true,
    transaction: (body) => storage(transaction(() => body)),
    getRun: (run_id) => storage(getRun(run_id)),
    insertRun: (run) => storage(insertRun(run)),
    replaceRun: (next, expected) => storage(replaceRun(next, expected)),
    listRuns: (filter) => {
      const where = [
        ...(filter.status === undefined ? [] : [sql.in("status", filter.status)]),
        ...(filter.parent_run_id === undefined ? [] : [sql`parent_run_id = ${filter.parent_run_id}`])
      ]
      return storage(
        SqlSchema.findAll({
          Request: Schema.Void,
          Result: RunFromRow,
          execute: () => sql`SELECT * FROM runs WHERE ${sql.and(where)} ORDER BY position`
        })(undefined)
      )
    },
    insertObservation: (observation) => storage(insertObservation(observation)),
    observations: (run_id) =>
      storage(
        SqlSchema.findAll({
          Request: Schema.String,
          Result: ObservationFromRow,
          execute: (id) => sql`SELECT * FROM run_observations WHERE run_id = ${id} ORDER BY sequence`
        })(run_id)
      ),
    hasAttempt: (attempt_id) =>
      storage(Effect.map(
        sql`SELECT 1 FROM operation_attempts WHERE attempt_id = ${attempt_id}`,
        (rows) => rows.length > 0
      )),
    insertAttempt: (committed) => storage(storeAttempt(committed)),
    listAttempts: (run_id) =>
      storage(
        SqlSchema.findAll({
          Request: Schema.String,
          Result: AttemptFromRow,
          execute: (id) => sql`SELECT * FROM operation_attempts WHERE run_id = ${id} ORDER BY position`
        })(run_id)
      ),
    getIntent: (intent_id) =>
      storage(
        SqlSchema.findOne({
          Request: Schema.String,
          Result: StateStore.OutboxIntent,
          execute: (id) => sql`SELECT * FROM outbox_intents WHERE intent_id = ${id}`
        })(intent_id)
      ),
    saveDelivery: (intent) =>
      storage(Effect.asVoid(
        sql`UPDATE outbox_intents SET delivery_state = ${intent.delivery_state},
          delivery_attempts = ${intent.delivery_attempts}, last_reason_code = ${intent.last_reason_code},
          delivered_at = ${intent.delivered_at} WHERE intent_id = ${intent.intent_id}`
      )),
    pendingIntents: (limit) =>
      storage(
        SqlSchema.findAll({
          Request: Schema.NonNegativeInt,
          Result: StateStore.OutboxIntent,
          execute: (n) =>
            sql`SELECT * FROM outbox_intents WHERE delivery_state = 'pending' ORDER BY position LIMIT ${n}`
        })(limit)
      ),
    cursor: (projector) =>
      storage(Effect.map(
        SqlSchema.findOne({
          Request: Schema.String,
          Result: Schema.Struct({ cursor: Cursor }),
          execute: (name) => sql`SELECT cursor FROM projection_cursors WHERE projector = ${name}`
        })(projector),
        Option.map((row) => row.cursor)
      )),
    projectionBasis: (rows) => {
      const record_ids = Arr.dedupe(rows.map((row) => row.record_id))
      const operation_ids = Arr.dedupe(rows.flatMap((row) => row.operation_id ?? []))
      const positions = Object.entries(Arr.groupBy(rows, (row) => row.chain_id)).map(([chain_id, at]) =>
        [chain_id, Arr.dedupe(at.map((row) => row.sequence))] as const
      )
      return storage(Effect.gen(function*() {
        const atPositions = yield* Effect.forEach(
          positions,
          ([chain_id, sequences]) => inBatches(sequences, (chunk) => recordsAtPositions({ chain_id, sequences: chunk }))
        )
        return {
          records: [...(yield* inBatches(record_ids, recordsByIds)), ...atPositions.flat()],
          operations: yield* inBatches(operation_ids, operationsByIds)
        }
      }))
    },
    writeProjection: (write) =>
      storage(Effect.gen(function*() {
        yield* Effect.forEach(Arr.chunksOf(write.inserts, batch), insertRecords, { discard: true })
        yield* Effect.forEach(Arr.chunksOf(write.operations, batch), upsertOperations, { discard: true })
        yield* Effect.forEach(write.attempts, storeAttempt, { discard: true })
        yield* sql`INSERT INTO projection_cursors (projector, cursor) VALUES (${write.projector}, ${write.cursor})
          ON CONFLICT (projector) DO UPDATE SET cursor = excluded.cursor`
      })),
    operations: (filter) => {
      const where = [
        ...(filter.chain_id === undefined ? [] : [sql`chain_id = ${filter.chain_id}`]),
        ...(filter.operation_id === undefined ? [] : [sql`operation_id = ${filter.operation_id}`]),
        ...(filter.open_only === true ? [sql`started_record_id IS NOT NULL AND terminal_count = 0`] : [])
      ]
      return storage(
        SqlSchema.findAll({
          Request: Schema.Void,
          Result: StateStore.ProjectedOperation,
          execute: () => sql`SELECT * FROM projected_operations WHERE ${sql.and(where)} ORDER BY position`
        })(undefined)
      )
    },
    recordCount: (filter) => {
      const where = filter.chain_id === undefined ? [] : [sql`chain_id = ${filter.chain_id}`]
      return storage(Effect.map(
        SqlSchema.findAll({
          Request: Schema.Void,
          Result: Count,
          execute: () => sql`SELECT COUNT(*) AS count FROM projected_records WHERE ${sql.and(where)}`
        })(undefined),
        ([row]) => row?.count ?? 0
      ))
    },
    hashAt: (chain_id, sequence) =>
      storage(Effect.map(
        SqlSchema.findOne({
          Request: ChainPosition,
          Result: ProjectedHash,
          // One record and one hash per position (applyProjection refuses any other); the order only makes the pick explicit.
          execute: (at) =>
            sql`SELECT chain_hash FROM projected_records WHERE chain_id = ${at.chain_id} AND sequence = ${at.sequence}
              ORDER BY projection_version, record_id LIMIT 1`
        })({ chain_id, sequence }),
        Option.map((row) => row.chain_hash)
      ))
  }
  return storageDriver
})

/** The SQL StateStorage (durable); needs a migrated SqlClient. */
export const layerStorage: Layer.Layer<StateStore.StateStorage, never, SqlClient.SqlClient> = Layer.effect(
  StateStore.StateStorage,
  makeStorage
)

/** The SQL Run, attempt and projection stores (durable); needs a migrated SqlClient and an IdGenerator. */
export const layer: Layer.Layer<StateStore.StateStores, never, SqlClient.SqlClient | IdGenerator> = StateStore.layer
  .pipe(Layer.provide(layerStorage))
