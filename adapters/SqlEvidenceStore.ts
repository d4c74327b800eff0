/**
 * The durable EvidenceStore and EvidenceProjectionSource over `@effect/sql` (`durable: true`), with group commit:
 * concurrent appends queue up, one writer fiber commits everything pending in one transaction, and no append is
 * answered before that commit. Inside it, every chain's head is read (as committed by this or any other process),
 * each record is compared with its head plus the batch so far, and the accepted records are inserted one prepared
 * statement each (a duplicate id or hash, which no head shows, undoes the batch and it is placed record by record in
 * a transaction of its own). The projection cursor is the row position: commit order, since SQLite serialises writers.
 *
 * Runtimes: Node (any SqlClient; tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlConnection } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import type { Scope } from "effect"
import { Chunk, Context, Effect, Exit, Layer, Option, Queue, Schema, Stream } from "effect"
import type { ParseError } from "effect/ParseResult"
import { Digest, Sha256Hex } from "../core/Digest.ts"
import * as Evidence from "../core/Evidence.ts"
import type { AppendError, ChainHead } from "../core/EvidenceStore.ts"
import {
  AppendReceipt,
  Cursor,
  EvidenceConflictError,
  EvidenceProjectionSource,
  EvidenceStore,
  EvidenceUnavailableError
} from "../core/EvidenceStore.ts"
import { admitAll, conflictOf, receiptOf } from "../core/EvidenceStore.ts"
import { writeTransaction } from "./internal/transaction.ts"

/** One append's result in a commit: its receipts, or why it was not appended. */
type Placed = Exit.Exit<ReadonlyArray<AppendReceipt>, EvidenceConflictError | EvidenceUnavailableError>

/** Commits a batch of admitted appends in one transaction: each append's result, in order; it never fails as a whole. */
type Commit = (
  batch: ReadonlyArray<ReadonlyArray<Evidence.EvidenceRecord>>
) => Effect.Effect<ReadonlyArray<Placed>>

/** How the store batches and pages. */
export interface Options {
  /** The most appends one transaction commits (default 1024). */
  readonly maxBatch?: number
  /** Rows per page when a chain is read (default 1000). */
  readonly pageSize?: number
}

const StoredRow = Evidence.StoredRecord

const TrustedHeadRow = Schema.Struct({ sequence: Schema.NonNegativeInt, chain_hash: Sha256Hex })

const ReceiptRow = Schema.Struct({ position: Schema.Number, ...AppendReceipt.fields })

const DuplicateRow = Schema.Struct({ record_id: Schema.String })

const ChainRow = Schema.Struct({ chain_id: Schema.String })

const Identity = Schema.Struct({ record_id: Schema.String, chain_hash: Schema.String })

const Scan = Schema.Struct({ after: Schema.Number, limit: Schema.Number })

const Lookup = Schema.Struct({ chain_id: Schema.String, record_id: Schema.String })

type Columns = { readonly [K in keyof Evidence.StoredRecord]: unknown }

const unavailable = (error: SqlError | ParseError): EvidenceUnavailableError =>
  new EvidenceUnavailableError({
    detail: error._tag === "ParseError" ? "a stored evidence row does not decode" : `${error.message}: ${error.cause}`
  })

// A cursor is the position of the last delivered row.
const positionOf = (cursor: Cursor | null): number | undefined =>
  cursor === null ? 0 : /^(0|[1-9][0-9]{0,14})$/.test(cursor) ? Number(cursor) : undefined

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

interface Pending {
  readonly records: ReadonlyArray<Evidence.EvidenceRecord>
  readonly resume: (result: Exit.Exit<ReadonlyArray<AppendReceipt>, AppendError>) => void
}

