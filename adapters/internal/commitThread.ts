/**
 * The evidence commit thread (a Node worker): its own connection to the store's SQLite file, running the store's
 * commit on each batch posted to it, so neither the SQLite work of a commit nor its sync holds the main thread.
 * Everything it says goes over the port it was given: ready (with the file it opened) once it can commit, then one
 * reply per batch.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect, Layer, ManagedRuntime } from "effect"
import type { MessagePort } from "node:worker_threads"
import { workerData } from "node:worker_threads"
import * as Sqlite from "../Sqlite.ts"
import * as Wire from "./commitWire.ts"
import * as EvidenceCommit from "./evidenceCommit.ts"

const { options, port } = workerData as { readonly options: Sqlite.Options; readonly port: MessagePort }

const runtime = ManagedRuntime.make(
  Layer.effectDiscard(Sqlite.configure(options.synchronous)).pipe(
    Layer.provideMerge(SqliteClient.layer({ filename: options.filename })),
    Layer.orDie
  )
)

void runtime.runPromise(Effect.zip(EvidenceCommit.make, Sqlite.databaseFile)).then(([commit, file]) => {
  port.on("message", (request: Wire.Request) => {
    void runtime.runPromiseExit(commit(request.batch)).then((exit) => {
      const placed = EvidenceCommit.answered(request.batch, exit).map(Wire.encode)
      port.postMessage({ id: request.id, placed } satisfies Wire.Reply)
    })
  })
  port.postMessage({ ready: file } satisfies Wire.Message)
})
