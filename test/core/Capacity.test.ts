import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Either, Fiber, Schema, TestClock } from "effect"
import * as Action from "../../core/action/Action.ts"
import { PrincipalRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import { executor, run } from "../fixtures/layers.ts"

const admission = (name: string, principal = "alice") =>
  ({
    request: { action: { name } },
    context: { authenticated_principal: { id: principal } },
    descriptor: { name }
  }) as unknown as Capacity.Admission

describe("Capacity.bounded", () => {
  it.effect("leases up to its permits per key, defers past them, and a lease released twice frees one permit", () =>
    Effect.gen(function*() {
      const capacity = Capacity.bounded({
        id: "per-principal",
        permits: 2,
        key: (a) => a.context.authenticated_principal.id,
        applies: (a) => a.descriptor.name !== "free.read"
      })
      const first = yield* capacity.admit(admission("notes.write"))
      const second = yield* capacity.admit(admission("notes.write"))
      const third = yield* capacity.admit(admission("notes.write"))
      assert.isTrue(Either.isRight(first) && Either.isRight(second))
      assert.deepStrictEqual(Either.isLeft(third) ? third.left.code : "", "capacity.unavailable")
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("notes.write", "bob"))), "another key")
      assert.isFalse(capacity.applies?.(admission("free.read")) ?? true, "an action it does not bound")
      if (Either.isRight(first)) {
        yield* first.right.release
        yield* first.right.release
      }
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("notes.write"))))
      assert.isTrue(Either.isLeft(yield* capacity.admit(admission("notes.write"))), "released twice frees one")
    }))
})

describe("capacity admission in the executor", () => {
  const actions = [
    Action.make({ name: "notes.write", input: Schema.Struct({}), output: Schema.String, handler: () => "ok" })
  ]
  it.effect("a capacity whose admission dies denies the call and releases the leases taken before it", () =>
    Effect.gen(function*() {
      const first = yield* run("notes.write", {}, { request_id: "boom" })
      assert.strictEqual(
        first._tag === "denied" && first.reason.code,
        "control.capacity_error",
        "the second capacity's key throws for this request"
      )
      assert.strictEqual((yield* run("notes.write", {}, { request_id: "fine" }))._tag, "succeeded")
    }).pipe(Effect.provide(executor(actions, {
      capacity: [
        Capacity.bounded({ id: "one", permits: 1 }),
        Capacity.bounded({
          id: "keyed",
          permits: 5,
          key: (a) => {
            if (a.request.request_id === "boom") throw new Error("bad key")
            return "k"
          }
        })
      ]
    }))))
})

describe("a capacity's applies in the executor", () => {
  const admitted: Array<string> = []
  const counting = (id: string, applies: (admission: Capacity.Admission) => boolean): Capacity.Capacity => ({
    id,
    applies,
    admit: () => Effect.sync(() => (admitted.push(id), Either.right({ release: Effect.void })))
  })
  const actions = ["notes.write", "notes.read"].map((name) =>
    Action.make({ name, input: Schema.Struct({}), output: Schema.String, handler: () => "ok" })
  )

  it.effect("a call it does not bound never reaches its admit; one whose applies throws is denied before it runs", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* run("notes.read", {}))._tag, "succeeded")
      assert.deepStrictEqual(admitted, [], "no capacity bounds notes.read")
      assert.strictEqual((yield* run("notes.write", {}))._tag, "succeeded")
      assert.deepStrictEqual(admitted, ["writes"])
      const thrown = yield* run("notes.write", {}, { request_id: "boom" })
      assert.strictEqual(thrown._tag === "denied" && thrown.reason.code, "control.capacity_error")
      assert.include(thrown._tag === "denied" ? thrown.reason.detail : "", "picky")
      assert.deepStrictEqual(admitted, ["writes"], "nothing admitted for the refused call")
    }).pipe(Effect.provide(executor(actions, {
      capacity: [
        counting("writes", (a) => a.descriptor.name === "notes.write"),
        counting("picky", (a) => {
          if (a.request.request_id === "boom") throw new Error("bad predicate")
          return false
        })
      ]
    }))))
})

const tenantAdmission = (name: string, tenant?: string) =>
  ({
    request: { action: { name } },
    context: { authenticated_principal: { id: "alice" }, ...(tenant === undefined ? {} : { tenant: { id: tenant } }) },
    descriptor: { name }
  }) as unknown as Capacity.Admission

