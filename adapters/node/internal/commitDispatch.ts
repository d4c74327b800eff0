/**
 * `threaded` (Node, a SQLite file): appends that come one at a time commit on the store's connection; once they
 * overlap, batches go to a worker thread with its own connection, so the event loop keeps running (and the next
 * batch forms) while a batch is written and synced.
 */
import type { Context, Scope } from "effect"
import { Effect, Exit, Runtime } from "effect"
import type * as Evidence from "../../../core/evidence/Evidence.ts"
import type { AppendError, AppendReceipt } from "../../../core/evidence/EvidenceStore.ts"
import type { BudgetSpentError, PendingAdmission } from "../../../core/policy/BudgetLedger.ts"
import { closedError, commitInline, type Submit } from "../../sql/internal/commitQueue.ts"
import * as EvidenceCommit from "../../sql/internal/evidenceCommit.ts"
import type { Append, Pending } from "../../sql/internal/evidenceCommit.ts"
import type * as Sqlite from "../Sqlite.ts"
import * as CommitThread from "./commitThreadHandle.ts"
import * as SyncCommit from "./syncCommit.ts"

/** When the commit thread starts, and the file the store's own connection has open. */
export interface ThreadOptions extends Sqlite.Options {
  /** `overlap` (default): the first time appends overlap; `now`: before the store is used, which waits for it. */
  readonly start?: "overlap" | "now"
}

// Single-append batches in a row after which appends no longer overlap: commits go back to the main thread.
const LONE_BATCHES = 4

/**
 * Appends committed one batch at a time. While they come one at a time, each is committed on the store's connection
 * by the appending fiber itself, after a turn of the scheduler for any appends made alongside it to join. Once a batch holds several, the commit
 * thread is started if it is not yet, and, from when it is ready until appends come singly again, every batch is
 * posted to it as soon as the previous one is answered. `storeFile` is the file the store's connection has open: a
 * thread is never started for an in-memory or temporary database (`""`), and one that opened another file is
 * stopped. If the thread cannot start or stops, commits stay on the main thread; a batch it held when it stopped is
 * answered unavailable (committed or not, as after a crash, which recovery closes).
 */
export const threaded = (
  commit: EvidenceCommit.Commit,
  maxBatch: number,
  options: ThreadOptions,
  storeFile: string
): Effect.Effect<Submit, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    let waiting: Array<Pending> = []
    let busy = false
    let closed = false
    let overlapping = false
    let lone = 0
    let onThread = false
    let thread: CommitThread.Handle | undefined
    let threadless = storeFile === ""
    const idle: Array<() => void> = []
    const starting: Array<() => void> = []
    const notify = (waiters: Array<() => void>) => waiters.splice(0).forEach((wake) => wake())

    const start = () => {
      if (thread !== undefined || threadless || closed) return
      try {
        thread = CommitThread.start(options, {
          ready: (file) => {
            if (file !== storeFile) {
              threadless = true
              runFork(thread!.stop(`the evidence commit thread opened ${file}, not the store's ${storeFile}`))
            }
            notify(starting)
          },
          stopped: (detail) => {
            if (!closed) runFork(Effect.logWarning(`evidence commits stay on the main thread: ${detail}`))
            notify(starting)
          }
        })
      } catch (error) {
        threadless = true
        runFork(Effect.logWarning(`evidence commits stay on the main thread: the thread could not start: ${error}`))
      }
    }

    // Where a batch goes, with a debug line whenever that changes.
    const route = (toThread: boolean) => {
      if (toThread === onThread) return
      onThread = toThread
      runFork(Effect.logDebug(`evidence commits run on the ${toThread ? "commit" : "main"} thread`))
    }

    const settled = () => {
      busy = false
      if (waiting.length > 0) flush()
      else if (thread === undefined || thread.inFlight() === 0) notify(idle)
    }

    const flush = () => {
      busy = true
      const pendings = waiting.slice(0, maxBatch)
      waiting = waiting.slice(maxBatch)
      lone = pendings.length === 1 ? lone + 1 : 0
      if (lone === 0) {
        overlapping = true
        start()
      } else if (lone >= LONE_BATCHES) {
        overlapping = false
      }
      const toThread = overlapping && thread?.state() === "ready" && thread.post(pendings, settled)
      route(toThread)
      if (!toThread) runFork(Effect.uninterruptible(commitInline(commit, pendings))).addObserver(settled)
    }

    const direct = storeFile === "" ? undefined : SyncCommit.openOn(options, storeFile, 0)
    if (direct instanceof Error) {
      yield* Effect.logWarning(`evidence appends made alone wait for the effect runtime: ${direct.message}`)
    }
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closed = true
        if (busy) yield* Effect.async<void>((resume) => void idle.push(() => resume(Effect.void)))
        if (thread !== undefined) yield* thread.stop("the evidence store was closed")
        if (direct !== undefined && !(direct instanceof Error)) direct.close()
      })
    )
    if (options.start === "now") {
      start()
      if (thread?.state() === "starting") {
        yield* Effect.async<void>((resume) => void starting.push(() => resume(Effect.void)))
      }
    }

    // An append with nothing committing or waiting leads: after one turn of the scheduler, for appends made alongside
    // it to join, it commits on its own fiber if none did (no fiber forked), in the store's context (never inside a
    // transaction of its caller's); a batch that formed goes the way of every batch, the leader waiting with the others.
    const lead = (append: Append, join: Effect.Effect<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>) =>
      Effect.zipRight(
        Effect.yieldNow(),
        Effect.suspend(() => {
          if (waiting.length > 0) return join
          lone++
          route(false)
          const alone = Effect.mapInputContext(commit([append]), (_: Context.Context<never>) => runtime.context)
          return Effect.flatMap(Effect.exit(alone), (exit) => {
            const [placed] = EvidenceCommit.answered([append], exit)
            settled()
            return placed!
          })
        })
      )

    const submit = (records: ReadonlyArray<Evidence.EvidenceRecord>, admissions?: ReadonlyArray<PendingAdmission>) =>
      Effect.uninterruptibleMask((restore) => {
        thread?.drain()
        const join = restore(Effect.async<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>((resume) => {
          waiting.unshift({ records, admissions, resume })
          flush()
        }))
        if (!closed && !busy && !overlapping && waiting.length === 0) {
          busy = true
          return lead({ records, admissions }, join)
        }
        return restore(Effect.async<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>((resume) => {
          if (closed) return resume(Exit.fail(closedError))
          waiting.push({ records, admissions, resume })
          if (busy) return
          busy = true
          if (overlapping && thread?.state() === "ready") flush()
          else runFork(Effect.zipRight(Effect.yieldNow(), Effect.sync(flush)))
        }))
      })
    // With nothing committing, waiting or overlapping, an append commits in the calling step on the direct
    // connection, unless another connection holds the write lock (then it takes the way above).
    const now = (records: ReadonlyArray<Evidence.EvidenceRecord>, admissions?: ReadonlyArray<PendingAdmission>) => {
      if (closed || busy || overlapping || waiting.length > 0 || (thread?.inFlight() ?? 0) > 0) return undefined
      return (direct as SyncCommit.SyncCommit).commit([{ records, admissions }])?.[0]
    }
    return direct === undefined || direct instanceof Error
      ? Object.assign(submit, { carriesPlaces: true as const })
      : Object.assign(submit, { now, carriesPlaces: true as const })
  })
