/**
 * The group commit of the SQL EvidenceStore: one transaction per batch of admitted appends, every chain's head read
 * inside it, each record compared with its head plus the batch so far, and the accepted records inserted one prepared
 * statement each (a duplicate id or hash, which no head shows, undoes the batch and it is placed record by record in
 * a transaction of its own).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlConnection } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Exit, Schema } from "effect"
import type { ParseError } from "effect/ParseResult"
import type * as Evidence from "../../core/Evidence.ts"
import type { AppendReceipt } from "../../core/EvidenceStore.ts"
import { conflictOf, EvidenceConflictError, EvidenceUnavailableError, receiptOf } from "../../core/EvidenceStore.ts"
import { writeTransaction } from "./transaction.ts"

/** One append's result in a commit: its receipts, or why it was not appended. */
export type Placed = Exit.Exit<ReadonlyArray<AppendReceipt>, EvidenceConflictError | EvidenceUnavailableError>

/** One append waiting for its commit. */
export interface Pending {
  readonly records: ReadonlyArray<Evidence.EvidenceRecord>
  readonly resume: (result: Placed) => void
}

/** Answer each pending append with its result, in order. */
export const settle = (pendings: ReadonlyArray<Pending>, placed: ReadonlyArray<Placed>) =>
  pendings.forEach((pending, i) => pending.resume(placed[i]!))

/** Commits a batch of admitted appends in one transaction: each append's result, in order; it never fails as a whole. */
export type Commit = (
  batch: ReadonlyArray<ReadonlyArray<Evidence.EvidenceRecord>>
) => Effect.Effect<ReadonlyArray<Placed>>

/** Each append's result once a commit of `batch` has ended: a defect or an interruption is the store unavailable. */
export const answered = (
  batch: ReadonlyArray<unknown>,
  exit: Exit.Exit<ReadonlyArray<Placed>>
): ReadonlyArray<Placed> => {
  if (Exit.isSuccess(exit)) return exit.value
  const error = Exit.fail(
    new EvidenceUnavailableError({ detail: `the evidence commit failed: ${Cause.pretty(exit.cause)}` })
  )
  return batch.map(() => error)
}

const DuplicateRow = Schema.Struct({ record_id: Schema.String })

const Identity = Schema.Struct({ record_id: Schema.String, chain_hash: Schema.String })

type Columns = { readonly [K in keyof Evidence.StoredRecord]: unknown }

/** A SqlError or an undecodable row, as the store reports it. */
export const unavailable = (error: SqlError | ParseError): EvidenceUnavailableError =>
  new EvidenceUnavailableError({
    detail: error._tag === "ParseError" ? "a stored evidence row does not decode" : `${error.message}: ${error.cause}`
  })

// Each column's own name, to check the parameter order once.
const markers: Columns = {
  record_id: "record_id",
  record_type: "record_type",
  chain_id: "chain_id",
  operation_id: "operation_id",
  sequence: "sequence",
  policy_id: "policy_id",
  policy_version: "policy_version",
  payload_json: "payload_json",
  payload_digest: "payload_digest",
  previous_chain_hash: "previous_chain_hash",
  chain_hash: "chain_hash",
  supersedes_record_id: "supersedes_record_id",
  created_at: "created_at",
  hash_algorithm: "hash_algorithm"
}

const columns = Object.keys(markers) as ReadonlyArray<keyof Columns>

// A record's insert parameters, in the column order of `markers`.
const rowParams = (record: Columns): ReadonlyArray<unknown> => columns.map((column) => record[column])

// The statement sizes a batch is cut into, so a handful of prepared statements serve every batch.
const CHUNK_SIZES = [64, 16, 4, 2, 1] as const

const chunked = <A>(items: ReadonlyArray<A>): ReadonlyArray<ReadonlyArray<A>> => {
  const out: Array<ReadonlyArray<A>> = []
  let i = 0
  for (const size of CHUNK_SIZES) {
    for (; items.length - i >= size; i += size) out.push(items.slice(i, i + size))
  }
  return out
}

const isHeadRow = (row: unknown): row is { chain_id: string; sequence: number; chain_hash: string } =>
  typeof row === "object" && row !== null && typeof (row as { chain_id?: unknown }).chain_id === "string" &&
  typeof (row as { sequence?: unknown }).sequence === "number" &&
  typeof (row as { chain_hash?: unknown }).chain_hash === "string"

// A batch to place again record by record, in a transaction of its own: an insert found its id or hash stored.
const retry = { _tag: "Retry" } as const

