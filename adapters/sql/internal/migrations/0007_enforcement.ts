import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Enforcement state that outlives a process: the attempts each calls-budget window admitted, what each other budget
 * window consumed, and which attempt consumed an approval (its recheck finds it used by itself, not reused).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE budget_admissions (
    snapshot_digest TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    window INTEGER NOT NULL,
    attempt_id TEXT NOT NULL,
    PRIMARY KEY (snapshot_digest, rule_id, principal, window, attempt_id)
  )`
  yield* sql`CREATE TABLE budget_consumption (
    snapshot_digest TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    window INTEGER NOT NULL,
    consumed REAL NOT NULL,
    PRIMARY KEY (snapshot_digest, rule_id, principal, window)
  )`
  yield* sql`ALTER TABLE approvals ADD COLUMN consumed_by TEXT`
  yield* sql`DROP TRIGGER approvals_transitions`
  yield* sql`CREATE TRIGGER approvals_transitions BEFORE UPDATE ON approvals
    WHEN NEW.approval_id IS NOT OLD.approval_id OR NEW.approver_class IS NOT OLD.approver_class
      OR NEW.binding_digest IS NOT OLD.binding_digest OR NEW.expires_at_micros IS NOT OLD.expires_at_micros
      OR NEW.request_json IS NOT OLD.request_json OR NEW.position IS NOT OLD.position
      OR NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'rejected') AND NEW.decided_by IS NOT NULL
          AND NEW.consumed_by IS NULL)
        OR (OLD.state = 'approved' AND NEW.state = 'consumed' AND NEW.decided_by IS OLD.decided_by
          AND OLD.consumed_by IS NULL))
    BEGIN SELECT RAISE(ABORT, 'approvals move only pending -> approved|rejected -> consumed'); END`
})
