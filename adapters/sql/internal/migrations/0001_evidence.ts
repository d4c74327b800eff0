import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Append-only evidence: one row per record with a global position (the projection cursor, in commit order since
 * SQLite serialises writers). A chain's head is its highest-sequence row, read inside each append transaction; no
 * second copy of it is kept, so it can never disagree with the records.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE evidence_records (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL UNIQUE,
    record_type TEXT NOT NULL,
    chain_id TEXT NOT NULL,
    operation_id TEXT,
    sequence INTEGER NOT NULL,
    policy_id TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    previous_chain_hash TEXT,
    chain_hash TEXT NOT NULL UNIQUE,
    supersedes_record_id TEXT,
    created_at TEXT NOT NULL,
    hash_algorithm TEXT NOT NULL,
    UNIQUE (chain_id, sequence)
  )`
  yield* sql`CREATE TRIGGER evidence_records_no_update BEFORE UPDATE ON evidence_records
    BEGIN SELECT RAISE(ABORT, 'evidence is append-only'); END`
  yield* sql`CREATE TRIGGER evidence_records_no_delete BEFORE DELETE ON evidence_records
    BEGIN SELECT RAISE(ABORT, 'evidence is append-only'); END`
})
