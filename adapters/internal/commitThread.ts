/**
 * The evidence commit thread (a Node worker): its own connection to the store's SQLite file, running the store's
 * commit on each batch posted to it, so neither the SQLite work of a commit nor its sync holds the main thread.
 * Everything it says goes over the port it was given: `ready` once it can commit, then one reply per batch.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Cause, Exit, Layer, ManagedRuntime } from "effect"
import type { MessagePort } from "node:worker_threads"
import { workerData } from "node:worker_threads"
import { EvidenceUnavailableError } from "../../core/EvidenceStore.ts"
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

void runtime.runPromise(EvidenceCommit.make).then((commit) => {
  port.on("message", (request: Wire.Request) => {
    void runtime.runPromiseExit(commit(request.batch)).then((exit) => {
      const placed = Exit.isSuccess(exit)
        ? exit.value.map(Wire.encode)
        : request.batch.map(() =>
          Wire.encode(Exit.fail(
            new EvidenceUnavailableError({ detail: `the evidence commit thread failed: ${Cause.pretty(exit.cause)}` })
          ))
        )
      port.postMessage({ id: request.id, placed } satisfies Wire.Reply)
    })
  })
  port.postMessage("ready" satisfies Wire.Message)
})