const leaseOf = (answer: Either.Either<Capacity.Lease, Capacity.Deferral>) => Either.getOrThrow(answer)
const retryOf = (answer: Either.Either<Capacity.Lease, Capacity.Deferral>) =>
  Either.isLeft(answer) && answer.left.retry_at !== undefined ? Time.toMicros(answer.left.retry_at) : undefined

describe("leases and retry times", () => {
  it.effect("each lease has its own id and an expiry a lease term away; a deferral is told the earliest expiry", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(1_000)
      const capacity = Capacity.bounded({ id: "two", permits: 2, lease_microseconds: 5_000_000 })
      const first = leaseOf(yield* capacity.admit(admission("a")))
      yield* TestClock.adjust(Duration.millis(1))
      const second = leaseOf(yield* capacity.admit(admission("a")))
      assert.notStrictEqual(first.lease_id, second.lease_id)
      assert.strictEqual(Time.toMicros(first.expires_at!), 1_000_000 + 5_000_000)
      assert.strictEqual(Time.toMicros(second.expires_at!), 1_001_000 + 5_000_000)
      const deferred = yield* capacity.admit(admission("a"))
      assert.strictEqual(Either.isLeft(deferred) && deferred.left.code, "capacity.unavailable")
      // The earliest expiry, then the next one, then a lease term after each: a crowd retries in waves of permits.
      const told = [
        retryOf(deferred),
        ...(yield* Effect.replicateEffect(capacity.admit(admission("a")), 3)).map(retryOf)
      ]
      assert.deepStrictEqual(told.map((at) => at! - 1_000_000 - 1_000), [5_000_000, 5_001_000, 10_000_000, 10_001_000])
      yield* first.release
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("a"))), "a released permit is free at once")
    }))

  it.effect("a rate admits its burst, then defers each call to the next token no other deferral was told", () =>
    Effect.gen(function*() {
      const capacity = Capacity.rate({ id: "rate", burst: 2, refill_microseconds: 1_000, per: ["action"] })
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("a"))))
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("a"))))
      const third = yield* capacity.admit(admission("a"))
      assert.strictEqual(Either.isLeft(third) && third.left.code, "capacity.rate_limited")
      assert.deepStrictEqual([retryOf(third), retryOf(yield* capacity.admit(admission("a")))], [1_000, 2_000])
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("b"))), "another action has its own bucket")
      yield* TestClock.adjust(Duration.millis(1))
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("a"))), "a token came back")
      assert.isTrue(Either.isLeft(yield* capacity.admit(admission("a"))))
    }))

  it.effect("`per` partitions by tenant, principal and action; a tenant named like a joined key is its own", () =>
    Effect.gen(function*() {
      const capacity = Capacity.bounded({ id: "per", permits: 1, per: ["tenant", "action"] })
      assert.isTrue(Either.isRight(yield* capacity.admit(tenantAdmission("a", "t1"))))
      assert.isTrue(Either.isLeft(yield* capacity.admit(tenantAdmission("a", "t1"))))
      assert.isTrue(Either.isRight(yield* capacity.admit(tenantAdmission("a", "t2"))))
      assert.isTrue(Either.isRight(yield* capacity.admit(tenantAdmission("b", "t1"))))
      assert.isTrue(Either.isRight(yield* capacity.admit(tenantAdmission("a"))), "no tenant")
      assert.isTrue(Either.isRight(yield* capacity.admit(tenantAdmission("a\",\"a", "t1"))), "no separator to forge")
    }))

  it("refuses limits that are not positive integers", () => {
    assert.throws(() => Capacity.bounded({ id: "zero", permits: 0 }), /permits must be a positive integer/)
    assert.throws(() => Capacity.rate({ id: "r", burst: 1, refill_microseconds: 0.5 }), /refill_microseconds/)
  })
})

