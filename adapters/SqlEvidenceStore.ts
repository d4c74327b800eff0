/**
 * The durable EvidenceStore and EvidenceProjectionSource over `@effect/sql` (`durable: true`), with group commit:
 * concurrent appends queue up, one writer fiber commits everything pending in one transaction, and no append is
 * answered before that commit. Each record is inserted by one compare-and-append statement that checks its chain's
 * head as committed (by this or any other process) plus the batch so far. The projection cursor is the row
 * position: commit order, since SQLite serialises writers.
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
import { admit, conflictOf } from "../core/EvidenceStore.ts"

/** How the store batches and pages. */
export interface Options {
  /** The most appends one transaction commits (default 1024). */
  readonly maxBatch?: number
  /** Rows per page when a chain is read (default 1000). */
  readonly pageSize?: number
}

const StoredRow = Evidence.StoredRecord

const HeadRow = Schema.Struct({ sequence: Schema.Number, chain_hash: Schema.String })

const TrustedHeadRow = Schema.Struct({ sequence: Schema.NonNegativeInt, chain_hash: Sha256Hex })

const ReceiptRow = Schema.Struct({ position: Schema.Number, ...AppendReceipt.fields })

const DuplicateRow = Schema.Struct({ record_id: Schema.String })

const ChainRow = Schema.Struct({ chain_id: Schema.String })

const Identity = Schema.Struct({ record_id: Schema.String, chain_hash: Schema.String })

const Scan = Schema.Struct({ after: Schema.Number, limit: Schema.Number })

const Lookup = Schema.Struct({ chain_id: Schema.String, record_id: Schema.String })

type Columns = { readonly [K in keyof Evidence.StoredRecord]: unknown }

// The compare-and-append statement's parameters, in the order its template below interpolates them.
const appendParams = (r: Columns): ReadonlyArray<unknown> => [
  r.record_id,
  r.record_type,
  r.chain_id,
  r.operation_id,
  r.sequence,
  r.policy_id,
  r.policy_version,
  r.payload_json,
  r.payload_digest,
  r.previous_chain_hash,
  r.chain_hash,
  r.supersedes_record_id,
  r.created_at,
  r.hash_algorithm,
  r.chain_id,
  r.sequence,
  r.sequence,
  r.chain_id,
  r.sequence,
  r.previous_chain_hash
]

// Inserts the record only if its chain's head is exactly (sequence - 1, previous_chain_hash), or the chain is empty
// for sequence 0; a duplicate record id or chain hash inserts nothing either. Returns the position when inserted.
const appendStatement = (sql: SqlClient.SqlClient, r: Columns) =>
  sql`INSERT INTO evidence_records (record_id, record_type, chain_id, operation_id, sequence, policy_id,
    policy_version, payload_json, payload_digest, previous_chain_hash, chain_hash, supersedes_record_id, created_at,
    hash_algorithm)
    SELECT ${r.record_id}, ${r.record_type}, ${r.chain_id}, ${r.operation_id}, ${r.sequence}, ${r.policy_id},
      ${r.policy_version}, ${r.payload_json}, ${r.payload_digest}, ${r.previous_chain_hash}, ${r.chain_hash},
      ${r.supersedes_record_id}, ${r.created_at}, ${r.hash_algorithm}
    WHERE NOT EXISTS (SELECT 1 FROM evidence_records WHERE chain_id = ${r.chain_id} AND sequence >= ${r.sequence})
      AND (${r.sequence} = 0 OR EXISTS (SELECT 1 FROM evidence_records
        WHERE chain_id = ${r.chain_id} AND sequence = ${r.sequence} - 1 AND chain_hash = ${r.previous_chain_hash}))
    ON CONFLICT DO NOTHING RETURNING position`

const unavailable = (error: SqlError | ParseError): EvidenceUnavailableError =>
  new EvidenceUnavailableError({
    detail: error._tag === "ParseError" ? "a stored evidence row does not decode" : `${error.message}: ${error.cause}`
  })

const receiptOf = (record: Evidence.EvidenceRecord): AppendReceipt =>
  new AppendReceipt({
    chain_id: record.chain_id,
    record_id: record.record_id,
    sequence: record.sequence,
    head_hash: record.chain_hash
  }, { disableValidation: true })

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

type Placed = Exit.Exit<AppendReceipt, EvidenceConflictError>

