/**
 * The group commit of the SQL EvidenceStore: one transaction per batch of admitted appends (a lone record is one
 * statement), each record inserted by a statement that is its own compare-and-append: it inserts only when the
 * record before it on its chain holds the hash it links to, and the chain's unique (chain, sequence), id and hash
 * refuse a fork or a duplicate. Anything not inserted so undoes the batch, which is then placed record by record in a
 * transaction of its own, each refusal explained (the head it was compared with, a duplicate id or hash). The commit
 * is written once, as a program of statements, and run either through a SqlClient connection or synchronously on a
 * better-sqlite3 connection (the commit thread's).
 */
import { SqlClient } from "@effect/sql"
import type { SqlConnection, Statement as SqlStatement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Either, Exit, Option } from "effect"
import type { ParseError } from "effect/ParseResult"
import type * as Evidence from "../../../core/evidence/Evidence.ts"
import type { AppendReceipt } from "../../../core/evidence/EvidenceStore.ts"
import {
  conflictOf,
  EvidenceConflictError,
  EvidenceUnavailableError,
  receiptOf
} from "../../../core/evidence/EvidenceStore.ts"
import type { PendingAdmission } from "../../../core/policy/BudgetLedger.ts"
import { BudgetSpentError } from "../../../core/policy/BudgetLedger.ts"
import * as AdmissionSql from "./admission.ts"
import { writeTransaction } from "./transaction.ts"

/** One append's result in a commit: its receipts, or why it was not appended. */
export type Placed = Exit.Exit<
  ReadonlyArray<AppendReceipt>,
  EvidenceConflictError | EvidenceUnavailableError | BudgetSpentError
>

/** One append of a commit: its admitted records, and the budget places it takes with them (all of it, or nothing). */
export interface Append {
  readonly records: ReadonlyArray<Evidence.EvidenceRecord>
  readonly admissions?: ReadonlyArray<PendingAdmission> | undefined
}

/** One append waiting for its commit. */
export interface Pending extends Append {
  readonly resume: (result: Placed) => void
}

/** One append's result as an Either (a defect, which no commit answers with, as the store unavailable). */
export const eitherOf = (
  placed: Placed
): Either.Either<ReadonlyArray<AppendReceipt>, EvidenceConflictError | EvidenceUnavailableError | BudgetSpentError> =>
  Exit.isSuccess(placed) ? Either.right(placed.value) : Either.left(
    Option.getOrElse(
      Cause.failureOption(placed.cause),
      () => new EvidenceUnavailableError({ detail: `the evidence commit failed: ${Cause.pretty(placed.cause)}` })
    )
  )

/** An append that carries no budget place, which cannot be refused for one. */
export const withoutPlaces = <A, E>(append: Effect.Effect<A, E>) =>
  append as Effect.Effect<A, Exclude<E, BudgetSpentError>>

/** `withoutPlaces` for an append in the calling step. */
export const withoutPlacesNow = <A, E>(placed: Either.Either<A, E> | undefined) =>
  placed as Either.Either<A, Exclude<E, BudgetSpentError>> | undefined

/** Answer each pending append with its result, in order. */
export const settle = (pendings: ReadonlyArray<Pending>, placed: ReadonlyArray<Placed>) =>
  pendings.forEach((pending, i) => pending.resume(placed[i]!))

/** Commits a batch of admitted appends in one transaction: each append's result, in order; it never fails as a whole. */
export type Commit = (batch: ReadonlyArray<Append>) => Effect.Effect<ReadonlyArray<Placed>>

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

/** A stored record's columns, comma-separated in `StoredRecord` field order: what every read of whole rows selects. */
export const storedColumns = columns.join(", ")

// A record's insert parameters, in the column order of `markers`.
const rowParams = (record: Columns): ReadonlyArray<unknown> => columns.map((column) => record[column])

