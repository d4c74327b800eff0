/**
 * The SQL EvidenceStore over a SQLite file on Node: its overlapping appends committed on a worker thread with its own
 * connection to the file, so the event loop keeps running while a batch is written and synced; an append made alone
 * committed, and chains read and verified, synchronously on a main-thread connection of its own. Runtimes: Node.
 */
import { Effect } from "effect"
import * as SqlEvidenceStore from "../sql/SqlEvidenceStore.ts"
import * as CommitDispatch from "./internal/commitDispatch.ts"
import * as SyncCommit from "./internal/syncCommit.ts"
import * as Sqlite from "./Sqlite.ts"

/** When the commit thread starts, and the file it opens. */
export type ThreadOptions = CommitDispatch.ThreadOptions

const storeFile = Effect.orElseSucceed(Sqlite.databaseFile, () => "")

/** The store's appends dispatched to the commit thread once they overlap (never for an in-memory database). */
export const dispatchCommitThread = (options: ThreadOptions): SqlEvidenceStore.Dispatch => (commit, maxBatch) =>
  Effect.flatMap(storeFile, (file) => CommitDispatch.threaded(commit, maxBatch, options, file))

/** A synchronous page reader on a connection of its own to the store's file (none for an in-memory database). */
export const readerOn = (options: Sqlite.Options) =>
  Effect.flatMap(storeFile, (file) => {
    if (file === "") return Effect.succeed(undefined)
    return Effect.flatMap(
      Effect.acquireRelease(
        Effect.sync(() => SyncCommit.openOn(options, file)),
        (direct) => Effect.sync(() => direct instanceof Error ? undefined : direct.close())
      ),
      (direct) =>
        direct instanceof Error
          ? Effect.as(Effect.logWarning(`evidence is read through the SqlClient: ${direct.message}`), undefined)
          : Effect.succeed(direct.readPage)
    )
  })

/** The SQL EvidenceStore over a SQLite file, its overlapping appends committed on a worker thread. */
export const layerCommitThread = (options: ThreadOptions) =>
  SqlEvidenceStore.layerWith({ dispatch: dispatchCommitThread(options), reader: readerOn(options) })
