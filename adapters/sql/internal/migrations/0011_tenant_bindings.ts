import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A binding may be limited to one tenant's calls: one binding per (tenant, scope), the empty tenant meaning every
 * tenant (what every binding written before was).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE policy_bindings_by_tenant (
    tenant TEXT NOT NULL,
    scope_kind TEXT NOT NULL CHECK (scope_kind IN ('global', 'role', 'resource')),
    scope_value TEXT NOT NULL,
    policy_id TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (tenant, scope_kind, scope_value),
    FOREIGN KEY (policy_id, version) REFERENCES policy_snapshots (policy_id, version)
  )`
  yield* sql`INSERT INTO policy_bindings_by_tenant (tenant, scope_kind, scope_value, policy_id, version)
    SELECT '', scope_kind, scope_value, policy_id, version FROM policy_bindings`
  yield* sql`DROP TABLE policy_bindings`
  yield* sql`ALTER TABLE policy_bindings_by_tenant RENAME TO policy_bindings`
})