// The columns the link condition of a compare-and-append names, after the row's own.
const linkColumns = [
  "sequence",
  "previous_chain_hash",
  "chain_id",
  "sequence",
  "previous_chain_hash",
  "chain_id"
] as const

const linkedParams = (
  record: Columns
): ReadonlyArray<unknown> => [...rowParams(record), ...linkColumns.map((column) => record[column])]

const isHeadRow = (row: unknown): row is { sequence: number; chain_hash: string } =>
  typeof row === "object" && row !== null && typeof (row as { sequence?: unknown }).sequence === "number" &&
  typeof (row as { chain_hash?: unknown }).chain_hash === "string"

/** The SQL a commit runs, compiled once for the database's dialect. */
export interface Statements {
  /**
   * A record's compare-and-append: inserted (its position returned) only if it opens an empty chain with no previous
   * hash, or extends the chain's head (the next sequence, linked to the head's hash); it fails on a stored id or hash.
   */
  readonly linked: string
  /** A record's insert that skips (returns no row) when its id or hash is stored. */
  readonly insertOne: string
  /** The stored records with a record's id or hash. */
  readonly duplicates: string
  /** A chain's head. */
  readonly head: string
  /** A budget place's statements (internal/admission.ts), each with the admission fields its parameters name. */
  readonly forget: Parameterised
  readonly admit: Parameterised
  readonly held: Parameterised
}

/** A statement compiled once, and which admission field each parameter takes. */
export interface Parameterised {
  readonly sql: string
  readonly fields: ReadonlyArray<AdmissionField>
}

type AdmissionField = "snapshot_digest" | "rule_id" | "principal" | "window" | "attempt_id" | "limit"

// Each admission field's own name, to compile the admission statements with their parameters named.
const admissionMarker = {
  window: { snapshot_digest: "snapshot_digest", rule_id: "rule_id", principal: "principal", window: "window" },
  attempt_id: "attempt_id",
  limit: "limit"
} as unknown as PendingAdmission

const parameterised = ([sql, params]: readonly [string, ReadonlyArray<unknown>]): Parameterised => ({
  sql,
  fields: params as ReadonlyArray<AdmissionField>
})

const valueOf = (admission: PendingAdmission, field: AdmissionField): unknown =>
  field === "attempt_id" ? admission.attempt_id : field === "limit" ? admission.limit : admission.window[field]

const statementOf = ({ fields, sql }: Parameterised, admission: PendingAdmission): Statement => ({
  sql,
  params: fields.map((field) => valueOf(admission, field))
})

/**
 * The commit's statements, compiled by `sql`'s own compiler (a SqlClient, or a bare SQLite compiler on the commit
 * thread). Dies if the insert's parameters would not follow the column order.
 */
export const compile = (sql: SqlStatement.Constructor): Effect.Effect<Statements> => {
  const [linked, params] = sql`INSERT INTO evidence_records (${sql.literal(columns.join(", "))})
    SELECT ${sql.join(", ", false)(columns.map((column) => sql`${markers[column]}`))}
    WHERE CASE WHEN ${"sequence"} = 0
      THEN ${"previous_chain_hash"} IS NULL AND NOT EXISTS (SELECT 1 FROM evidence_records WHERE chain_id = ${"chain_id"})
      ELSE COALESCE((SELECT sequence = ${"sequence"} - 1 AND chain_hash = ${"previous_chain_hash"} FROM evidence_records
        WHERE chain_id = ${"chain_id"} ORDER BY sequence DESC LIMIT 1), 0) END
    RETURNING position`.compile()
  if (params.some((param, i) => param !== [...columns, ...linkColumns][i])) {
    return Effect.dieMessage("SqlEvidenceStore: the insert statement's parameters are out of order")
  }
  return Effect.succeed({
    linked,
    insertOne: sql`INSERT INTO evidence_records ${sql.insert(markers)} ON CONFLICT DO NOTHING RETURNING position`
      .compile()[0],
    duplicates: sql`SELECT record_id FROM evidence_records WHERE record_id = ${""} OR chain_hash = ${""}`.compile()[0],
    head: sql`SELECT sequence, chain_hash FROM evidence_records WHERE chain_id = ${""}
      ORDER BY sequence DESC LIMIT 1`.compile()[0],
    forget: parameterised(AdmissionSql.forget(sql, "budget_admissions", admissionMarker.window).compile()),
    admit: parameterised(AdmissionSql.insert(sql, admissionMarker).compile()),
    held: parameterised(AdmissionSql.held(sql, admissionMarker.window, admissionMarker.attempt_id).compile())
  })
}

