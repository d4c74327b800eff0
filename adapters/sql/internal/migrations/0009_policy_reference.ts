import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Runs and attempts record the policy snapshot they were created under, as its (policy_id, version, digest) reference
 * (null for rows written before, or created under no pinned snapshot: unknown).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN policy_json TEXT`
  yield* sql`ALTER TABLE operation_attempts ADD COLUMN policy_json TEXT`
})
