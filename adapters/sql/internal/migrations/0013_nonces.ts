import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The one-use nonces of signed requests (the edge handler's), per scope (a key id), each kept until the instant after
 * which its request is refused as expired anyway; the index on that instant keeps the purge of expired ones cheap.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE nonces (
    scope TEXT NOT NULL,
    nonce TEXT NOT NULL,
    retain_until_millis INTEGER NOT NULL,
    PRIMARY KEY (scope, nonce)
  )`
  yield* sql`CREATE INDEX nonces_by_expiry ON nonces (retain_until_millis)`
})
