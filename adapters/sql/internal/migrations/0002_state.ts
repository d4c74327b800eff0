import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Runs and their late terminal observations, operation attempts, the outbox, and the evidence projection with its cursors. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE runs (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN
      ('preparing', 'queued', 'running', 'paused', 'completed', 'failed', 'cancelled', 'timed_out')),
    created_at TEXT NOT NULL,
    started_at TEXT,
    ended_at TEXT,
    parent_run_id TEXT REFERENCES runs (run_id),
    lineage TEXT NOT NULL CHECK (lineage IN ('root', 'retry', 'resume', 'replay', 'fork')),
    acceptance TEXT,
    quality TEXT,
    reason_code TEXT,
    evidence_json TEXT,
    cost INTEGER,
    CHECK ((lineage = 'root') = (parent_run_id IS NULL)),
    CHECK ((status IN ('completed', 'failed', 'cancelled', 'timed_out')) = (ended_at IS NOT NULL))
  )`
  yield* sql`CREATE INDEX runs_status ON runs (status, position)`
  yield* sql`CREATE INDEX runs_parent ON runs (parent_run_id)`
  yield* sql`CREATE TRIGGER runs_terminal_is_final BEFORE UPDATE ON runs
    WHEN OLD.status IN ('completed', 'failed', 'cancelled', 'timed_out')
    BEGIN SELECT RAISE(ABORT, 'a terminal run never changes'); END`
  yield* sql`CREATE TABLE run_observations (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    sequence INTEGER NOT NULL,
    status TEXT NOT NULL,
    acceptance TEXT NOT NULL,
    quality TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    evidence_json TEXT NOT NULL,
    cost INTEGER,
    observed_at TEXT NOT NULL,
    UNIQUE (run_id, sequence)
  )`
  yield* sql`CREATE TABLE operation_attempts (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    request_id TEXT NOT NULL,
    action_name TEXT NOT NULL,
    action_version TEXT,
    arguments_digest TEXT,
    outcome_tag TEXT NOT NULL,
    reason_code TEXT NOT NULL,
    call_executed INTEGER NOT NULL CHECK (call_executed IN (0, 1)),
    result_digest TEXT,
    created_at TEXT NOT NULL
  )`
  yield* sql`CREATE INDEX operation_attempts_run ON operation_attempts (run_id, position)`
  yield* sql`CREATE TRIGGER operation_attempts_no_update BEFORE UPDATE ON operation_attempts
    BEGIN SELECT RAISE(ABORT, 'a committed attempt never changes'); END`
  yield* sql`CREATE TABLE outbox_intents (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    attempt_id TEXT NOT NULL REFERENCES operation_attempts (attempt_id),
    topic TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    delivery_state TEXT NOT NULL CHECK (delivery_state IN ('pending', 'delivered', 'failed')),
    delivery_attempts INTEGER NOT NULL,
    last_reason_code TEXT,
    delivered_at TEXT
  )`
  yield* sql`CREATE INDEX outbox_intents_state ON outbox_intents (delivery_state, position)`
  yield* sql`CREATE TRIGGER outbox_intents_fact_is_final
    BEFORE UPDATE OF intent_id, run_id, attempt_id, topic, payload_json, created_at ON outbox_intents
    BEGIN SELECT RAISE(ABORT, 'only an intent''s delivery state changes'); END`
  yield* sql`CREATE TABLE projection_cursors (
    projector TEXT PRIMARY KEY,
    cursor TEXT NOT NULL
  )`
  yield* sql`CREATE TABLE projected_records (
    chain_id TEXT NOT NULL,
    record_id TEXT NOT NULL,
    projection_version INTEGER NOT NULL,
    chain_hash TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    record_type TEXT NOT NULL,
    operation_id TEXT,
    PRIMARY KEY (chain_id, record_id, projection_version)
  )`
  yield* sql`CREATE INDEX projected_records_record ON projected_records (record_id)`
  yield* sql`CREATE TRIGGER projected_records_no_update BEFORE UPDATE ON projected_records
    BEGIN SELECT RAISE(ABORT, 'a projected record never changes'); END`
  yield* sql`CREATE TABLE projected_operations (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id TEXT NOT NULL UNIQUE,
    chain_id TEXT NOT NULL,
    started_record_id TEXT,
    terminal_record_id TEXT,
    terminal_type TEXT,
    terminal_count INTEGER NOT NULL
  )`
  yield* sql`CREATE INDEX projected_operations_chain ON projected_operations (chain_id, position)`
})
