/**
 * How the SQL EvidenceStore hands admitted appends to its commit, and answers each only after its transaction has
 * committed. `queued`: one writer fiber commits everything pending at once, on the store's own connection.
 * `threaded` (Node, a SQLite file): a lone append commits at once on the store's connection; appends that arrive
 * while a commit runs wait and are committed together by a worker thread with its own connection, so the event loop
 * keeps running (and the next batch forms) while a batch is written and synced.
 */
import type { Scope } from "effect"
import { Chunk, Effect, Exit, Queue, Runtime } from "effect"
import { MessageChannel, receiveMessageOnPort, Worker } from "node:worker_threads"
import type * as Evidence from "../../core/Evidence.ts"
import type { AppendError, AppendReceipt } from "../../core/EvidenceStore.ts"
import { EvidenceUnavailableError } from "../../core/EvidenceStore.ts"
import type * as Sqlite from "../Sqlite.ts"
import * as Wire from "./commitWire.ts"
import type * as EvidenceCommit from "./evidenceCommit.ts"

/** Commit one append's admitted records: its receipts once committed. */
export type Submit = (
  records: ReadonlyArray<Evidence.EvidenceRecord>
) => Effect.Effect<ReadonlyArray<AppendReceipt>, AppendError>

interface Pending {
  readonly records: ReadonlyArray<Evidence.EvidenceRecord>
  readonly resume: (result: EvidenceCommit.Placed) => void
}

const closedError = new EvidenceUnavailableError({ detail: "the evidence store was closed" })

const settle = (pendings: ReadonlyArray<Pending>, placed: ReadonlyArray<EvidenceCommit.Placed>) =>
  pendings.forEach((pending, i) => pending.resume(placed[i]!))

/** Everything pending committed in one transaction by a writer fiber; only waiting is interruptible. */
export const queued = (commit: EvidenceCommit.Commit, maxBatch: number): Effect.Effect<Submit, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<Pending>()
    let closed = false
    // Registered before the writer is forked, so it runs after the writer has finished its batch and stopped.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closed = true
        for (const pending of yield* Queue.takeAll(queue)) pending.resume(Exit.fail(closedError))
        yield* Queue.shutdown(queue)
      })
    )
    yield* Effect.uninterruptibleMask((restore) =>
      restore(Queue.take(queue)).pipe(
        Effect.flatMap((first) => Effect.map(Queue.takeUpTo(queue, maxBatch - 1), Chunk.prepend(first))),
        Effect.flatMap((batch) => {
          const pendings = Chunk.toReadonlyArray(batch)
          return Effect.map(commit(pendings.map((pending) => pending.records)), (placed) => settle(pendings, placed))
        })
      )
    ).pipe(Effect.forever, Effect.forkScoped)
    return (records) =>
      Effect.async((resume) => {
        if (closed || !queue.unsafeOffer({ records, resume })) resume(Exit.fail(closedError))
      })
  })

/**
 * The worker's script beside this module, as built (`.js`) or as run from source (`.ts`, under a loader); read only
 * when a thread starts, since a bundle may have no module URL.
 */
