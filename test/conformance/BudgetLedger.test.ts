import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import * as path from "node:path"
import * as MemoryBudgetLedger from "../../adapters/memory/MemoryBudgetLedger.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlBudgetLedger from "../../adapters/sql/SqlBudgetLedger.ts"
import type { BudgetWindow } from "../../core/policy/BudgetLedger.ts"
import { BudgetLedger } from "../../core/policy/BudgetLedger.ts"
import { sqliteLayer, tempDir } from "../fixtures/sqlite.ts"

const layers = [
  ["memory", MemoryBudgetLedger.layer],
  ["sql", SqlBudgetLedger.layer.pipe(Layer.provide(sqliteLayer()))]
] as const

const window = (overrides: Partial<BudgetWindow> = {}): BudgetWindow => ({
  snapshot_digest: "d".repeat(64),
  rule_id: "spend",
  principal: "alice",
  window: 7,
  ...overrides
})

for (const [name, layer] of layers) {
  describe(`BudgetLedger conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, BudgetLedger>) => Effect.provide(effect, Layer.fresh(layer))

    it.effect("a calls window gives at most its limit of places, once per attempt", () =>
      provided(Effect.gen(function*() {
        const ledger = yield* BudgetLedger
        const admitted = []
        for (const attempt of ["a", "b", "a", "c", "b"]) admitted.push(yield* ledger.admit(window(), attempt, 2))
        assert.deepStrictEqual(admitted, [
          { admitted: true, count: 1 },
          { admitted: true, count: 2 },
          { admitted: true, count: 2 },
          { admitted: false, count: 2 },
          { admitted: true, count: 2 }
        ])
      })))

    it.effect("a peek says whether admit would give the attempt a place, and takes none", () =>
      provided(Effect.gen(function*() {
        const ledger = yield* BudgetLedger
        assert.deepStrictEqual(yield* ledger.peek(window(), "a", 1), { admitted: true, count: 0 })
        assert.deepStrictEqual(yield* ledger.peek(window(), "b", 1), { admitted: true, count: 0 })
        assert.deepStrictEqual(yield* ledger.admit(window(), "b", 1), { admitted: true, count: 1 })
        assert.deepStrictEqual(yield* ledger.peek(window(), "a", 1), { admitted: false, count: 1 })
        assert.deepStrictEqual(yield* ledger.peek(window(), "b", 1), { admitted: true, count: 1 })
      })))

    it.effect("windows are apart by snapshot, rule, principal and time", () =>
      provided(Effect.gen(function*() {
        const ledger = yield* BudgetLedger
        assert.isTrue((yield* ledger.admit(window(), "a", 1)).admitted)
        assert.isFalse((yield* ledger.admit(window(), "b", 1)).admitted)
        for (
          const other of [
            { snapshot_digest: "e".repeat(64) },
            { rule_id: "other" },
            { principal: "bob" },
            { window: 8 }
          ]
        ) {
          assert.deepStrictEqual(yield* ledger.admit(window(other), "b", 1), { admitted: true, count: 1 })
        }
      })))

    it.effect("charges add up per window; a window never charged has consumed nothing", () =>
      provided(Effect.gen(function*() {
        const ledger = yield* BudgetLedger
        assert.strictEqual(yield* ledger.consumed(window()), 0)
        yield* ledger.charge(window(), 40)
        yield* ledger.charge(window(), 2.5)
        yield* ledger.charge(window({ principal: "bob" }), 9)
        assert.strictEqual(yield* ledger.consumed(window()), 42.5)
        assert.strictEqual(yield* ledger.consumed(window({ principal: "bob" })), 9)
        assert.strictEqual(yield* ledger.consumed(window({ window: 8 })), 0)
      })))

    it.effect("concurrent admissions to one window never exceed its limit", () =>
      provided(Effect.gen(function*() {
        const ledger = yield* BudgetLedger
        const attempts = Array.from({ length: 24 }, (_, i) => `attempt-${i}`)
        const results = yield* Effect.forEach(attempts, (attempt) => ledger.admit(window(), attempt, 5), {
          concurrency: "unbounded"
        })
        assert.strictEqual(results.filter((result) => result.admitted).length, 5)
      })))
  })
}

describe("BudgetLedger: sql", () => {
  const onFile = (filename: string) => SqlBudgetLedger.layer.pipe(Layer.provideMerge(Sqlite.layer({ filename })))
  // A ledger on its own connection, open until the test's scope closes.
  const ledgerOn = (filename: string) =>
    Effect.map(Layer.build(Layer.fresh(onFile(filename))), Context.get(BudgetLedger))

  it.scoped("a restart, and a second ledger on the same file, see the same admissions and charges", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      yield* Effect.provide(
        Effect.flatMap(
          BudgetLedger,
          (ledger) => Effect.zipRight(ledger.admit(window(), "a", 2), ledger.charge(window(), 30))
        ),
        onFile(filename)
      )
      const [first, second] = yield* Effect.all([ledgerOn(filename), ledgerOn(filename)])
      assert.strictEqual(yield* first.consumed(window()), 30)
      assert.deepStrictEqual(yield* first.admit(window(), "b", 2), { admitted: true, count: 2 })
      assert.deepStrictEqual(yield* second.admit(window(), "c", 2), { admitted: false, count: 2 })
      yield* second.charge(window(), 12)
      assert.strictEqual(yield* first.consumed(window()), 42)
    }))

  it.scoped("a later window forgets the earlier ones of its rule and principal, and no other", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const ledger = yield* ledgerOn(filename)
      yield* ledger.admit(window(), "a", 1)
      yield* ledger.admit(window({ principal: "bob" }), "a", 1)
      yield* ledger.charge(window(), 5)
      yield* ledger.admit(window({ window: 8 }), "a", 1)
      yield* ledger.charge(window({ window: 8 }), 1)
      const rows = yield* Effect.provide(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.all([
            sql<{ readonly principal: string; readonly window: number }>`
              SELECT principal, window FROM budget_admissions ORDER BY principal, window`,
            sql<{ readonly window: number }>`SELECT window FROM budget_consumption`
          ])),
        Sqlite.layer({ filename })
      )
      assert.deepStrictEqual(rows[0].map((row) => `${row.principal}@${row.window}`), ["alice@8", "bob@7"])
      assert.deepStrictEqual(rows[1].map((row) => row.window), [8])
    }))
})
