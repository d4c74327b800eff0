import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The governed executors that have the store open, one row each while its layer lives (a crash leaves its row). */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE executors (
    executor_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    opened_at TEXT NOT NULL
  )`
})