/** One statement of a commit and its parameters; it is answered with the rows it returns (none for a plain write). */
export interface Statement {
  readonly sql: string
  readonly params: ReadonlyArray<unknown>
}

/** A commit's work as statements in order, each answered with its rows. A failing statement ends it, undone. */
export type Program<A> = Generator<Statement, A, ReadonlyArray<unknown>>

type Head = { readonly sequence: number; readonly hash: string }

// A chain's head, read inside the transaction (IMMEDIATE: no other writer can move it until COMMIT).
function* readHead(statements: Statements, chain_id: string): Program<Head | undefined | EvidenceUnavailableError> {
  const [row] = yield { sql: statements.head, params: [chain_id] }
  if (row === undefined) return undefined
  return isHeadRow(row)
    ? { sequence: row.sequence, hash: row.chain_hash }
    : new EvidenceUnavailableError({ detail: "a stored chain head does not decode" })
}

// Why a record was not appended: a duplicate record id or hash first, then the head it was compared against.
function* refuse(statements: Statements, record: Evidence.EvidenceRecord, head: Head | undefined): Program<Placed> {
  const duplicates = yield { sql: statements.duplicates, params: [record.record_id, record.chain_hash] }
  const ids = duplicates.map((row) => (row as { readonly record_id?: unknown }).record_id)
  const duplicate = ids.includes(record.record_id)
    ? "duplicate_record"
    : duplicates.length > 0
    ? "duplicate_hash"
    : undefined
  return Exit.fail(
    conflictOf(record, head, duplicate) ??
      new EvidenceConflictError({ reason: "sequence", chain_id: record.chain_id, record_id: record.record_id })
  )
}

// An append's budget places are taken under a savepoint of their own, so one that finds its window full undoes them
// and the append's records alone, and the other appends of the batch commit.
const savepoint = { sql: "SAVEPOINT writ_append", params: [] }
const undo = { sql: "ROLLBACK TO writ_append", params: [] }
const release = { sql: "RELEASE writ_append", params: [] }

// Take each place in turn (the count checked in the insert): undefined once all are held, else the first refused.
function* takePlaces(
  statements: Statements,
  admissions: ReadonlyArray<PendingAdmission>
): Program<BudgetSpentError | undefined> {
  for (const [index, admission] of admissions.entries()) {
    yield statementOf(statements.forget, admission)
    yield statementOf(statements.admit, admission)
    const [row] = yield statementOf(statements.held, admission)
    const { admitted, count } = AdmissionSql.admissionOf(row)
    if (!admitted) return new BudgetSpentError({ reason: "spent", index, count })
  }
  return undefined
}

// An append's places taken under its savepoint: undefined once they are, else its refusal with the savepoint undone.
function* openedWith(
  append: Append,
  take: (admissions: ReadonlyArray<PendingAdmission>) => Program<BudgetSpentError | undefined>
): Program<Placed | undefined> {
  const admissions = append.admissions
  if (admissions === undefined || admissions.length === 0) return undefined
  yield savepoint
  const spent = yield* take(admissions)
  if (spent === undefined) return undefined
  yield undo
  yield release
  return Exit.fail(spent)
}

const carries = (append: Append) => append.admissions !== undefined && append.admissions.length > 0

