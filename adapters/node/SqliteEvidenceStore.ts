/**
 * The SQL EvidenceStore over a SQLite file on Node, its overlapping appends committed on a worker thread with its own
 * connection to the file, so the event loop keeps running while a batch is written and synced. Runtimes: Node.
 */
import { Effect } from "effect"
import * as SqlEvidenceStore from "../sql/SqlEvidenceStore.ts"
import * as CommitDispatch from "./internal/commitDispatch.ts"
import * as Sqlite from "./Sqlite.ts"

/** When the commit thread starts, and the file it opens. */
export type ThreadOptions = CommitDispatch.ThreadOptions

/** The store's appends dispatched to the commit thread once they overlap (never for an in-memory database). */
export const dispatchCommitThread = (options: ThreadOptions): SqlEvidenceStore.Dispatch => (commit, maxBatch) =>
  Effect.flatMap(
    Effect.orElseSucceed(Sqlite.databaseFile, () => ""),
    (file) => CommitDispatch.threaded(commit, maxBatch, options, file)
  )

/** The SQL EvidenceStore over a SQLite file, its overlapping appends committed on a worker thread. */
export const layerCommitThread = (options: ThreadOptions) =>
  SqlEvidenceStore.layerWith({ dispatch: dispatchCommitThread(options) })