/** The commit over the SqlClient in context: a batch's transaction, or record by record when an insert fails. */
const makeCommit: Effect.Effect<Commit, never, SqlClient.SqlClient> = Effect.gen(function*() {
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

/** A store over the SqlClient in context; its writer fiber lives as long as the scope. */
export const make = (
  options: Options = {}
): Effect.Effect<
  EvidenceStore.Service & EvidenceProjectionSource.Service,
  never,
  SqlClient.SqlClient | Digest | Scope.Scope
> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const digest = yield* Digest
    const maxBatch = Math.max(1, options.maxBatch ?? 1024)
    const pageSize = Math.max(1, options.pageSize ?? 1000)

    const findTrustedHead = SqlSchema.findOne({
      Request: Schema.String,
      Result: TrustedHeadRow,
      execute: (chain_id) =>
        sql`SELECT sequence, chain_hash FROM evidence_records WHERE chain_id = ${chain_id}
          ORDER BY sequence DESC LIMIT 1`
    })
    // A page is read as value rows and checked by `Evidence.storedRecordOf` rather than decoded by a Schema: verify
    // reads every row of a chain, and a Schema decode cost several times the row's two hashes.
    const findPage = ({ after, chain_id, limit }: { chain_id: string; after: number; limit: number }) =>
      Effect.flatMap(
        sql`SELECT record_id, record_type, chain_id, operation_id, sequence, policy_id, policy_version, payload_json,
          payload_digest, previous_chain_hash, chain_hash, supersedes_record_id, created_at, hash_algorithm
          FROM evidence_records WHERE chain_id = ${chain_id} AND sequence > ${after} ORDER BY sequence LIMIT ${limit}`
          .values,
        (rows) => {
          const records: Array<Evidence.StoredRecord> = []
          for (const row of rows) {
            const record = Evidence.storedRecordOf(row)
            if (record === undefined) {
              return Effect.fail(new EvidenceUnavailableError({ detail: "a stored evidence row does not decode" }))
            }
            records.push(record)
          }
          return Effect.succeed(records)
        }
      )
    const findRecord = SqlSchema.findOne({
      Request: Lookup,
      Result: StoredRow,
      execute: ({ chain_id, record_id }) =>
        sql`SELECT record_id, record_type, chain_id, operation_id, sequence, policy_id, policy_version, payload_json,
          payload_digest, previous_chain_hash, chain_hash, supersedes_record_id, created_at, hash_algorithm
          FROM evidence_records WHERE record_id = ${record_id} AND chain_id = ${chain_id}`
    })
    const findReceipts = SqlSchema.findAll({
      Request: Scan,
      Result: ReceiptRow,
      execute: ({ after, limit }) =>
        sql`SELECT position, chain_id, record_id, sequence, chain_hash AS head_hash FROM evidence_records
          WHERE position > ${after} ORDER BY position LIMIT ${limit}`
    })
    const findChains = SqlSchema.findAll({
      Request: Schema.Void,
      Result: ChainRow,
      execute: () => sql`SELECT chain_id FROM evidence_records GROUP BY chain_id ORDER BY MIN(position)`
    })

    const commit = yield* makeCommit
    const commitBatch = (batch: Chunk.Chunk<Pending>) => {
      const pendings = Chunk.toReadonlyArray(batch)
      return Effect.map(
        commit(pendings.map((pending) => pending.records)),
        (placed) => pendings.forEach((pending, i) => pending.resume(placed[i]!))
      )
    }

    const queue = yield* Queue.unbounded<Pending>()
    let closed = false
    // Registered before the writer is forked, so it runs after the writer has finished its batch and stopped.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closed = true
        for (const pending of yield* Queue.takeAll(queue)) {
          pending.resume(Exit.fail(new EvidenceUnavailableError({ detail: "the evidence store was closed" })))
        }
        yield* Queue.shutdown(queue)
      })
    )
    // Only waiting is interruptible: once taken, a batch is committed and answered.
    yield* Effect.uninterruptibleMask((restore) =>
      restore(Queue.take(queue)).pipe(
        Effect.flatMap((first) => Effect.map(Queue.takeUpTo(queue, maxBatch - 1), Chunk.prepend(first))),
        Effect.flatMap(commitBatch)
      )
    ).pipe(Effect.forever, Effect.forkScoped)

    const read = (
      chain_id: string,
      after_sequence = -1
    ): Stream.Stream<Evidence.StoredRecord, EvidenceUnavailableError> =>
      Stream.paginateChunkEffect(after_sequence, (after) =>
        findPage({ chain_id, after, limit: pageSize }).pipe(
          Effect.catchTag("SqlError", (error) => Effect.fail(unavailable(error))),
          Effect.map((rows) =>
            [
              Chunk.unsafeFromArray(rows),
              rows.length < pageSize ? Option.none() : Option.some(rows[rows.length - 1]!.sequence)
            ] as const
          )
        ))

    const appendAll = (records: ReadonlyArray<Evidence.EvidenceRecord>) =>
      Effect.flatMap(admitAll(digest, records), (admitted) =>
        admitted.length === 0
          ? Effect.succeed<ReadonlyArray<AppendReceipt>>([])
          : Effect.async<ReadonlyArray<AppendReceipt>, AppendError>((resume) => {
            if (closed || !queue.unsafeOffer({ records: admitted, resume })) {
              resume(Exit.fail(new EvidenceUnavailableError({ detail: "the evidence store was closed" })))
            }
          }))

    const service: EvidenceStore.Service & EvidenceProjectionSource.Service = {
      durable: true,
      // Untraced: a span per append costs more than the append's share of the commit.
      append: (record) => Effect.map(appendAll([record]), (receipts) => receipts[0]!),
      appendAll,
      read,
      head: Effect.fn("SqlEvidenceStore.head")(function*(chain_id: string) {
        const row = yield* Effect.mapError(findTrustedHead(chain_id), unavailable)
        return Option.map(row, (head): ChainHead => ({ sequence: head.sequence, hash: head.chain_hash }))
      }),
      verify: Effect.fn("SqlEvidenceStore.verify")(function*(chain_id: string, expected_head?: string) {
        return yield* Effect.provideService(Evidence.verify(chain_id, read(chain_id), expected_head), Digest, digest)
      }),
      chains: Effect.map(Effect.mapError(findChains(undefined), unavailable), (rows) => rows.map((row) => row.chain_id))
        .pipe(Effect.withSpan("SqlEvidenceStore.chains")),
      scan: Effect.fn("SqlEvidenceStore.scan")(function*(after: Cursor | null, limit: number) {
        const from = positionOf(after)
        if (from === undefined) {
          return yield* new EvidenceUnavailableError({ detail: `malformed projection cursor: ${after}` })
        }
        const rows = yield* Effect.mapError(
          findReceipts({ after: from, limit: Math.max(0, Math.floor(limit)) }),
          unavailable
        )
        const last = rows[rows.length - 1]
        return {
          receipts: rows.map(({ position: _, ...receipt }) => new AppendReceipt(receipt, { disableValidation: true })),
          next_cursor: last === undefined ? after : Cursor.make(String(last.position))
        }
      }),
      get: Effect.fn("SqlEvidenceStore.get")(function*(chain_id: string, record_id: string) {
        return yield* Effect.mapError(findRecord({ chain_id, record_id }), unavailable)
      })
    }
    return service
  })

/** The SQL EvidenceStore and its EvidenceProjectionSource, over the SqlClient in context. */
export const layer: Layer.Layer<EvidenceStore | EvidenceProjectionSource, never, SqlClient.SqlClient | Digest> = Layer
  .scopedContext(
    Effect.map(make(), (store) => Context.make(EvidenceStore, store).pipe(Context.add(EvidenceProjectionSource, store)))
  )
