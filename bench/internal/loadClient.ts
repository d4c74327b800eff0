/**
 * The capacity load test's client, shared by writ's side and its floor: 10,000 concurrent requests, each retried at
 * the `retry_at` it is told until it runs (and at once when its lease stopped it), in a process of its own so its peak
 * RSS is its own; prints one JSON line with the requests, the most in flight, the most attempts one request took, the
 * calls stopped at their lease, the seconds taken, the heap after a collection while most requests wait, the heap's
 * limit, and the process's peak RSS.
 *
 * A deferral holds nothing in writ but the retry time it promised, so what a waiting request costs is the client's.
 * Here a waiting request is its number in the list of the millisecond it is due (a fiber and a timer of its own cost
 * about 9 KB each, 90 MB for 10,000): one scheduler fiber wakes at the earliest time due and starts an attempt fiber
 * per request due, which lives only until it is answered.
 */
import type { Layer } from "effect"
import { Clock, Duration, Effect, FiberSet } from "effect"
import * as v8 from "node:v8"

/** How one attempt ended: it ran, it was stopped at its lease, or it is to retry at a time in milliseconds. */
export type Answer = "succeeded" | "stopped" | { readonly retry_at_millis: number } | { readonly failed: string }

/** What the load drives: one attempt of request `n`, its `tried`th. */
export type Attempt<R> = (n: number, tried: number) => Effect.Effect<Answer, never, R>

/** The permits every side admits at once. */
export const PERMITS = 8
/** Each lease's term, in microseconds. */
export const LEASE_MICROSECONDS = 20_000

const MAX_ATTEMPTS = 10_000

/** Calls the action's handler is in, and the most at once: the handler's bracket counts them. */
export const inFlight = { now: 0, peak: 0 }

/** The action's handler: a millisecond's work, counted in flight. */
export const work = (n: number) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      inFlight.peak = Math.max(inFlight.peak, ++inFlight.now)
    }),
    () => Effect.as(Effect.sleep(Duration.millis(1)), n),
    () => Effect.sync(() => void inFlight.now--)
  )

/** Numbers, the least first: push and pop in O(log n). */
class MinHeap {
  private readonly items: Array<number> = []
  get size() {
    return this.items.length
  }
  peek() {
    return this.items[0]!
  }
  push(value: number) {
    const items = this.items
    let at = items.push(value) - 1
    while (at > 0) {
      const parent = (at - 1) >> 1
      if (items[parent]! <= value) break
      items[at] = items[parent]!
      at = parent
    }
    items[at] = value
  }
  pop() {
    const items = this.items
    const least = items[0]!
    const last = items.pop()!
    if (items.length === 0) return least
    let at = 0
    for (;;) {
      const left = 2 * at + 1
      if (left >= items.length) break
      const child = left + 1 < items.length && items[left + 1]! < items[left]! ? left + 1 : left
      if (items[child]! >= last) break
      items[at] = items[child]!
      at = child
    }
    items[at] = last
    return least
  }
}

/** The requests to run: the process's first all-digit argument, else 10,000. */
export const requested = (): number => Number(process.argv.find((arg) => /^\d+$/.test(arg)) ?? 10_000)

/** Runs `requests` requests through `attempt` until each succeeded, then prints the summary line. */
export const run = async <R>(requests: number, attempt: Attempt<R>, layer: Layer.Layer<R, unknown>) => {
  // The waiting requests: by the millisecond they are due, their numbers, and those milliseconds in a min-heap; the
  // attempts each has made.
  const waiting = new Map<number, Array<number>>()
  const dueTimes = new MinHeap()
  const attempts = new Uint16Array(requests)
  let succeeded = 0
  let stopped = 0
  let failure: string | undefined
  let heapWaiting = 0

  const wait = (n: number, dueMillis: number) => {
    if (!Number.isFinite(dueMillis)) return void (failure ??= `request ${n}: told to retry at ${dueMillis}`)
    const due = waiting.get(dueMillis)
    if (due !== undefined) return void due.push(n)
    waiting.set(dueMillis, [n])
    dueTimes.push(dueMillis)
  }

  // One attempt: answered once; deferred, it waits for its `retry_at`; stopped at its lease, it is due again at once
  // (a loaded machine can hold a call past its lease on the real clock).
  const once = Effect.fnUntraced(function*(n: number) {
    const tried = ++attempts[n]!
    if (tried > MAX_ATTEMPTS) return void (failure ??= `request ${n} never ran`)
    const answer = yield* attempt(n, tried)
    if (answer === "succeeded") return void succeeded++
    if (answer === "stopped") {
      stopped++
      return wait(n, yield* Clock.currentTimeMillis)
    }
    if ("failed" in answer) return void (failure ??= `request ${n}: ${answer.failed}`)
    wait(n, answer.retry_at_millis)
  })

  // The scheduler: starts the requests due (the heap names their milliseconds, so a wake-up reads no other), then
  // sleeps until the earliest due (at most a few ms, as an attempt running may make an earlier one), until every
  // request has succeeded.
  const load = Effect.gen(function*() {
    const running = yield* FiberSet.make()
    const start = yield* Clock.currentTimeMillis
    for (let n = 0; n < requests; n++) wait(n, start)
    let measured = false
    while (succeeded < requests && failure === undefined) {
      const now = yield* Clock.currentTimeMillis
      while (dueTimes.size > 0 && dueTimes.peek() <= now) {
        const due = dueTimes.pop()
        const ns = waiting.get(due)!
        waiting.delete(due)
        for (const n of ns) yield* FiberSet.run(running, once(n))
      }
      const next = dueTimes.size > 0 ? Math.min(dueTimes.peek(), now + 5) : now + 5
      // Once the first wave has been answered and most requests wait: the live heap they hold.
      if (!measured && now - start >= 2_000 && globalThis.gc !== undefined) {
        measured = true
        globalThis.gc()
        heapWaiting = process.memoryUsage().heapUsed
      }
      yield* Effect.sleep(Duration.millis(Math.max(0, next - (yield* Clock.currentTimeMillis))))
    }
    if (failure !== undefined) return yield* Effect.dieMessage(failure)
  })

  const started = performance.now()
  await Effect.runPromise(Effect.provide(Effect.scoped(load), layer))
  process.stdout.write(
    JSON.stringify({
      requests: succeeded,
      peak_in_flight: inFlight.peak,
      max_attempts: Math.max(...attempts),
      stopped_at_lease: stopped,
      seconds: (performance.now() - started) / 1000,
      heap_waiting_bytes: heapWaiting,
      heap_limit_bytes: v8.getHeapStatistics().heap_size_limit,
      max_rss_bytes: process.resourceUsage().maxRSS * 1024
    }) + "\n"
  )
}
