/**
 * The edge handler's execution log over `@effect/sql`: every worker on the same database (processes, isolates or
 * machines) sees what the others did under a caller's idempotency key, so a key begun on one worker is in progress or
 * replayed on another, and reconciliation asked of any worker answers what was done. `begin` is one
 * `INSERT ... ON CONFLICT DO NOTHING RETURNING`: of two workers beginning one key, exactly one runs it. A storage
 * failure has no place in the log's answers and is a defect.
 *
 * Runtimes: any with a SqlClient whose dialect has INSERT ... RETURNING: SQLite 3.35+ and Postgres (tested on
 * @effect/sql-sqlite-node).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Schema } from "effect"
import type { Entry, ExecutionLog } from "../web/EdgeExecutionLog.ts"
import { RemoteOutcome } from "../web/EdgeWire.ts"

const OutcomeJson = Schema.parseJson(RemoteOutcome)
const encodeOutcome = Schema.encodeSync(OutcomeJson)
const decodeRow = Schema.decodeUnknownEither(Schema.Struct({
  digest: Schema.String,
  state: Schema.Literal("in_progress", "unconcluded", "concluded"),
  outcome_json: Schema.NullOr(OutcomeJson)
}))

/** An execution log over the SqlClient in context (migrated: `Sqlite.layer` applies `0014_edge_executions`). */
export const make: Effect.Effect<ExecutionLog, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  const get = (caller: string, key: string) =>
    Effect.gen(function*() {
      const [row] = yield* sql`SELECT digest, state, outcome_json FROM edge_executions
        WHERE caller = ${caller} AND idempotency_key = ${key}`.pipe(Effect.orDie)
      if (row === undefined) return undefined
      const decoded = decodeRow(row)
      if (Either.isLeft(decoded)) return yield* Effect.dieMessage(`edge_executions row for ${key} does not decode`)
      const { digest, outcome_json, state } = decoded.right
      if (state !== "concluded") return { state, digest } satisfies Entry
      if (outcome_json === null) return yield* Effect.dieMessage(`edge_executions row for ${key} has no outcome`)
      return { state, digest, outcome: outcome_json } satisfies Entry
    }).pipe(Effect.withSpan("SqlEdgeExecutionLog.get"))

  const begin = (caller: string, key: string, digest: string) =>
    Effect.gen(function*() {
      const inserted = yield* sql`INSERT INTO edge_executions (caller, idempotency_key, digest, state)
        VALUES (${caller}, ${key}, ${digest}, 'in_progress')
        ON CONFLICT (caller, idempotency_key) DO NOTHING
        RETURNING caller`.pipe(Effect.orDie)
      if (inserted.length === 1) return true as const
      const known = yield* get(caller, key)
      return known ?? (yield* Effect.dieMessage(`edge_executions row for ${key} vanished`))
    }).pipe(Effect.withSpan("SqlEdgeExecutionLog.begin"))

  const conclude = (caller: string, key: string, outcome: RemoteOutcome) =>
    sql`UPDATE edge_executions SET state = 'concluded', outcome_json = ${encodeOutcome(outcome)}
      WHERE caller = ${caller} AND idempotency_key = ${key}`.pipe(
      Effect.asVoid,
      Effect.orDie,
      Effect.withSpan("SqlEdgeExecutionLog.conclude")
    )

  const abandon = (caller: string, key: string) =>
    sql`UPDATE edge_executions SET state = 'unconcluded'
      WHERE caller = ${caller} AND idempotency_key = ${key} AND state = 'in_progress'`.pipe(
      Effect.asVoid,
      Effect.orDie,
      Effect.withSpan("SqlEdgeExecutionLog.abandon")
    )

  return { begin, conclude, abandon, get }
})
