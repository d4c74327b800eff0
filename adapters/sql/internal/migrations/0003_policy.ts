import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Policy snapshots (immutable content, one staged -> active step) and one binding per scope. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE policy_snapshots (
    policy_id TEXT NOT NULL,
    version TEXT NOT NULL,
    digest TEXT NOT NULL,
    snapshot_json TEXT NOT NULL,
    release_state TEXT NOT NULL CHECK (release_state IN ('staged', 'active')),
    activated_at TEXT,
    activated_by TEXT,
    PRIMARY KEY (policy_id, version)
  )`
  yield* sql`CREATE TRIGGER policy_snapshots_immutable BEFORE UPDATE ON policy_snapshots
    WHEN NEW.policy_id IS NOT OLD.policy_id OR NEW.version IS NOT OLD.version OR NEW.digest IS NOT OLD.digest
      OR NEW.snapshot_json IS NOT OLD.snapshot_json OR OLD.release_state = 'active'
    BEGIN SELECT RAISE(ABORT, 'policy snapshots are immutable once stored; activation is the only change'); END`
  yield* sql`CREATE TRIGGER policy_snapshots_no_delete BEFORE DELETE ON policy_snapshots
    BEGIN SELECT RAISE(ABORT, 'policy snapshots stay readable: no delete'); END`
  yield* sql`CREATE TABLE policy_bindings (
    scope_kind TEXT NOT NULL CHECK (scope_kind IN ('global', 'role', 'resource')),
    scope_value TEXT NOT NULL,
    policy_id TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (scope_kind, scope_value),
    FOREIGN KEY (policy_id, version) REFERENCES policy_snapshots (policy_id, version)
  )`
})
