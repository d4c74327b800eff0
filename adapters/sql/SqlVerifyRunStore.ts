/**
 * The VerifyRunStore over `@effect/sql`: one row per verify run in `harness_verifications`; recording replaces the
 * earlier runs of each recorded (control, provider version, executable) in one transaction. A row that does not
 * decode (a file written by something other than writ) fails the read, naming it, rather than counting as a run.
 *
 * Runtimes: any with a SqlClient (tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import { VerifyRun } from "../../core/harness/CapabilityReport.ts"
import { HarnessError } from "../../core/harness/HarnessAdapter.ts"
import { VerifyRunStore } from "../../core/harness/VerifyRunStore.ts"

const Bit = Schema.transform(Schema.Literal(0, 1), Schema.Boolean, {
  strict: true,
  decode: (bit) => bit === 1,
  encode: (flag) => (flag ? 1 : 0)
})

const Row = Schema.Struct({ ...VerifyRun.fields, effect_absent: Bit })

const unreadable = (cause: { readonly message: string }) =>
  new HarnessError({ reason: "probe_failed", detail: `the recorded verify runs cannot be read: ${cause.message}` })

/** A VerifyRunStore over the SqlClient in context. */
export const make: Effect.Effect<VerifyRunStore.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const all = SqlSchema.findAll({
    Request: Schema.Void,
    Result: Row,
    execute: () =>
      sql`SELECT control, provider_version, executable_digest, scenario, run_id, effect_absent
        FROM harness_verifications ORDER BY position`
  })
  const insert = SqlSchema.void({
    Request: Row,
    execute: (row) => sql`INSERT INTO harness_verifications ${sql.insert(row)}`
  })

  const verifications = all(undefined).pipe(
    Effect.map((rows) => rows.map((row) => new VerifyRun(row))),
    Effect.mapError(unreadable),
    Effect.withSpan("SqlVerifyRunStore.verifications")
  )

  const record = (runs: ReadonlyArray<VerifyRun>) =>
    Effect.forEach(runs, (run) =>
      sql`DELETE FROM harness_verifications WHERE control = ${run.control}
        AND provider_version = ${run.provider_version} AND executable_digest = ${run.executable_digest}`, {
      discard: true
    }).pipe(
      Effect.zipRight(Effect.forEach(runs, insert, { discard: true })),
      sql.withTransaction,
      Effect.mapError(unreadable),
      Effect.withSpan("SqlVerifyRunStore.record")
    )

  return { verifications, record }
})

/** The VerifyRunStore over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<VerifyRunStore, never, SqlClient.SqlClient> = Layer.effect(VerifyRunStore, make)
