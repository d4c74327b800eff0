/**
 * Every NonceStore (memory, SQL over a SQLite file) claims a nonce once per scope, atomically under concurrent claims,
 * and forgets it once its retention has passed; the SQL store also deletes expired nonces from its table. Two
 * processes claiming on one file are in test/runtime/EdgeWorkers.test.ts.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import * as MemoryNonceStore from "../../adapters/memory/MemoryNonceStore.ts"
import * as SqlNonceStore from "../../adapters/sql/SqlNonceStore.ts"
import { NonceStore } from "../../core/base/NonceStore.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"

const layers = [
  ["memory", MemoryNonceStore.layer],
  ["sql", SqlNonceStore.layer({ purgeEvery: 1 }).pipe(Layer.provideMerge(sqliteLayer({ synchronous: "NORMAL" })))]
] as const

for (const [name, layer] of layers) {
  describe(`NonceStore (${name})`, () => {
    it.effect("claims a nonce once per scope: a second claim is a replay, another scope's is not", () =>
      Effect.gen(function*() {
        const store = yield* NonceStore
        assert.isTrue(yield* store.claim("agent-1", "nonce-a", 10_000))
        assert.isFalse(yield* store.claim("agent-1", "nonce-a", 10_000))
        assert.isFalse(yield* store.claim("agent-1", "nonce-a", 99_000), "a longer retention does not refresh it")
        assert.isTrue(yield* store.claim("agent-2", "nonce-a", 10_000))
        assert.isTrue(yield* store.claim("agent-1", "nonce-b", 10_000))
      }).pipe(Effect.provide(layer)))

    it.effect("of concurrent claims of one nonce exactly one succeeds", () =>
      Effect.gen(function*() {
        const store = yield* NonceStore
        const claimed = yield* Effect.all(
          Array.from({ length: 50 }, () => store.claim("agent-1", "contested", 10_000)),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(claimed.filter((fresh) => fresh).length, 1)
      }).pipe(Effect.provide(layer)))

    it.effect("a nonce is kept until its retention, and claimable again only after it", () =>
      Effect.gen(function*() {
        const store = yield* NonceStore
        assert.isTrue(yield* store.claim("agent-1", "n", 10_000))
        yield* TestClock.setTime(10_000)
        assert.isFalse(yield* store.claim("agent-1", "n", 20_000), "still kept at its retention instant")
        yield* TestClock.setTime(10_001)
        assert.isTrue(yield* store.claim("agent-1", "n", 20_000))
        assert.isFalse(yield* store.claim("agent-1", "n", 20_000))
      }).pipe(Effect.provide(layer)))
  })
}

describe("SqlNonceStore purge", () => {
  const count = Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT count(*) AS n FROM nonces`)

  it.effect("expired nonces are deleted from the table as claims go on; live ones stay", () =>
    Effect.gen(function*() {
      const store = yield* NonceStore
      for (let i = 0; i < 5; i++) assert.isTrue(yield* store.claim("agent-1", `old-${i}`, 1_000))
      assert.isTrue(yield* store.claim("agent-1", "live", 60_000))
      assert.strictEqual((yield* count)[0]!.n, 6)
      yield* TestClock.setTime(2_000)
      assert.isTrue(yield* store.claim("agent-1", "new", 60_000))
      assert.strictEqual((yield* count)[0]!.n, 2, "the five expired nonces were purged")
      assert.isFalse(yield* store.claim("agent-1", "live", 60_000))
    }).pipe(Effect.provide(layers[1][1])))

  it.effect("purge deletes what expired even when claims are too few to trigger it", () =>
    Effect.gen(function*() {
      const store = yield* SqlNonceStore.make({ purgeEvery: 1_000 })
      assert.isTrue(yield* store.claim("agent-1", "a", 1_000))
      assert.isTrue(yield* store.claim("agent-1", "b", 5_000))
      yield* TestClock.setTime(3_000)
      assert.isTrue(yield* store.claim("agent-1", "c", 5_000))
      assert.strictEqual((yield* count)[0]!.n, 3)
      yield* store.purge
      assert.strictEqual((yield* count)[0]!.n, 2)
    }).pipe(Effect.provide(sqliteLayer({ synchronous: "NORMAL" }))))

  it.effect("a purge interval that is not a positive integer is refused", () =>
    Effect.gen(function*() {
      const made = yield* Effect.exit(SqlNonceStore.make({ purgeEvery: 0 }))
      assert.isTrue(made._tag === "Failure")
    }).pipe(Effect.provide(sqliteLayer({ synchronous: "NORMAL" }))))
})
