/**
 * The evidence commit thread (a Node worker): its own better-sqlite3 connection to the store's SQLite file, with the
 * store's settings, running the store's commit synchronously on each batch posted to it, so neither the SQLite work
 * of a commit nor its sync holds the main thread. Everything it says goes over the port it was given: ready (with the
 * file it opened) once it can commit, then one reply per batch.
 */
import { Exit } from "effect"
import type { MessagePort } from "node:worker_threads"
import { workerData } from "node:worker_threads"
import { EvidenceUnavailableError } from "../../../core/evidence/EvidenceStore.ts"
import type * as Sqlite from "../Sqlite.ts"
import * as Wire from "./commitWire.ts"
import * as SyncCommit from "./syncCommit.ts"

const { options, port } = workerData as { readonly options: Sqlite.Options; readonly port: MessagePort }

const connection = SyncCommit.open(options)

// A database still locked by another connection after the busy timeout: each append answered unavailable, unwritten.
const locked = Exit.fail(
  new EvidenceUnavailableError({ detail: "the evidence commit failed: the database is locked by another connection" })
)

port.on("message", (request: Wire.Request) => {
  const placed = connection.commit(request.batch) ?? request.batch.map(() => locked)
  port.postMessage({ id: request.id, placed: placed.map(Wire.encode) } satisfies Wire.Reply)
})
port.postMessage({ ready: connection.file } satisfies Wire.Message)
