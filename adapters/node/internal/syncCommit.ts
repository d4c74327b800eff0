/**
 * A better-sqlite3 connection to the evidence store's SQLite file, with the store's settings, running the store's
 * commit synchronously: the commit thread's connection, and the main thread's own for appends made alone.
 */
import { Statement } from "@effect/sql"
import Database from "better-sqlite3"
import { Effect } from "effect"
import type * as Evidence from "../../../core/evidence/Evidence.ts"
import * as EvidenceCommit from "../../sql/internal/evidenceCommit.ts"
import * as Sqlite from "../Sqlite.ts"

/** An open connection committing batches synchronously. */
export interface SyncCommit {
  /** The main database file as SQLite resolved it. */
  readonly file: string
  /** Each append's result, or `undefined` when another connection held the write lock (nothing written). */
  readonly commit: (
    batch: ReadonlyArray<ReadonlyArray<Evidence.EvidenceRecord>>
  ) => ReadonlyArray<EvidenceCommit.Placed> | undefined
  readonly close: () => void
}

// The statements compiled by the SQLite compiler alone: the connection runs them itself, with no SqlClient.
const compiler = Statement.make(
  Effect.dieMessage("a synchronous evidence commit only compiles statements"),
  Statement.makeCompilerSqlite(),
  [],
  undefined
)

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
    return {
      file: databases.find((entry) => entry.name === "main")?.file ?? "",
      commit: EvidenceCommit.makeSync(database, Effect.runSync(EvidenceCommit.compile(compiler))),
      close: () => void database.close()
    }
  } catch (error) {
    database.close()
    throw error
  }
}