/**
 * The batch in one transaction, each record by its compare-and-append: its receipts, or `undefined` once one is not
 * inserted (the transaction must then be undone, and the batch placed record by record). An append whose budget place
 * is taken is refused whole, and the rest go on.
 */
export function* placeBatch(
  statements: Statements,
  batch: ReadonlyArray<Append>
): Program<ReadonlyArray<Placed> | undefined> {
  const placed: Array<Placed> = []
  for (const append of batch) {
    const refused = yield* openedWith(append, (admissions) => takePlaces(statements, admissions))
    if (refused !== undefined) {
      placed.push(refused)
      continue
    }
    for (const record of append.records) {
      if ((yield { sql: statements.linked, params: linkedParams(record) }).length !== 1) return undefined
    }
    if (carries(append)) yield release
    placed.push(Exit.succeed(append.records.map(receiptOf)))
  }
  return placed
}

/**
 * The batch record by record, in one transaction: each record compared with its chain's head, then inserted unless
 * its id or hash is already stored; an append that carries budget places is placed whole or not at all. A head that
 * does not decode fails the whole transaction, undone.
 */
export function* placeEach(
  statements: Statements,
  batch: ReadonlyArray<Append>
): Program<ReadonlyArray<Placed> | EvidenceUnavailableError> {
  const placed: Array<Placed> = []
  appends: for (const append of batch) {
    const refused = yield* openedWith(append, (admissions) => takePlaces(statements, admissions))
    if (refused !== undefined) {
      placed.push(refused)
      continue
    }
    const receipts: Array<AppendReceipt> = []
    for (const record of append.records) {
      const head = yield* readHead(statements, record.chain_id)
      if (head instanceof EvidenceUnavailableError) return head
      const inserted = conflictOf(record, head, undefined) === undefined &&
        (yield { sql: statements.insertOne, params: rowParams(record) }).length === 1
      if (!inserted) {
        placed.push(yield* refuse(statements, record, head))
        if (carries(append)) {
          yield undo
          yield release
        }
        continue appends
      }
      receipts.push(receiptOf(record))
    }
    if (carries(append)) yield release
    placed.push(Exit.succeed(receipts))
  }
  return placed
}

// A program run on a SqlClient connection, each statement prepared once by the client and answered in turn.
const runOn = <A>(connection: SqlConnection.Connection, program: Program<A>): Effect.Effect<A, SqlError> => {
  const step = (next: IteratorResult<Statement, A>): Effect.Effect<A, SqlError> =>
    next.done === true
      ? Effect.succeed(next.value)
      : Effect.flatMap(connection.execute(next.value.sql, next.value.params, undefined), (rows) =>
        step(program.next(rows)))
  return Effect.suspend(() => step(program.next()))
}

// A batch of one record: its one statement is its own transaction, with nothing to undo if it inserts nothing.
const isLone = (batch: ReadonlyArray<Append>) =>
  batch.length === 1 && batch[0]!.records.length === 1 && !carries(batch[0]!)

const unlinked = { _tag: "Unlinked" } as const

/** The commit over the SqlClient in context: a batch's transaction, or record by record when it fails. */
export const make: Effect.Effect<Commit, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const statements = yield* compile(sql)
  const transaction = writeTransaction(sql)
  // The connection of the transaction in progress, if any, else one reserved for the statement.
  const onConnection = <A, E>(body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>) =>
    Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (outer) =>
      Option.isSome(outer)
        ? body(outer.value[0])
        : Effect.scoped(Effect.flatMap(sql.reserve, body)))
  // Each path's program on a connection, failing (so its transaction is undone) unless it placed every append.
  const linkedOn = (batch: ReadonlyArray<Append>) => (connection: SqlConnection.Connection) =>
    Effect.flatMap(
      runOn(connection, placeBatch(statements, batch)),
      (placed) => placed === undefined ? Effect.fail(unlinked) : Effect.succeed(placed)
    )
  const eachOn = (batch: ReadonlyArray<Append>) => (connection: SqlConnection.Connection) =>
    Effect.flatMap(
      runOn(connection, placeEach(statements, batch)),
      (placed) => placed instanceof EvidenceUnavailableError ? Effect.fail(placed) : Effect.succeed(placed)
    )
  return (batch) => {
    const linked = linkedOn(batch)
    return (isLone(batch) ? onConnection(linked) : transaction(linked)).pipe(
      Effect.orElse(() => transaction(eachOn(batch))),
      Effect.mapError((error) => error._tag === "EvidenceUnavailableError" ? error : unavailable(error)),
      Effect.exit,
      Effect.map((exit): ReadonlyArray<Placed> =>
        Exit.isSuccess(exit) ? exit.value : batch.map(() => Exit.failCause(exit.cause))
      )
    )
  }
})

