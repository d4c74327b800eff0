/**
 * The durable BudgetLedger over `@effect/sql`: a restart, or another executor on the same database, sees the same
 * admissions and charges. An admission is one conditional INSERT (the window's count checked in the same statement)
 * and a read of whether the attempt holds a place, in one write transaction, so two executors never give a window
 * more than its limit; a charge is one upsert. A window's rows are deleted once a later window of its rule and
 * principal is written. Its `database` is its SqlClient: a governed executor whose SQL EvidenceStore is on the same
 * client only reads the count at its gate (`peek`), and the evidence commit that carries the call's next records runs
 * the same admission (internal/admission.ts), so an admission adds no commit. A storage failure has no place in the
 * port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient (tested on @effect/sql-sqlite-node).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import type { Admission, BudgetWindow } from "../../core/policy/BudgetLedger.ts"
import { BudgetLedger } from "../../core/policy/BudgetLedger.ts"
import * as AdmissionSql from "./internal/admission.ts"
import { writeTransaction } from "./internal/transaction.ts"

/** A BudgetLedger over the SqlClient in context; its `database` is that client, as the SQL EvidenceStore's is. */
export const make: Effect.Effect<BudgetLedger.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)
  const same = (window: BudgetWindow) =>
    sql`snapshot_digest = ${window.snapshot_digest} AND rule_id = ${window.rule_id} AND principal = ${window.principal}`
  const heldBy = (window: BudgetWindow, attempt_id: string) =>
    Effect.map(AdmissionSql.held(sql, window, attempt_id), ([row]): Admission => AdmissionSql.admissionOf(row))

  const admit = (window: BudgetWindow, attempt_id: string, limit: number) =>
    transaction(() =>
      Effect.gen(function*() {
        yield* AdmissionSql.forget(sql, "budget_admissions", window)
        yield* AdmissionSql.insert(sql, { window, attempt_id, limit })
        return yield* heldBy(window, attempt_id)
      })
    ).pipe(Effect.orDie, Effect.withSpan("SqlBudgetLedger.admit"))

  const peek = (window: BudgetWindow, attempt_id: string, limit: number) =>
    heldBy(window, attempt_id).pipe(
      Effect.map(({ admitted, count }): Admission => ({ admitted: admitted || count < limit, count })),
      Effect.orDie,
      Effect.withSpan("SqlBudgetLedger.peek")
    )

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
        yield* AdmissionSql.forget(sql, "budget_consumption", window)
        yield* sql`INSERT INTO budget_consumption (snapshot_digest, rule_id, principal, window, consumed)
          VALUES (${window.snapshot_digest}, ${window.rule_id}, ${window.principal}, ${window.window}, ${amount})
          ON CONFLICT (snapshot_digest, rule_id, principal, window)
          DO UPDATE SET consumed = consumed + excluded.consumed`
      })
    ).pipe(Effect.asVoid, Effect.orDie, Effect.withSpan("SqlBudgetLedger.charge"))

  return { admit, peek, consumed, charge, database: sql }
})

/** The BudgetLedger over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<BudgetLedger, never, SqlClient.SqlClient> = Layer.effect(BudgetLedger, make)
