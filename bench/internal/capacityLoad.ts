/**
 * The capacity load test as a process of its own, so its peak RSS is its own: 10,000 concurrent requests against 8
 * permits (20 ms leases) on the real clock, each retried at the `retry_at` it is told until it runs (and at once when
 * its lease stopped it); prints one JSON line with the requests, the most in flight, the most attempts one request
 * took, the calls stopped at their lease, the seconds taken, the heap after a collection while most requests wait,
 * and the process's peak RSS.
 *
 * A deferral holds nothing in writ but the retry time it promised, so what a waiting request costs is the client's.
 * Here a waiting request is its number in the list of the millisecond it is due (a fiber and a timer of its own cost
 * about 9 KB each, 90 MB for 10,000): one scheduler fiber wakes at the earliest time due and starts an attempt fiber
 * per request due, which lives only until writ answers it.
 */
import { Clock, Duration, Effect, FiberSet, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import * as Ingress from "../../core/execution/Ingress.ts"

const REQUESTS = Number(process.argv[2] ?? 10_000)
const PERMITS = 8
const MAX_ATTEMPTS = 10_000

let inFlight = 0
let peak = 0
let stopped = 0
const work = Action.make({
  name: "work",
  input: Schema.Struct({ n: Schema.Number }),
  output: Schema.Number,
  handler: ({ n }) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        peak = Math.max(peak, ++inFlight)
      }),
      () => Effect.as(Effect.sleep(Duration.millis(1)), n),
      () => Effect.sync(() => void inFlight--)
    )
})

const layer = ActionExecutor.layerMinimal({
  capacity: [Capacity.bounded({ id: "eight", permits: PERMITS, lease_microseconds: 20_000 })]
}).pipe(
  Layer.provideMerge(
    ActionRegistry.layerWith([work]).pipe(
      Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)),
      Layer.merge(InProcessBackend.layer)
    )
  )
)

// The waiting requests: by the millisecond they are due, their numbers; the attempts each has made.
const waiting = new Map<number, Array<number>>()
const attempts = new Uint16Array(REQUESTS)
let succeeded = 0
let failure: string | undefined
let heapWaiting = 0

const wait = (n: number, dueMillis: number) => {
  const due = waiting.get(dueMillis)
  if (due === undefined) waiting.set(dueMillis, [n])
  else due.push(n)
}

// One attempt of request `n`: executed once; deferred, it waits for its `retry_at`; stopped at its lease, it is due
// again at once (a loaded machine can hold a call past its lease on the real clock).
const attempt = (executor: ActionExecutor.ActionExecutor.Service, n: number) =>
  Effect.gen(function*() {
    const tried = ++attempts[n]!
    if (tried > MAX_ATTEMPTS) return void (failure ??= `request ${n} never ran`)
    const { context, request } = yield* Ingress.prepare(
      { action: "work", arguments: { n }, request_id: `r${n}-${tried}` },
      { principal: "load", effect_backend: InProcessBackend.make.ref }
    )
    const outcome = yield* executor.execute(request, { context })
    if (outcome._tag === "succeeded") return void succeeded++
    if (outcome._tag === "timed_out") {
      stopped++
      return wait(n, yield* Clock.currentTimeMillis)
    }
    if (outcome._tag !== "deferred" || outcome.retry_at === undefined) {
      return void (failure ??= `request ${n}: ${outcome._tag} without a time to retry at`)
    }
    wait(n, Math.ceil(Time.toMicros(outcome.retry_at) / 1000))
  })

// The scheduler: starts every request due, then sleeps until the earliest due (at most a few ms, as an attempt
// running may make an earlier one), until every request has succeeded.
const load = Effect.gen(function*() {
  const executor = yield* ActionExecutor.ActionExecutor
  const running = yield* FiberSet.make()
  const start = yield* Clock.currentTimeMillis
  for (let n = 0; n < REQUESTS; n++) wait(n, start)
  let measured = false
  while (succeeded < REQUESTS && failure === undefined) {
    const now = yield* Clock.currentTimeMillis
    let next = now + 5
    for (const [due, requests] of waiting) {
      if (due > now) {
        next = Math.min(next, due)
        continue
      }
      waiting.delete(due)
      for (const n of requests) yield* FiberSet.run(running, attempt(executor, n))
    }
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
await Effect.runPromise(Effect.scoped(load).pipe(Effect.provide(layer)))
process.stdout.write(
  JSON.stringify({
    requests: succeeded,
    peak_in_flight: peak,
    max_attempts: Math.max(...attempts),
    stopped_at_lease: stopped,
    seconds: (performance.now() - started) / 1000,
    heap_waiting_bytes: heapWaiting,
    max_rss_bytes: process.resourceUsage().maxRSS * 1024
  }) + "\n"
)
