import { assert, describe, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Schema } from "effect"
import * as Action from "../../core/action/Action.ts"
import * as Time from "../../core/base/Time.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import { executor, run } from "../fixtures/layers.ts"
import * as VirtualClock from "../fixtures/virtualClock.ts"

const REQUESTS = Number(process.env.LOAD_N ?? 10_000)
const PERMITS = 8

let inFlight = 0
let peak = 0
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

// One request: executed, and executed again at each retry_at it is told, until it runs.
const request = (n: number) =>
  Effect.gen(function*() {
    for (let attempt = 1; attempt <= 100; attempt++) {
      const outcome = yield* run("work", { n }, { request_id: `r${n}-${attempt}` })
      if (outcome._tag === "succeeded") return { result: outcome.result, attempt }
      if (outcome._tag !== "deferred" || outcome.retry_at === undefined) {
        return yield* Effect.dieMessage(`request ${n}: ${outcome._tag} without a time to retry at`)
      }
      const wait = Time.toMicros(outcome.retry_at) - (yield* Clock.currentTimeMillis) * 1000
      yield* Effect.sleep(Duration.micros(BigInt(Math.max(0, Math.ceil(wait)))))
    }
    return yield* Effect.dieMessage(`request ${n} never ran`)
  })

// Time is virtual: it moves only to the next sleep due, so a lease lapses only if its call has not ended by then.
describe("capacity under load", () => {
  it.live(`${REQUESTS} concurrent requests against ${PERMITS} permits: at most ${PERMITS} in flight, none lost`, () => {
    const time = VirtualClock.make(1_000_000)
    return Effect.gen(function*() {
      const fibers = yield* Effect.forEach(
        Array.from({ length: REQUESTS }, (_, n) => n),
        (n) => Effect.fork(request(n)),
        { concurrency: "unbounded" }
      )
      yield* time.settle
      while (yield* time.next) {
        // each wake moves the requests due on
      }
      const done = yield* Effect.forEach(fibers, Fiber.join)
      assert.strictEqual(done.length, REQUESTS)
      assert.deepStrictEqual(done.map((d) => d.result), Array.from({ length: REQUESTS }, (_, n) => n))
      assert.isAtMost(peak, PERMITS)
      assert.strictEqual(peak, PERMITS, "the permits were used")
      assert.strictEqual(inFlight, 0)
      // Told distinct retry times, the crowd retries in waves of permits: each request is deferred at most once.
      assert.isAtMost(Math.max(...done.map((d) => d.attempt)), 2)
    }).pipe(
      Effect.provide(executor([work], {
        capacity: [Capacity.bounded({ id: "eight", permits: PERMITS, lease_microseconds: 2_000 })]
      })),
      Effect.withClock(time.clock)
    )
  }, 120_000)
})