/** The little of a better-sqlite3 connection the synchronous commit uses. */
export interface SyncDatabase {
  readonly inTransaction: boolean
  readonly exec: (sql: string) => unknown
  readonly prepare: (sql: string) => {
    readonly reader: boolean
    readonly all: (...params: ReadonlyArray<unknown>) => Array<unknown>
    readonly run: (...params: ReadonlyArray<unknown>) => unknown
  }
}

// SQLite's answer that another connection holds the write lock: the statement or transaction wrote nothing.
const isBusy = (error: unknown) => {
  const code = typeof error === "object" && error !== null ? (error as { readonly code?: unknown }).code : undefined
  return typeof code === "string" && code.startsWith("SQLITE_BUSY")
}

/**
 * The same commit run synchronously on a better-sqlite3 connection (SQLite: `BEGIN IMMEDIATE`), each statement
 * prepared once, with no effect runtime between its statements: each append's result, or `undefined` when another
 * connection held the write lock past the connection's busy timeout (then nothing was written).
 */
export const makeSync = (database: SyncDatabase, statements: Statements) => {
  const prepared = new Map<string, ReturnType<SyncDatabase["prepare"]>>()
  const run = ({ params, sql }: Statement): ReadonlyArray<unknown> => {
    let statement = prepared.get(sql)
    if (statement === undefined) prepared.set(sql, statement = database.prepare(sql))
    if (statement.reader) return statement.all(...params)
    statement.run(...params)
    return []
  }
  const runAll = <A>(program: Program<A>): A => {
    let next = program.next()
    while (next.done !== true) next = program.next(run(next.value))
    return next.value
  }
  // A program in one transaction, committed only when it placed every append (an array of results); else undone.
  const transaction = (
    program: Program<ReadonlyArray<Placed> | EvidenceUnavailableError | undefined>
  ): ReadonlyArray<Placed> => {
    database.exec("BEGIN IMMEDIATE")
    try {
      const result = runAll(program)
      if (result === undefined || result instanceof EvidenceUnavailableError) throw result ?? unlinked
      database.exec("COMMIT")
      return result
    } catch (error) {
      // SQLite may have rolled back already (an I/O error, a full disk): nothing more to undo then.
      try {
        database.exec("ROLLBACK")
      } catch {
        // no transaction left open
      }
      throw error
    }
  }
  return (batch: ReadonlyArray<Append>): ReadonlyArray<Placed> | undefined => {
    try {
      // A transaction somehow still open is undone first: nothing this commit places may join it.
      if (database.inTransaction) database.exec("ROLLBACK")
      const placed = isLone(batch) ? runAll(placeBatch(statements, batch)) : transaction(placeBatch(statements, batch))
      if (placed !== undefined) return placed
    } catch (error) {
      if (isBusy(error)) return undefined
      // otherwise placed record by record below
    }
    try {
      return transaction(placeEach(statements, batch))
    } catch (error) {
      if (isBusy(error)) return undefined
      const failed = Exit.fail(
        error instanceof EvidenceUnavailableError
          ? error
          : new EvidenceUnavailableError({ detail: `the evidence commit failed: ${error}` })
      )
      return batch.map(() => failed)
    }
  }
}