const threadScript = () => new URL(`./commitThread${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url)

interface Thread {
  state: "starting" | "ready" | "stopped"
  /** Post a batch, answered with `done` after its pendings; false if it could not be posted. */
  readonly post: (pendings: ReadonlyArray<Pending>, done: () => void) => boolean
  readonly drain: () => void
  readonly stop: Effect.Effect<void>
}

/**
 * A worker thread on `options.filename`, started now and ready once it says so; `changed` hears it become ready or
 * stop. It keeps the process alive only while starting or committing.
 */
const startThread = (options: Sqlite.Options, changed: (stopped?: string) => void): Thread => {
  const channel = new MessageChannel()
  const inFlight = new Map<number, { readonly pendings: ReadonlyArray<Pending>; readonly done: () => void }>()
  let next = 0
  const worker = new Worker(threadScript(), {
    workerData: {
      options: { filename: options.filename, synchronous: options.synchronous ?? "FULL" },
      port: channel.port2
    },
    transferList: [channel.port2]
  })
  worker.unref()
  const answer = (reply: Wire.Message) => {
    if (reply === "ready") {
      if (thread.state !== "starting") return
      thread.state = "ready"
      if (inFlight.size === 0) channel.port1.unref()
      return changed()
    }
    const batch = inFlight.get(reply.id)
    inFlight.delete(reply.id)
    if (inFlight.size === 0) channel.port1.unref()
    if (batch !== undefined) {
      settle(batch.pendings, reply.placed.map(Wire.decode))
      batch.done()
    }
  }
  const stopped = (detail: string) => {
    if (thread.state === "stopped") return
    thread.state = "stopped"
    const error = Exit.fail(new EvidenceUnavailableError({ detail }))
    for (const [, batch] of inFlight) {
      settle(batch.pendings, batch.pendings.map(() => error))
      batch.done()
    }
    inFlight.clear()
    changed(detail)
  }
  channel.port1.on("message", answer)
  worker.on("error", (error) => stopped(`the evidence commit thread failed: ${error.message}`))
  worker.on("exit", () => stopped("the evidence commit thread stopped"))
  const thread: Thread = {
    state: "starting",
    post: (pendings, done) => {
      const id = next++
      try {
        channel.port1.postMessage({ id, batch: pendings.map((pending) => pending.records) } satisfies Wire.Request)
      } catch {
        return false
      }
      inFlight.set(id, { pendings, done })
      channel.port1.ref()
      return true
    },
    // Messages already delivered, taken now: one left for the event loop would delay the next batch, or, while the
    // commits are inline and never yield to it, the thread's readiness.
    drain: () => {
      for (let m = receiveMessageOnPort(channel.port1); m !== undefined; m = receiveMessageOnPort(channel.port1)) {
        answer(m.message)
      }
    },
    stop: Effect.suspend(() => {
      thread.state = "stopped"
      return Effect.promise(() => worker.terminate())
    }).pipe(Effect.ensuring(Effect.sync(() => channel.port1.close())))
  }
  return thread
}

// Single-append batches in a row after which appends stop overlapping: commits go back to the main thread.
const LONE_BATCHES = 4

/** Where the commit thread opens the store's file, and when it starts. */
export interface ThreadOptions extends Sqlite.Options {
  /** `overlap` (default): the first time appends overlap; `now`: before the store is used, which waits for it. */
  readonly start?: "overlap" | "now"
}

/**
 * Appends committed one batch at a time. While they come one at a time, each is committed on the store's connection
 * (after a turn of the scheduler, for any appends made alongside it to join). Once a batch holds several, the commit
 * thread is started if it is not yet, and, from when it is ready until appends come singly again, every batch is
 * posted to it as soon as the previous one is answered: the next batch forms while one is written and synced. The
 * thread runs until the scope closes; if it cannot start or stops, commits stay on the main thread (a batch it held
 * when it stopped is answered unavailable: committed or not, as after a crash, which recovery closes).
 */
export const threaded = (
  commit: EvidenceCommit.Commit,
  maxBatch: number,
  options: ThreadOptions
): Effect.Effect<Submit, never, Scope.Scope> =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    let waiting: Array<Pending> = []
    let busy = false
    let closed = false
    let overlapping = false
    let lone = 0
    let thread: Thread | undefined
    let threadless = false
    const idle: Array<() => void> = []
    const starting: Array<() => void> = []

    const changed = (stopped?: string) => {
      if (stopped !== undefined && !closed) {
        runFork(Effect.logWarning(`evidence commits stay on the main thread: ${stopped}`))
      }
      starting.splice(0).forEach((notify) => notify())
    }
    const start = () => {
      if (thread !== undefined || threadless || closed) return
      try {
        thread = startThread(options, changed)
      } catch (error) {
        threadless = true
        changed(`the evidence commit thread could not start: ${error}`)
      }
    }
    const onThread = () => overlapping && thread?.state === "ready"

    const settled = () => {
      busy = false
      if (waiting.length > 0) flush()
      else idle.splice(0).forEach((notify) => notify())
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
      if (onThread() && thread!.post(pendings, settled)) return
      runFork(Effect.uninterruptible(commit(pendings.map((pending) => pending.records)))).addObserver((exit) => {
        settle(pendings, Exit.isSuccess(exit) ? exit.value : pendings.map(() => Exit.failCause(exit.cause)))
        settled()
      })
    }

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closed = true
        if (busy) yield* Effect.async<void>((resume) => void idle.push(() => resume(Effect.void)))
        if (thread !== undefined && thread.state !== "stopped") yield* thread.stop
      })
    )
    if (options.start === "now") {
      start()
      if (thread?.state === "starting") {
        yield* Effect.async<void>((resume) => void starting.push(() => resume(Effect.void)))
      }
    }

    return (records) =>
      Effect.suspend(() => {
        if (closed) return Exit.fail(closedError)
        thread?.drain()
        return Effect.async<ReadonlyArray<AppendReceipt>, AppendError>((resume) => {
          waiting.push({ records, resume })
          if (busy) return
          busy = true
          if (onThread()) flush()
          else runFork(Effect.zipRight(Effect.yieldNow(), Effect.sync(flush)))
        })
      })
  })
