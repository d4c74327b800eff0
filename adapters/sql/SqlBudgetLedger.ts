/**
 * The durable BudgetLedger over `@effect/sql`: a restart, or another executor on the same database, sees the same
 * admissions and charges. An admission is one conditional INSERT (the window's count checked in the same statement)
 * and a read of whether the attempt holds a place, in one write transaction, so two executors never give a window
 * more than its limit; a charge is one upsert. A window's rows are deleted once a later window of its rule and
 * principal is written. A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient (tested on @effect/sql-sqlite-node).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import type { Admission, BudgetWindow } from "../../core/policy/BudgetLedger.ts"
import { BudgetLedger } from "../../core/policy/BudgetLedger.ts"
import { writeTransaction } from "./internal/transaction.ts"

/** A BudgetLedger over the SqlClient in context. */
export const make: Effect.Effect<BudgetLedger.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)
  const same = (window: BudgetWindow) =>
    sql`snapshot_digest = ${window.snapshot_digest} AND rule_id = ${window.rule_id} AND principal = ${window.principal}`
  const forgetEarlier = (table: "budget_admissions" | "budget_consumption", window: BudgetWindow) =>
    sql`DELETE FROM ${sql(table)} WHERE ${same(window)} AND window < ${window.window}`

  const admit = (window: BudgetWindow, attempt_id: string, limit: number) =>
    transaction(() =>
      Effect.gen(function*() {
        yield* forgetEarlier("budget_admissions", window)
        yield* sql`INSERT INTO budget_admissions (snapshot_digest, rule_id, principal, window, attempt_id)
          SELECT ${window.snapshot_digest}, ${window.rule_id}, ${window.principal}, ${window.window}, ${attempt_id}
          WHERE (SELECT count(*) FROM budget_admissions WHERE ${same(window)} AND window = ${window.window}) < ${limit}
          ON CONFLICT DO NOTHING`
        const [row] = yield* sql<{ readonly count: number; readonly held: number }>`
          SELECT count(*) AS count, coalesce(sum(attempt_id = ${attempt_id}), 0) AS held
          FROM budget_admissions WHERE ${same(window)} AND window = ${window.window}`
        return { admitted: Number(row?.held ?? 0) > 0, count: Number(row?.count ?? 0) } satisfies Admission
      })
    ).pipe(Effect.orDie, Effect.withSpan("SqlBudgetLedger.admit"))

  const consumed = (window: BudgetWindow) =>
    sql<{ readonly consumed: number }>`SELECT consumed FROM budget_consumption
      WHERE ${same(window)} AND window = ${window.window}`.pipe(
      Effect.map(([row]) => Number(row?.consumed ?? 0)),
      Effect.orDie,
      Effect.withSpan("SqlBudgetLedger.consumed")
    )

  const charge = (window: BudgetWindow, amount: number) =>
    transaction(() =>
      Effect.gen(function*() {
        yield* forgetEarlier("budget_consumption", window)
        yield* sql`INSERT INTO budget_consumption (snapshot_digest, rule_id, principal, window, consumed)
          VALUES (${window.snapshot_digest}, ${window.rule_id}, ${window.principal}, ${window.window}, ${amount})
          ON CONFLICT (snapshot_digest, rule_id, principal, window)
          DO UPDATE SET consumed = consumed + excluded.consumed`
      })
    ).pipe(Effect.asVoid, Effect.orDie, Effect.withSpan("SqlBudgetLedger.charge"))

  return { admit, consumed, charge }
})

/** The BudgetLedger over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<BudgetLedger, never, SqlClient.SqlClient> = Layer.effect(BudgetLedger, make)
