import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import * as ChainLock from "../../core/evidence/internal/chainLock.ts"

describe("the evidence writer's chain lock", () => {
  it.effect("one holder at a time, the waiters served in arrival order", () =>
    Effect.gen(function*() {
      const lock = ChainLock.make()
      const order: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const first = yield* Effect.fork(
        ChainLock.withLock(lock, Effect.zipRight(Deferred.await(gate), Effect.sync(() => order.push("a"))))
      )
      yield* Effect.yieldNow()
      const rest = yield* Effect.forEach(["b", "c", "d"], (name) =>
        Effect.fork(ChainLock.withLock(lock, Effect.sync(() => order.push(name)))))
      yield* Effect.yieldNow()
      assert.deepStrictEqual(order, [])
      assert.strictEqual(lock.waiters.length, 3)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Effect.forEach(rest, Fiber.join)
      assert.deepStrictEqual(order, ["a", "b", "c", "d"])
      assert.isFalse(lock.held)
    }))

  it.effect("a holder that fails releases the lock, and its failure hook runs while it still holds it", () =>
    Effect.gen(function*() {
      const lock = ChainLock.make()
      const seen: Array<boolean> = []
      const failed = yield* Effect.exit(ChainLock.withLock(lock, Effect.fail("boom"), () => seen.push(lock.held)))
      assert.isTrue(Exit.isFailure(failed))
      assert.deepStrictEqual(seen, [true])
      assert.isFalse(lock.held)
      assert.strictEqual(yield* ChainLock.withLock(lock, Effect.succeed(7)), 7)
    }))

  it.effect("an interrupted waiter leaves the line; a holder is not interrupted and the next waiter still gets the lock", () =>
    Effect.gen(function*() {
      const lock = ChainLock.make()
      const gate = yield* Deferred.make<void>()
      const ran: Array<string> = []
      const holder = yield* Effect.fork(
        ChainLock.withLock(lock, Effect.zipRight(Deferred.await(gate), Effect.sync(() => ran.push("holder"))))
      )
      yield* Effect.yieldNow()
      const quitter = yield* Effect.fork(ChainLock.withLock(lock, Effect.sync(() => ran.push("quitter"))))
      const next = yield* Effect.fork(ChainLock.withLock(lock, Effect.sync(() => ran.push("next"))))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(quitter)
      assert.strictEqual(lock.waiters.length, 1)
      // Interrupting the holder waits for its body, which runs to its end.
      const stopping = yield* Effect.fork(Fiber.interrupt(holder))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(stopping)
      yield* Fiber.join(next)
      assert.deepStrictEqual(ran, ["holder", "next"])
      assert.isFalse(lock.held)
    }))

  it.effect("a waiter interrupted just as the lock is handed to it passes it on: the next waiter is never stranded", () =>
    Effect.gen(function*() {
      for (let round = 0; round < 20; round++) {
        const lock = ChainLock.make()
        const gate = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(ChainLock.withLock(lock, Deferred.await(gate)))
        yield* Effect.yieldNow()
        const quitter = yield* Effect.fork(ChainLock.withLock(lock, Effect.void))
        const next = yield* Effect.fork(ChainLock.withLock(lock, Effect.succeed("next")))
        yield* Effect.yieldNow()
        // The holder releases (handing the lock to the quitter) and the quitter is interrupted in the same step.
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.interruptFork(quitter)
        yield* Fiber.join(holder)
        assert.strictEqual(yield* Fiber.join(next), "next")
        assert.isFalse(lock.held)
        assert.strictEqual(lock.waiters.length, 0)
      }
    }))

  it.effect("a failure hook that throws still releases the lock", () =>
    Effect.gen(function*() {
      const lock = ChainLock.make()
      yield* Effect.exit(ChainLock.withLock(lock, Effect.fail("boom"), () => {
        throw new Error("hook")
      }))
      assert.isFalse(lock.held)
      assert.strictEqual(yield* ChainLock.withLock(lock, Effect.succeed("next")), "next")
    }))
})
