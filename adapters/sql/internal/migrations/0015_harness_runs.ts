import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** A durable Run's harness run: its plan and report (attached before spawn) and the operation its observations are keyed by. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE harness_runs (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    operation_id TEXT NOT NULL UNIQUE,
    chain_id TEXT NOT NULL,
    plan TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    report TEXT NOT NULL,
    report_digest TEXT NOT NULL,
    attached_at TEXT NOT NULL
  )`
  yield* sql`CREATE TRIGGER harness_runs_no_update BEFORE UPDATE ON harness_runs
    BEGIN SELECT RAISE(ABORT, 'an attached harness run never changes'); END`
})
