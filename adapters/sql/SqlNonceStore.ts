/**
 * The NonceStore over `@effect/sql`: every worker of a signed ingress (edge handler processes, isolates or machines)
 * on the same database claims from one table, so a request replayed to another worker is refused there too. A claim
 * is one statement, `INSERT ... ON CONFLICT DO UPDATE ... WHERE expired ... RETURNING`, so of two concurrent claims
 * of one nonce, in one process or in two, exactly one returns a row (and a nonce past its retention counts as
 * unclaimed, as in the memory store). Nonces past their retention are deleted every `purgeEvery` claims of a store
 * and by `purge`. A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient whose dialect has upserts with RETURNING: SQLite 3.35+ and Postgres (tested on
 * @effect/sql-sqlite-node).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Layer } from "effect"
import { NonceStore } from "../../core/base/NonceStore.ts"

/** How a store purges: after every `purgeEvery` claims it makes (default 256). */
export interface Options {
  readonly purgeEvery?: number
}

/** The SQL nonce store: the port, and a purge of every nonce whose retention has passed. */
export interface SqlNonceStore extends NonceStore.Service {
  /** Delete every nonce whose retention has passed by the Clock. */
  readonly purge: Effect.Effect<void>
}

/** A NonceStore over the SqlClient in context (migrated: `Sqlite.layer` applies `0013_nonces`). */
export const make = (options: Options = {}): Effect.Effect<SqlNonceStore, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const every = options.purgeEvery ?? 256
    if (!Number.isSafeInteger(every) || every < 1) {
      return yield* Effect.dieMessage(`purgeEvery must be a positive integer (${every})`)
    }
    let claims = 0

    const purgeAt = (now: number) => sql`DELETE FROM nonces WHERE retain_until_millis < ${now}`.pipe(Effect.orDie)

    const purge = Effect.flatMap(Clock.currentTimeMillis, purgeAt).pipe(
      Effect.asVoid,
      Effect.withSpan("SqlNonceStore.purge")
    )

    const claim = (scope: string, nonce: string, retainUntilMillis: number) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        if (++claims % every === 0) yield* purgeAt(now)
        const rows = yield* sql`INSERT INTO nonces (scope, nonce, retain_until_millis)
          VALUES (${scope}, ${nonce}, ${Math.ceil(retainUntilMillis)})
          ON CONFLICT (scope, nonce) DO UPDATE SET retain_until_millis = excluded.retain_until_millis
          WHERE nonces.retain_until_millis < ${now}
          RETURNING nonce`.pipe(Effect.orDie)
        return rows.length === 1
      }).pipe(Effect.withSpan("SqlNonceStore.claim"))

    return { claim, purge }
  })

/** The NonceStore over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer = (options: Options = {}): Layer.Layer<NonceStore, never, SqlClient.SqlClient> =>
  Layer.effect(NonceStore, make(options))
