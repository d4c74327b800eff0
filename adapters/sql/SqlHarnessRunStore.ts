/**
 * The HarnessRunStore over `@effect/sql`: one row per Run in `harness_runs` (the plan and report as their JSON, beside
 * their digests), its observations read from `harness_observations` by the run's operation id; neither table is a
 * chain. A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient (tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Layer, Option, Schema } from "effect"
import { HarnessAttachment, HarnessRunStore } from "../../core/harness/HarnessRunStore.ts"
import { ProviderObservation } from "../../core/harness/ProviderObservation.ts"

const Row = Schema.Struct({
  ...HarnessAttachment.fields,
  plan: Schema.parseJson(HarnessAttachment.fields.plan),
  report: Schema.parseJson(HarnessAttachment.fields.report)
})

const Observed = Schema.Struct({ observation: Schema.parseJson(ProviderObservation) })

/** A HarnessRunStore over the SqlClient in context. */
export const make: Effect.Effect<HarnessRunStore.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const insert = SqlSchema.void({
    Request: Row,
    execute: (row) => sql`INSERT INTO harness_runs ${sql.insert(row)}`
  })
  const find = SqlSchema.findOne({
    Request: Schema.String,
    Result: Row,
    execute: (run_id) =>
      sql`SELECT run_id, operation_id, chain_id, plan, plan_digest, report, report_digest, attached_at
        FROM harness_runs WHERE run_id = ${run_id}`
  })
  const observed = SqlSchema.findAll({
    Request: Schema.String,
    Result: Observed,
    execute: (run_id) =>
      sql`SELECT o.observation FROM harness_observations o JOIN harness_runs r ON o.run_key = r.operation_id
        WHERE r.run_id = ${run_id} ORDER BY o.seq`
  })

  const attach = (attachment: HarnessAttachment) =>
    insert(attachment).pipe(Effect.orDie, Effect.withSpan("SqlHarnessRunStore.attach"))

  const get = (run_id: string) =>
    find(run_id).pipe(
      Effect.map((row) => Option.map(row, (r) => new HarnessAttachment(r))),
      Effect.orDie,
      Effect.withSpan("SqlHarnessRunStore.get")
    )

  const observations = (run_id: string) =>
    observed(run_id).pipe(
      Effect.map((rows) => rows.map((row) => row.observation)),
      Effect.orDie,
      Effect.withSpan("SqlHarnessRunStore.observations")
    )

  return { attach, get, observations }
})

/** The HarnessRunStore over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<HarnessRunStore, never, SqlClient.SqlClient> = Layer.effect(HarnessRunStore, make)
