/**
 * The durable EvidenceStore and EvidenceProjectionSource over `@effect/sql` (`durable: true`), with group commit:
 * concurrent appends are committed together in one transaction, and no append is answered before that commit
 * (internal/evidenceCommit.ts says what a commit checks; internal/commitDispatch.ts how appends reach it, on the
 * store's connection or, for a SQLite file, on a commit thread). The projection cursor is the row position: commit
 * order, since SQLite serialises writers.
 *
 * Runtimes: any with a SqlClient (no driver imported; tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import type { Scope } from "effect"
import { Chunk, Context, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import { Digest, Sha256Hex } from "../../core/base/Digest.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import type { AppendError, ChainHead } from "../../core/evidence/EvidenceStore.ts"
import {
  AppendReceipt,
  Cursor,
  EvidenceProjectionSource,
  EvidenceStore,
  EvidenceUnavailableError
} from "../../core/evidence/EvidenceStore.ts"
import { admitAll, admitAllNow } from "../../core/evidence/EvidenceStore.ts"
import type { BudgetSpentError, PendingAdmission } from "../../core/policy/BudgetLedger.ts"
import * as CommitQueue from "./internal/commitQueue.ts"
import * as EvidenceCommit from "./internal/evidenceCommit.ts"
import { unavailable } from "./internal/evidenceCommit.ts"

/** How the store batches and pages. */
export interface Options {
  /** The most appends one transaction commits (default 1024). */
  readonly maxBatch?: number
  /** Rows per page when a chain is read (default 1000). */
  readonly pageSize?: number
  /**
   * How admitted appends reach the commit (default: one writer fiber committing on the SqlClient's connection); the
   * Node layer `SqliteEvidenceStore.layerCommitThread` hands overlapping ones to a worker thread.
   */
  readonly dispatch?: Dispatch
  /**
   * A synchronous reader of a chain's rows (the Node layer's own connection to the file), which `read` and `verify`
   * use instead of the SqlClient: verification then runs in one step, with no effect runtime between its pages.
   */
  readonly reader?: Effect.Effect<PageReader | undefined, never, Scope.Scope | SqlClient.SqlClient>
}

/**
 * A chain's rows after `after` in ascending sequence, at most `limit`, each as its values in `StoredRecord` field order;
 * it throws when the database cannot be read.
 */
export type PageReader = (chain_id: string, after: number, limit: number) => ReadonlyArray<ReadonlyArray<unknown>>

/** How admitted appends reach the store's commit: a function to submit each, for as long as the scope lives. */
export type Dispatch = (
  commit: EvidenceCommit.Commit,
  maxBatch: number
) => Effect.Effect<CommitQueue.Submit, never, Scope.Scope | SqlClient.SqlClient>

const StoredRow = Evidence.StoredRecord

const TrustedHeadRow = Schema.Struct({ sequence: Schema.NonNegativeInt, chain_hash: Sha256Hex })

const ReceiptRow = Schema.Struct({ position: Schema.Number, ...AppendReceipt.fields })

const ChainRow = Schema.Struct({ chain_id: Schema.String })

const Scan = Schema.Struct({ after: Schema.Number, limit: Schema.Number })

const Lookup = Schema.Struct({ chain_id: Schema.String, record_id: Schema.String })

// A page of value rows as stored records, or unavailable at the first row that does not decode.
const decodeRows = (
  rows: ReadonlyArray<ReadonlyArray<unknown>>
): Array<Evidence.StoredRecord> | EvidenceUnavailableError => {
  const records: Array<Evidence.StoredRecord> = []
  for (const row of rows) {
    const record = Evidence.storedRecordOf(row)
    if (record === undefined) return new EvidenceUnavailableError({ detail: "a stored evidence row does not decode" })
    records.push(record)
  }
  return records
}

const decodePage = (rows: ReadonlyArray<ReadonlyArray<unknown>>) => {
  const records = decodeRows(rows)
  return records instanceof EvidenceUnavailableError ? Effect.fail(records) : Effect.succeed(records)
}

// What a synchronous read threw, as the store reports it.
const readFailed = (error: unknown) =>
  error instanceof EvidenceUnavailableError
    ? error
    : new EvidenceUnavailableError({ detail: `the evidence store could not be read: ${error}` })

// A chain's pages read synchronously, until one comes back short; a row that does not decode is thrown.
function* pagesOf(
  reader: PageReader,
  chain_id: string,
  pageSize: number
): Generator<ReadonlyArray<Evidence.StoredRecord>> {
  for (let after = -1;;) {
    const records = decodeRows(reader(chain_id, after, pageSize))
    if (records instanceof EvidenceUnavailableError) throw records
    yield records
    if (records.length < pageSize) return
    after = records[records.length - 1]!.sequence
  }
}

