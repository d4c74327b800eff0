import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The verify runs a capability report cites, per control, provider version and executable identity. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE harness_verifications (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    control TEXT NOT NULL,
    provider_version TEXT NOT NULL,
    executable_digest TEXT NOT NULL,
    scenario TEXT NOT NULL,
    run_id TEXT NOT NULL,
    effect_absent INTEGER NOT NULL CHECK (effect_absent IN (0, 1))
  )`
  yield* sql`CREATE INDEX harness_verifications_key
    ON harness_verifications (control, provider_version, executable_digest)`
})
