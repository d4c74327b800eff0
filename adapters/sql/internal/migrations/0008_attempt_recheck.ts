import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * An attempt records its stage-10 recheck: whether the evaluators ran again, why, and the inputs compared (null for
 * attempts committed before, or that never reached stage 10).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE operation_attempts ADD COLUMN recheck_json TEXT`
})