/** The commit over the SqlClient in context: a batch's transaction, or record by record when an insert fails. */
export const make: Effect.Effect<Commit, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const findDuplicates = SqlSchema.findAll({
    Request: Identity,
    Result: DuplicateRow,
    execute: ({ chain_hash, record_id }) =>
      sql`SELECT record_id FROM evidence_records WHERE record_id = ${record_id} OR chain_hash = ${chain_hash}`
  })

  // The inserts are compiled once by the client's own compiler and run on the transaction's connection as prepared
  // statements, once per record: SQLite inserts a multi-row VALUES list several times slower per row.
  const [insertSql, insertParams] = sql`INSERT INTO evidence_records ${sql.insert(markers)}`.compile()
  if (insertParams.some((param, i) => param !== columns[i])) {
    return yield* Effect.dieMessage("SqlEvidenceStore: the insert statement's parameters are out of order")
  }
  // A batch's insert: any failure (a stored id or hash, which only a write can find, or the store's own) undoes the
  // batch, which is then placed again record by record.
  const insert = (connection: SqlConnection.Connection, record: Evidence.EvidenceRecord) =>
    Effect.catchTag(connection.execute(insertSql, rowParams(record), undefined), "SqlError", () => Effect.fail(retry))
  // One record of the record-by-record path, skipped (no row returned) when its id or hash is already stored.
  const insertOneSql =
    sql`INSERT INTO evidence_records ${sql.insert(markers)} ON CONFLICT DO NOTHING RETURNING position`
      .compile()[0]
  const insertOne = (connection: SqlConnection.Connection, record: Evidence.EvidenceRecord) =>
    Effect.map(connection.execute(insertOneSql, rowParams(record), undefined), (rows) => rows.length === 1)
  // Each chain's head by its own index seek (a correlated MAX over every row of 64 chains cost ~5 ms a batch).
  const headSql = (chain: number) =>
    sql`SELECT * FROM (SELECT chain_id, sequence, chain_hash FROM evidence_records WHERE chain_id = ${chain}
      ORDER BY sequence DESC LIMIT 1) AS head`
  const headsSql = new Map<number, string>(CHUNK_SIZES.map((size) =>
    [
      size,
      sql`${sql.join(" UNION ALL ", false)(Array.from({ length: size }, (_, i) => headSql(i)))}`.compile()[0]
    ] as const
  ))

  const transaction = writeTransaction(sql)

  // Why a record was not appended: a duplicate record id or hash first, then the head it was compared against.
  const refuse = Effect.fnUntraced(function*(
    record: Evidence.EvidenceRecord,
    head: { readonly sequence: number; readonly hash: string } | undefined
  ) {
    const duplicates = yield* findDuplicates(record)
    const duplicate = duplicates.some((row) => row.record_id === record.record_id)
      ? "duplicate_record"
      : duplicates.length > 0
      ? "duplicate_hash"
      : undefined
    return conflictOf(record, head, duplicate) ??
      new EvidenceConflictError({ reason: "sequence", chain_id: record.chain_id, record_id: record.record_id })
  })

  // Every chain's head, read inside the transaction (IMMEDIATE: no other writer can move one until COMMIT).
  const readHeads = (connection: SqlConnection.Connection, chain_ids: ReadonlyArray<string>) =>
    Effect.flatMap(
      Effect.forEach(
        chunked(chain_ids),
        (chunk) => connection.execute(headsSql.get(chunk.length)!, chunk, undefined)
      ),
      (pages) => {
        const rows = pages.flat()
        return rows.every(isHeadRow)
          ? Effect.succeed(
            new Map(rows.map((row) => [row.chain_id, { sequence: row.sequence, hash: row.chain_hash }]))
          )
          : Effect.fail(new EvidenceUnavailableError({ detail: "a stored chain head does not decode" }))
      }
    )

  // The record-by-record path: each record compared with its chain's head, then inserted unless its id or hash is
  // already stored.
  const placeEach = Effect.fnUntraced(function*(
    connection: SqlConnection.Connection,
    records: ReadonlyArray<Evidence.EvidenceRecord>
  ) {
    const receipts: Array<AppendReceipt> = []
    for (const record of records) {
      const head = (yield* readHeads(connection, [record.chain_id])).get(record.chain_id)
      const inserted = conflictOf(record, head, undefined) === undefined && (yield* insertOne(connection, record))
      if (!inserted) return Exit.fail(yield* refuse(record, head)) as Placed
      receipts.push(receiptOf(record))
    }
    return Exit.succeed(receipts) as Placed
  })

  // Compare every record against the heads read in this transaction, then insert the accepted ones. Anything the
  // heads cannot show (a duplicate id or hash) fails its insert: the batch is then undone and placed record by
  // record in a transaction of its own (`Retry`).
  const placeBatch = Effect.fnUntraced(function*(
    connection: SqlConnection.Connection,
    batch: ReadonlyArray<ReadonlyArray<Evidence.EvidenceRecord>>
  ) {
    const heads = yield* readHeads(connection, [...new Set(batch.flatMap((records) => records.map((r) => r.chain_id)))])
    const plans = batch.map((records) => {
      const receipts: Array<AppendReceipt> = []
      for (const record of records) {
        const head = heads.get(record.chain_id)
        if (conflictOf(record, head, undefined) !== undefined) return { receipts, refused: { record, head } }
        heads.set(record.chain_id, { sequence: record.sequence, hash: record.chain_hash })
        receipts.push(receiptOf(record))
      }
      return { receipts, refused: undefined }
    })
    for (const [i, plan] of plans.entries()) {
      const records = batch[i]!
      for (let r = 0; r < plan.receipts.length; r++) yield* insert(connection, records[r]!)
    }
    return yield* Effect.forEach(plans, ({ receipts, refused }) =>
      refused === undefined
        ? Effect.succeed(Exit.succeed(receipts) as Placed)
        : Effect.map(refuse(refused.record, refused.head), (error) => Exit.fail(error) as Placed))
  })

  return (batch) =>
    transaction((connection) => placeBatch(connection, batch)).pipe(
      Effect.catchTag("Retry", () =>
        transaction((connection) => Effect.forEach(batch, (records) => placeEach(connection, records)))),
      Effect.mapError((error) =>
        error._tag === "EvidenceUnavailableError" ? error : unavailable(error)
      ),
      Effect.exit,
      Effect.map((exit): ReadonlyArray<Placed> =>
        Exit.isSuccess(exit) ? exit.value : batch.map(() => Exit.failCause(exit.cause))
      )
    )
})
