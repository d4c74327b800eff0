import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Projected records by chain position: the projector checks each record against its projected predecessor. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX projected_records_chain ON projected_records (chain_id, sequence)`
})
