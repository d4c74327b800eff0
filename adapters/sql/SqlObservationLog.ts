/**
 * The ObservationLog over `@effect/sql`: one row per observation in `harness_observations`, in the same database as
 * the evidence chains but never in one. A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient (tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import { ObservationLog } from "../../core/harness/ObservationLog.ts"
import { ProviderObservation } from "../../core/harness/ProviderObservation.ts"
import { writeTransaction } from "./internal/transaction.ts"

const Row = Schema.Struct({ observation: Schema.parseJson(ProviderObservation) })
const encode = Schema.encodeSync(Schema.parseJson(ProviderObservation))

/** An ObservationLog over the SqlClient in context. */
export const make: Effect.Effect<ObservationLog.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)
  const readRows = SqlSchema.findAll({
    Request: Schema.String,
    Result: Row,
    execute: (run_key) => sql`SELECT observation FROM harness_observations WHERE run_key = ${run_key} ORDER BY seq`
  })

  const append = (run_key: string, observations: ReadonlyArray<ProviderObservation>) =>
    transaction(() =>
      Effect.gen(function*() {
        const [row] = yield* sql<{ readonly next: number }>`
          SELECT coalesce(max(seq) + 1, 0) AS next FROM harness_observations WHERE run_key = ${run_key}`
        const first = Number(row?.next ?? 0)
        for (const [i, observation] of observations.entries()) {
          yield* sql`INSERT INTO harness_observations (run_key, seq, tag, observation)
            VALUES (${run_key}, ${first + i}, ${observation._tag}, ${encode(observation)})`
        }
      })
    ).pipe(Effect.orDie, Effect.withSpan("SqlObservationLog.append"))

  const read = (run_key: string) =>
    readRows(run_key).pipe(
      Effect.map((rows) => rows.map((row) => row.observation)),
      Effect.orDie,
      Effect.withSpan("SqlObservationLog.read")
    )

  return { append, read }
})

/** The ObservationLog over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<ObservationLog, never, SqlClient.SqlClient> = Layer.effect(ObservationLog, make)