describe("a lease's expiry in the executor", () => {
  let stopped = 0
  const slow = Action.make({
    name: "slow",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () =>
      Effect.onInterrupt(Effect.as(Effect.sleep(Duration.seconds(30)), "done"), () =>
        Effect.sync(() => {
          stopped++
        }))
  })
  it.live("stops a call still running when its lease expires, and frees its permit only once it has stopped", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const outcome = yield* run("slow", {})
      assert.strictEqual(outcome._tag, "timed_out")
      assert.isTrue(outcome._tag === "timed_out" && outcome.call_executed)
      assert.strictEqual(stopped, 1, "the callable was interrupted, and had stopped when the outcome came")
      assert.isBelow(Date.now() - started, 10_000, "stopped at the lease's expiry, not the handler's 30 s")
      const next = yield* Effect.fork(run("slow", {}))
      yield* Effect.sleep(Duration.millis(20))
      assert.strictEqual((yield* Fiber.join(next))._tag, "timed_out", "the permit was free again")
    }).pipe(Effect.provide(executor([slow], {
      capacity: [Capacity.bounded({ id: "one", permits: 1, lease_microseconds: 100_000 })]
    }))))
})

describe("a lease outlives a call whose teardown overruns", () => {
  // Its interruption waits for the test's signal: the executor stops waiting after its teardown bound, the call goes on.
  const state = { stopped: 0, runs: 0, release: undefined as Deferred.Deferred<void> | undefined }
  const stubborn = Action.make({
    name: "stubborn",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () =>
      Effect.suspend(() => {
        state.runs++
        return Effect.onInterrupt(Effect.as(Effect.never, "done"), () =>
          Effect.zipRight(
            state.release === undefined ? Effect.void : Deferred.await(state.release),
            Effect.sync(() => void state.stopped++)
          ))
      })
  })
  it.live(
    "its permit stays held until the call has stopped, however long past the lease's expiry",
    () =>
      Effect.gen(function*() {
        state.release = yield* Deferred.make<void>()
        const first = yield* run("stubborn", {})
        assert.strictEqual(first._tag, "timed_out")
        assert.strictEqual(first._tag === "timed_out" ? first.teardown : undefined, "abandoned")
        assert.strictEqual(state.stopped, 0, "the call has not stopped")
        const second = yield* run("stubborn", {})
        assert.strictEqual(second._tag, "deferred", "its permit is still held")
        assert.strictEqual(second._tag === "deferred" ? second.reason.code : "", "capacity.unavailable")
        assert.isDefined(second._tag === "deferred" ? second.retry_at : undefined)
        assert.strictEqual(state.runs, 1)
        yield* Deferred.succeed(state.release, undefined)
        state.release = undefined
        // Once it has stopped, its permit is freed (on the executor's own fiber, so possibly a moment later).
        let third = yield* run("stubborn", {})
        for (let i = 0; i < 200 && third._tag === "deferred"; i++) {
          yield* Effect.sleep(Duration.millis(10))
          third = yield* run("stubborn", {})
        }
        assert.strictEqual(state.stopped, 2, "the first call stopped, then the third")
        assert.strictEqual(third._tag, "timed_out")
        assert.strictEqual(third._tag === "timed_out" ? third.teardown : undefined, "completed")
        assert.strictEqual(state.runs, 2)
      }).pipe(Effect.provide(executor([stubborn], {
        teardown: Duration.millis(50),
        capacity: [Capacity.bounded({ id: "one", permits: 1, lease_microseconds: 100_000 })]
      }))),
    30_000
  )
})

describe("a rate in the executor", () => {
  let ran = 0
  const ping = Action.make({
    name: "ping",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () => (ran++, "pong")
  })
  it.effect("defers a principal's call past its burst with retry_at its next token; another principal's runs", () =>
    Effect.gen(function*() {
      const bob = { authenticated_principal: PrincipalRef.make({ id: "bob" }) }
      assert.strictEqual((yield* run("ping", {}))._tag, "succeeded")
      const deferred = yield* run("ping", {})
      assert.strictEqual(deferred._tag, "deferred")
      if (deferred._tag !== "deferred") return
      assert.strictEqual(deferred.reason.code, "capacity.rate_limited")
      assert.strictEqual(deferred.stage, "bind_context")
      assert.strictEqual(Time.toMicros(deferred.retry_at!), 1_000_000, "the next token")
      assert.strictEqual((yield* run("ping", {}, {}, bob))._tag, "succeeded", "bob has his own bucket")
      assert.strictEqual(ran, 2)
      yield* TestClock.setTime(1_000)
      assert.strictEqual((yield* run("ping", {}))._tag, "succeeded", "retried at retry_at, it runs")
      assert.strictEqual(ran, 3)
    }).pipe(Effect.provide(executor([ping], {
      capacity: [Capacity.rate({ id: "per-principal", burst: 1, refill_microseconds: 1_000_000, per: ["principal"] })]
    }))))
})