interface Pending {
  readonly record: Evidence.EvidenceRecord
  readonly resume: (result: Exit.Exit<AppendReceipt, AppendError>) => void
}

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

    const findHead = SqlSchema.findOne({
      Request: Schema.String,
      Result: HeadRow,
      execute: (chain_id) =>
        sql`SELECT sequence, chain_hash FROM evidence_records WHERE chain_id = ${chain_id}
          ORDER BY sequence DESC LIMIT 1`
    })
    const findTrustedHead = SqlSchema.findOne({
      Request: Schema.String,
      Result: TrustedHeadRow,
      execute: (chain_id) =>
        sql`SELECT sequence, chain_hash FROM evidence_records WHERE chain_id = ${chain_id}
          ORDER BY sequence DESC LIMIT 1`
    })
    const findDuplicates = SqlSchema.findAll({
      Request: Identity,
      Result: DuplicateRow,
      execute: ({ chain_hash, record_id }) =>
        sql`SELECT record_id FROM evidence_records WHERE record_id = ${record_id} OR chain_hash = ${chain_hash}`
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

    // The hot statement is compiled once by the client's own compiler and run on the transaction's connection as a
    // prepared statement, without a span and a compile per row (that tripled the cost of an append).
    const [appendSql, markerParams] = appendStatement(sql, markers).compile()
    const expectedParams = appendParams(markers)
    if (markerParams.length !== expectedParams.length || markerParams.some((param, i) => param !== expectedParams[i])) {
      return yield* Effect.dieMessage("SqlEvidenceStore: the append statement's parameters are out of order")
    }

    // IMMEDIATE takes SQLite's write lock up front: no other writer can move a head until this commit.
    const begin = sql.onDialectOrElse({ sqlite: () => "BEGIN IMMEDIATE", orElse: () => "BEGIN" })

    // Not `sql.withTransaction`: it turns a failed COMMIT into a defect and leaves SQLite's transaction open (a
    // COMMIT refused for a deferred constraint or SQLITE_BUSY does not end it); here it fails and is rolled back.
    const transaction = <A, E>(
      body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>
    ): Effect.Effect<A, E | SqlError> =>
      Effect.scoped(Effect.gen(function*() {
        const connection = yield* sql.reserve
        yield* connection.execute(begin, [], undefined)
        const done = yield* Effect.exit(
          Effect.provideService(body(connection), SqlClient.TransactionConnection, [connection, 0])
        )
        const committed = Exit.isSuccess(done)
          ? yield* Effect.exit(connection.execute("COMMIT", [], undefined))
          : undefined
        if (committed === undefined || Exit.isFailure(committed)) {
          // SQLite may have rolled back already (an I/O error, a full disk): nothing more to undo then.
          yield* connection.execute("ROLLBACK", [], undefined).pipe(Effect.orElse(() => Effect.void))
          if (committed !== undefined) yield* committed
        }
        return yield* done
      }))

    // Why a record was not appended: a duplicate record id or hash first, then the head it does not extend.
    const refuse = Effect.fnUntraced(function*(record: Evidence.EvidenceRecord) {
      const head = yield* findHead(record.chain_id)
      const duplicates = yield* findDuplicates(record)
      const duplicate = duplicates.some((row) => row.record_id === record.record_id)
        ? "duplicate_record"
        : duplicates.length > 0
        ? "duplicate_hash"
        : undefined
      return conflictOf(
        record,
        Option.isNone(head) ? undefined : { sequence: head.value.sequence, hash: head.value.chain_hash },
        duplicate
      ) ?? new EvidenceConflictError({ reason: "sequence", chain_id: record.chain_id, record_id: record.record_id })
    })

    const place = (
      connection: SqlConnection.Connection,
      record: Evidence.EvidenceRecord
    ): Effect.Effect<Placed, SqlError | ParseError> =>
      ((record.sequence === 0) === (record.previous_chain_hash === null)
        ? connection.execute(appendSql, appendParams(record), undefined)
        : Effect.succeed([])).pipe(
          Effect.flatMap((inserted): Effect.Effect<Placed, SqlError | ParseError> =>
            inserted.length > 0
              ? Effect.succeed(Exit.succeed(receiptOf(record)))
              : Effect.map(refuse(record), Exit.fail)
          )
        )

    const commitBatch = (batch: Chunk.Chunk<Pending>) =>
      transaction((connection) => Effect.forEach(batch, (pending) => place(connection, pending.record))).pipe(
        Effect.mapError(unavailable),
        Effect.exit,
        Effect.flatMap((exit) =>
          Effect.sync(() => {
            let i = 0
            for (const pending of batch) {
              pending.resume(Exit.isFailure(exit) ? Exit.failCause(exit.cause) : exit.value[i++]!)
            }
          })
        )
      )

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

    const service: EvidenceStore.Service & EvidenceProjectionSource.Service = {
      durable: true,
      // Untraced: a span per append costs more than the append's share of the commit.
      append: (record) =>
        Effect.flatMap(
          Effect.provideService(admit(record), Digest, digest),
          (admitted) =>
            Effect.async<AppendReceipt, AppendError>((resume) => {
              if (closed || !queue.unsafeOffer({ record: admitted, resume })) {
                resume(Exit.fail(new EvidenceUnavailableError({ detail: "the evidence store was closed" })))
              }
            })
        ),
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
