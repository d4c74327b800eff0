/**
 * The capacity load test as a process of its own, so its peak RSS is its own: 10,000 concurrent requests against 8
 * permits (20 ms leases) on the real clock, each retried at the `retry_at` it is told until it runs (and at once when
 * its lease stopped it); prints one JSON line with the requests, the most in flight, the most attempts one request
 * took, the calls stopped at their lease, the seconds taken and the process's peak RSS.
 */
import { Clock, Duration, Effect, Layer, Schema } from "effect"
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

const request = (n: number) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    for (let attempt = 1; attempt <= 10_000; attempt++) {
      const { context, request } = yield* Ingress.prepare(
        { action: "work", arguments: { n }, request_id: `r${n}-${attempt}` },
        { principal: "load", effect_backend: InProcessBackend.make.ref }
      )
      const outcome = yield* executor.execute(request, { context })
      if (outcome._tag === "succeeded") return attempt
      // On the real clock a loaded machine can hold a call past its lease, which stops it: it is tried again.
      if (outcome._tag === "timed_out") {
        stopped++
        continue
      }
      if (outcome._tag !== "deferred" || outcome.retry_at === undefined) {
        return yield* Effect.dieMessage(`request ${n}: ${outcome._tag} without a time to retry at`)
      }
      const wait = Time.toMicros(outcome.retry_at) - (yield* Clock.currentTimeMillis) * 1000
      yield* Effect.sleep(Duration.micros(BigInt(Math.max(0, Math.ceil(wait)))))
    }
    return yield* Effect.dieMessage(`request ${n} never ran`)
  })

const started = performance.now()
const attempts = await Effect.runPromise(
  Effect.forEach(Array.from({ length: REQUESTS }, (_, n) => n), request, { concurrency: "unbounded" }).pipe(
    Effect.provide(layer)
  )
)
process.stdout.write(
  JSON.stringify({
    requests: attempts.length,
    peak_in_flight: peak,
    max_attempts: Math.max(...attempts),
    stopped_at_lease: stopped,
    seconds: (performance.now() - started) / 1000,
    max_rss_bytes: process.resourceUsage().maxRSS * 1024
  }) + "\n"
)