// A cursor is the position of the last delivered row.
const positionOf = (cursor: Cursor | null): number | undefined =>
  cursor === null ? 0 : /^(0|[1-9][0-9]{0,14})$/.test(cursor) ? Number(cursor) : undefined

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
    const stored = sql.literal(EvidenceCommit.storedColumns)
    const reader = options.reader === undefined ? undefined : yield* options.reader
    const findPage = ({ after, chain_id, limit }: { chain_id: string; after: number; limit: number }) =>
      reader === undefined
        ? Effect.flatMap(
          Effect.mapError(
            sql`SELECT ${stored} FROM evidence_records WHERE chain_id = ${chain_id} AND sequence > ${after}
              ORDER BY sequence LIMIT ${limit}`.values,
            unavailable
          ),
          decodePage
        )
        : Effect.flatMap(Effect.try({ try: () => reader(chain_id, after, limit), catch: readFailed }), decodePage)
    const findRecord = SqlSchema.findOne({
      Request: Lookup,
      Result: StoredRow,
      execute: ({ chain_id, record_id }) =>
        sql`SELECT ${stored} FROM evidence_records WHERE record_id = ${record_id} AND chain_id = ${chain_id}`
    })
    const findReceipts = SqlSchema.findAll({
      Request: Scan,
      Result: ReceiptRow,
      execute: ({ after, limit }) =>
        sql`SELECT position, chain_id, record_id, sequence, chain_hash AS head_hash FROM evidence_records
          WHERE position > ${after} ORDER BY position LIMIT ${limit}`
    })
    const findRecords = ({ after, limit }: typeof Scan.Type) =>
      Effect.flatMap(
        Effect.mapError(
          sql`SELECT position, ${stored} FROM evidence_records WHERE position > ${after} ORDER BY position
            LIMIT ${limit}`.values,
          unavailable
        ),
        (rows) => {
          const last = rows[rows.length - 1]?.[0]
          return Effect.map(
            decodePage(rows.map((row) => row.slice(1))),
            (records) => ({ records, last: typeof last === "number" ? last : undefined })
          )
        }
      )
    const findChains = SqlSchema.findAll({
      Request: Schema.Void,
      Result: ChainRow,
      execute: () => sql`SELECT chain_id FROM evidence_records GROUP BY chain_id ORDER BY MIN(position)`
    })

    const commit = yield* EvidenceCommit.make
    const submit = yield* (options.dispatch ?? CommitQueue.queued)(commit, maxBatch)

    const read = (
      chain_id: string,
      after_sequence = -1
    ): Stream.Stream<Evidence.StoredRecord, EvidenceUnavailableError> =>
      Stream.paginateChunkEffect(after_sequence, (after) =>
        findPage({ chain_id, after, limit: pageSize }).pipe(
          Effect.map((rows) =>
            [
              Chunk.unsafeFromArray(rows),
              rows.length < pageSize ? Option.none() : Option.some(rows[rows.length - 1]!.sequence)
            ] as const
          )
        ))

    // Budget places go to the ledger on this SqlClient's database (SqlBudgetLedger's `database`), in the same commit.
    const admittingEffect = (
      records: ReadonlyArray<Evidence.EvidenceRecord>,
      admissions?: ReadonlyArray<PendingAdmission>
    ) =>
      Effect.flatMap(admitAll(digest, records), (admitted) =>
        admitted.length === 0
          ? Effect.succeed<ReadonlyArray<AppendReceipt>>([])
          : submit(admitted, admissions))
    const sha256 = digest.sha256TextSync
    const commitNow = submit.now
    type Answer = Either.Either<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError> | undefined
    const admittingNow = sha256 === undefined || commitNow === undefined
      ? undefined
      : (records: ReadonlyArray<Evidence.EvidenceRecord>, admissions?: ReadonlyArray<PendingAdmission>): Answer => {
        const admitted = admitAllNow(sha256, records)
        if (Either.isLeft(admitted)) return Either.left(admitted.left)
        if (admitted.right.length === 0) return Either.right([])
        const placed = commitNow(admitted.right, admissions)
        return placed === undefined ? undefined : EvidenceCommit.eitherOf(placed)
      }
    const admitting: EvidenceStore.AppendAdmitting = admittingNow === undefined
      ? Object.assign(admittingEffect, { ledger: sql })
      : Object.assign(admittingEffect, { ledger: sql, now: admittingNow })
    const plainEffect = (records: ReadonlyArray<Evidence.EvidenceRecord>) =>
      EvidenceCommit.withoutPlaces(admittingEffect(records))
    const carried = submit.carriesPlaces === true ? { admitting } : {}
    const appendAll: EvidenceStore.AppendAll = admittingNow === undefined
      ? Object.assign(plainEffect, carried)
      : Object.assign(plainEffect, {
        ...carried,
        now: Object.assign(
          (records: ReadonlyArray<Evidence.EvidenceRecord>) => EvidenceCommit.withoutPlacesNow(admittingNow(records)),
          { blocking: true }
        )
      })

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
        if (reader !== undefined && sha256 !== undefined) {
          return yield* Effect.try({
            try: () => Evidence.verifyPages(chain_id, pagesOf(reader, chain_id, pageSize), sha256, expected_head),
            catch: readFailed
          })
        }
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
      scanRecords: Effect.fn("SqlEvidenceStore.scanRecords")(function*(after: Cursor | null, limit: number) {
        const from = positionOf(after)
        if (from === undefined) {
          return yield* new EvidenceUnavailableError({ detail: `malformed projection cursor: ${after}` })
        }
        const { last, records } = yield* findRecords({ after: from, limit: Math.max(0, Math.floor(limit)) })
        return { records, next_cursor: last === undefined ? after : Cursor.make(String(last)) }
      }),
      get: Effect.fn("SqlEvidenceStore.get")(function*(chain_id: string, record_id: string) {
        return yield* Effect.mapError(findRecord({ chain_id, record_id }), unavailable)
      })
    }
    return service
  })

/** The SQL EvidenceStore and its EvidenceProjectionSource with these options, over the SqlClient in context. */
export const layerWith = (
  options: Options
): Layer.Layer<EvidenceStore | EvidenceProjectionSource, never, SqlClient.SqlClient | Digest> =>
  Layer.scopedContext(
    Effect.map(make(options), (store) =>
      Context.make(EvidenceStore, store).pipe(Context.add(EvidenceProjectionSource, store)))
  )

/** The SQL EvidenceStore and its EvidenceProjectionSource, over the SqlClient in context. */
export const layer = layerWith({})
