/**
 * The main thread's handle on the evidence commit thread: starts the worker, posts batches and answers each from its
 * reply, and answers everything still in flight as unavailable the moment the thread stops, however it stops.
 */
import type { Effect as Eff } from "effect"
import { Effect, Exit } from "effect"
import { MessageChannel, receiveMessageOnPort, Worker } from "node:worker_threads"
import { EvidenceUnavailableError } from "../../../core/evidence/EvidenceStore.ts"
import type { Pending } from "../../sql/internal/evidenceCommit.ts"
import { settle } from "../../sql/internal/evidenceCommit.ts"
import type * as Sqlite from "../Sqlite.ts"
import * as Wire from "./commitWire.ts"

/** A started commit thread. */
export interface Handle {
  readonly state: () => "starting" | "ready" | "stopped"
  /** Post a batch, answered and then `done`; false if it could not be posted. */
  readonly post: (pendings: ReadonlyArray<Pending>, done: () => void) => boolean
  /** Take the thread's messages already delivered, without waiting for the event loop. */
  readonly drain: () => void
  /** Batches posted and not yet answered. */
  readonly inFlight: () => number
  /** Stop the thread; anything still in flight is answered as unavailable. */
  readonly stop: (detail: string) => Eff.Effect<void>
}

/** What the thread reports: ready, with the database file it opened; stopped, and why. */
export interface Events {
  readonly ready: (file: string) => void
  readonly stopped: (detail: string) => void
}

/**
 * The worker's script beside this module, as built (`.js`) or as run from source (`.ts`, under a loader); read only
 * when a thread starts, since a bundle may have no module URL.
 */
const script = () => new URL(`./commitThread${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url)

/** Start a thread on `options.filename`; it keeps the process alive only while starting or committing. */
export const start = (options: Sqlite.Options, events: Events): Handle => {
  const channel = new MessageChannel()
  const inFlight = new Map<number, { readonly pendings: ReadonlyArray<Pending>; readonly done: () => void }>()
  let state: "starting" | "ready" | "stopped" = "starting"
  let next = 0
  const worker = new Worker(script(), {
    workerData: {
      options: { filename: options.filename, synchronous: options.synchronous ?? "FULL" },
      port: channel.port2
    },
    transferList: [channel.port2]
  })
  // Held while starting or committing: a thread that exits then must still be heard, so no append goes unanswered.
  const hold = () => {
    const held = state === "starting" || inFlight.size > 0
    for (const handle of [worker, channel.port1]) {
      if (held) handle.ref()
      else handle.unref()
    }
  }
  const stopped = (detail: string) => {
    if (state === "stopped") return
    state = "stopped"
    const error = Exit.fail(new EvidenceUnavailableError({ detail }))
    const batches = [...inFlight.values()]
    inFlight.clear()
    hold()
    for (const batch of batches) {
      settle(batch.pendings, batch.pendings.map(() => error))
      batch.done()
    }
    events.stopped(detail)
  }
  const receive = (message: Wire.Message) => {
    if ("ready" in message) {
      if (state !== "starting") return
      state = "ready"
      hold()
      return events.ready(message.ready)
    }
    const batch = inFlight.get(message.id)
    if (batch === undefined) return
    inFlight.delete(message.id)
    hold()
    settle(batch.pendings, message.placed.map(Wire.decode))
    batch.done()
  }
  channel.port1.on("message", receive)
  channel.port1.on("close", () => stopped("the evidence commit thread closed its port"))
  worker.on("error", (error) => stopped(`the evidence commit thread failed: ${error.message}`))
  worker.on("exit", (code) => stopped(`the evidence commit thread exited (code ${code})`))
  return {
    state: () => state,
    post: (pendings, done) => {
      const id = next++
      try {
        const batch = pendings.map(({ admissions, records }) =>
          admissions === undefined ? { records } : { records, admissions }
        )
        channel.port1.postMessage({ id, batch } satisfies Wire.Request)
      } catch {
        return false
      }
      inFlight.set(id, { pendings, done })
      hold()
      return true
    },
    drain: () => {
      if (state === "stopped") return
      for (let m = receiveMessageOnPort(channel.port1); m !== undefined; m = receiveMessageOnPort(channel.port1)) {
        receive(m.message)
      }
    },
    inFlight: () => inFlight.size,
    stop: (detail) =>
      Effect.suspend(() => {
        stopped(detail)
        return Effect.promise(() => worker.terminate())
      }).pipe(Effect.ensuring(Effect.sync(() => channel.port1.close())))
  }
}
