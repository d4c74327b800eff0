import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Approval requests in filing order, with their state; only pending -> approved|rejected and approved -> consumed. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE approvals (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    approval_id TEXT NOT NULL UNIQUE,
    approver_class TEXT NOT NULL,
    binding_digest TEXT NOT NULL,
    expires_at_micros INTEGER NOT NULL,
    request_json TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'consumed')),
    decided_by TEXT
  )`
  yield* sql`CREATE INDEX approvals_by_class_state ON approvals (approver_class, state)`
  yield* sql`CREATE TRIGGER approvals_transitions BEFORE UPDATE ON approvals
    WHEN NEW.approval_id IS NOT OLD.approval_id OR NEW.approver_class IS NOT OLD.approver_class
      OR NEW.binding_digest IS NOT OLD.binding_digest OR NEW.expires_at_micros IS NOT OLD.expires_at_micros
      OR NEW.request_json IS NOT OLD.request_json OR NEW.position IS NOT OLD.position
      OR NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'rejected') AND NEW.decided_by IS NOT NULL)
        OR (OLD.state = 'approved' AND NEW.state = 'consumed' AND NEW.decided_by IS OLD.decided_by))
    BEGIN SELECT RAISE(ABORT, 'approvals move only pending -> approved|rejected -> consumed'); END`
})
