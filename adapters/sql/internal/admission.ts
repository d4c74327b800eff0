/**
 * A calls budget's admission as SQL, written once for the ledger's own transaction and for an evidence commit that
 * carries admissions: forget the earlier windows of the rule and principal, insert the attempt only while its window
 * has a place (the count checked in the same statement), and read whether the attempt holds one.
 */
import type { Statement } from "@effect/sql"
import type { BudgetWindow, PendingAdmission } from "../../../core/policy/BudgetLedger.ts"

const same = (sql: Statement.Constructor, window: BudgetWindow) =>
  sql`snapshot_digest = ${window.snapshot_digest} AND rule_id = ${window.rule_id} AND principal = ${window.principal}`

/** Delete the rows of the window's rule and principal for earlier windows. */
export const forget = (
  sql: Statement.Constructor,
  table: "budget_admissions" | "budget_consumption",
  window: BudgetWindow
) => sql`DELETE FROM ${sql(table)} WHERE ${same(sql, window)} AND window < ${window.window}`

/** Give the attempt a place while the window has fewer than `limit`; an attempt holding one keeps it. */
export const insert = (sql: Statement.Constructor, { attempt_id, limit, window }: PendingAdmission) =>
  sql`INSERT INTO budget_admissions (snapshot_digest, rule_id, principal, window, attempt_id)
    SELECT ${window.snapshot_digest}, ${window.rule_id}, ${window.principal}, ${window.window}, ${attempt_id}
    WHERE (SELECT count(*) FROM budget_admissions WHERE ${same(sql, window)} AND window = ${window.window}) < ${limit}
    ON CONFLICT DO NOTHING`

/** The window's places taken (`count`) and whether the attempt holds one (`held` above 0). */
export const held = (sql: Statement.Constructor, window: BudgetWindow, attempt_id: string) =>
  sql`SELECT count(*) AS count, coalesce(sum(attempt_id = ${attempt_id}), 0) AS held
    FROM budget_admissions WHERE ${same(sql, window)} AND window = ${window.window}`

/** A row of `held` as an admission. */
export const admissionOf = (row: unknown) => {
  const { count, held } = (row ?? {}) as { readonly count?: unknown; readonly held?: unknown }
  return { admitted: Number(held ?? 0) > 0, count: Number(count ?? 0) }
}
