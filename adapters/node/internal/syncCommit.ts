/**
 * A better-sqlite3 connection to the evidence store's SQLite file, with the store's settings, committing and reading
 * synchronously: the commit thread's connection, and the main thread's own for appends made alone and for reads.
 */
import { Statement } from "@effect/sql"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as EvidenceCommit from "../../sql/internal/evidenceCommit.ts"
import * as Sqlite from "../Sqlite.ts"

/** An open connection committing batches and reading pages synchronously. */
export interface SyncCommit {
  /** The main database file as SQLite resolved it. */
  readonly file: string
  /** Each append's result, or `undefined` when another connection held the write lock (nothing written). */
  readonly commit: (batch: ReadonlyArray<EvidenceCommit.Append>) => ReadonlyArray<EvidenceCommit.Placed> | undefined
  /** A chain's rows after a sequence, in order, as values in `StoredRecord` field order; throws on a failed read. */
  readonly readPage: (chain_id: string, after: number, limit: number) => ReadonlyArray<ReadonlyArray<unknown>>
  readonly close: () => void
}

// The statements compiled by the SQLite compiler alone: the connection runs them itself, with no SqlClient.
const compiler = Statement.make(
  Effect.dieMessage("a synchronous evidence commit only compiles statements"),
  Statement.makeCompilerSqlite(),
  [],
  undefined
)

const PAGE = `SELECT ${EvidenceCommit.storedColumns} FROM evidence_records WHERE chain_id = ? AND sequence > ?
  ORDER BY sequence LIMIT ?`

/** Open `options.filename` with the store's settings; `busyTimeout` (ms) replaces the settings' wait for a lock. */
export const open = (options: Sqlite.Options, busyTimeout?: number): SyncCommit => {
  const database = new Database(options.filename)
  try {
    database.pragma("journal_mode = WAL")
    for (const pragma of Sqlite.pragmas(options.synchronous)) database.pragma(pragma)
    if (busyTimeout !== undefined) database.pragma(`busy_timeout = ${Math.max(0, Math.floor(busyTimeout))}`)
    const databases = database.pragma("database_list") as ReadonlyArray<
      { readonly name: string; readonly file: string }
    >
    let page: ReturnType<typeof database.prepare> | undefined
    return {
      file: databases.find((entry) => entry.name === "main")?.file ?? "",
      commit: EvidenceCommit.makeSync(database, Effect.runSync(EvidenceCommit.compile(compiler))),
      readPage: (chain_id, after, limit) =>
        (page ??= database.prepare(PAGE).raw(true)).all(chain_id, after, limit) as Array<ReadonlyArray<unknown>>,
      close: () => void database.close()
    }
  } catch (error) {
    database.close()
    throw error
  }
}

/** `open`, on the condition that it opens the store's own file `storeFile`; else why it could not. */
export const openOn = (options: Sqlite.Options, storeFile: string, busyTimeout?: number): SyncCommit | Error => {
  try {
    const direct = open(options, busyTimeout)
    if (direct.file === storeFile) return direct
    direct.close()
    return new Error(`the direct connection opened ${direct.file}, not the store's ${storeFile}`)
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error))
  }
}
