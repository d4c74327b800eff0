import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The governed executors that have the store open, one row each while its layer lives (a crash leaves its row), with
 * what tells its process apart: pid, host, and on Linux the kernel boot id, pid namespace and start time.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE executors (
    executor_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_namespace TEXT NOT NULL,
    started TEXT NOT NULL,
    opened_at TEXT NOT NULL
  )`
})
