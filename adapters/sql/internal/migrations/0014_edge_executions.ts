import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * What an edge handler did under each caller's idempotency key, shared by its workers: the digest of the body the key
 * was begun with, its state and, once concluded, its outcome as the wire carries it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE edge_executions (
    caller TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_progress', 'unconcluded', 'concluded')),
    outcome_json TEXT,
    PRIMARY KEY (caller, idempotency_key)
  )`
})
