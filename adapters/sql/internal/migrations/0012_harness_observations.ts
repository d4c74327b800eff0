import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** What a harness run's provider stream said, in order per run: the observation plane, apart from every chain. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE harness_observations (
    run_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    tag TEXT NOT NULL,
    observation TEXT NOT NULL,
    PRIMARY KEY (run_key, seq)
  )`
})
