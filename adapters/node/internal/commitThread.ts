/**
 * The evidence commit thread (a Node worker): its own better-sqlite3 connection to the store's SQLite file, with the
 * store's settings, running the store's commit synchronously on each batch posted to it, so neither the SQLite work
 * of a commit nor its sync holds the main thread. Everything it says goes over the port it was given: ready (with the
 * file it opened) once it can commit, then one reply per batch.
 */
import { Statement } from "@effect/sql"
import { Effect } from "effect"
import { createRequire } from "node:module"
import type { MessagePort } from "node:worker_threads"
import { workerData } from "node:worker_threads"
import * as EvidenceCommit from "../../sql/internal/evidenceCommit.ts"
import * as Sqlite from "../Sqlite.ts"
import * as Wire from "./commitWire.ts"

// better-sqlite3 has no bundled types; this is the little of it the thread uses.
interface Database extends EvidenceCommit.SyncDatabase {
  readonly pragma: (source: string) => unknown
}
const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

const { options, port } = workerData as { readonly options: Sqlite.Options; readonly port: MessagePort }

const database = new Database(options.filename)
database.pragma("journal_mode = WAL")
for (const pragma of Sqlite.pragmas(options.synchronous)) database.pragma(pragma)

// The statements compiled by the SQLite compiler alone: this thread runs them itself, with no SqlClient.
const compiler = Statement.make(
  Effect.dieMessage("the evidence commit thread only compiles statements"),
  Statement.makeCompilerSqlite(),
  [],
  undefined
)
const commit = EvidenceCommit.makeSync(database, Effect.runSync(EvidenceCommit.compile(compiler)))
const databases = database.pragma("database_list") as ReadonlyArray<{ readonly name: string; readonly file: string }>

port.on("message", (request: Wire.Request) => {
  port.postMessage({ id: request.id, placed: commit(request.batch).map(Wire.encode) } satisfies Wire.Reply)
})
port.postMessage({ ready: databases.find((entry) => entry.name === "main")?.file ?? "" } satisfies Wire.Message)
