import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Retirement, the one step after activation: a row appended once per retired snapshot (never changed, never deleted),
 * so a snapshot's stored row and its immutability trigger stay as they are and its release state is derived.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE policy_retirements (
    policy_id TEXT NOT NULL,
    version TEXT NOT NULL,
    retired_at TEXT NOT NULL,
    retired_by TEXT NOT NULL,
    PRIMARY KEY (policy_id, version),
    FOREIGN KEY (policy_id, version) REFERENCES policy_snapshots (policy_id, version)
  )`
  yield* sql`CREATE TRIGGER policy_retirements_immutable BEFORE UPDATE ON policy_retirements
    BEGIN SELECT RAISE(ABORT, 'a policy retirement is final: no change'); END`
  yield* sql`CREATE TRIGGER policy_retirements_no_delete BEFORE DELETE ON policy_retirements
    BEGIN SELECT RAISE(ABORT, 'a policy retirement is final: no delete'); END`
})
