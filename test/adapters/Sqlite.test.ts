import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { writeTransaction } from "../../adapters/sql/internal/transaction.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"

describe("Sqlite", () => {
  it.scoped("opens in WAL mode with synchronous=FULL by default and applies every migration", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [mode] = yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`
      const [sync] = yield* sql<{ synchronous: number }>`PRAGMA synchronous`
      assert.strictEqual(mode!.journal_mode, "wal")
      assert.strictEqual(sync!.synchronous, 2)
      const tables = yield* sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`
      assert.include(tables.map((t) => t.name), "evidence_records")
    }).pipe(Effect.provide(sqliteLayer())))

  it.scoped("honours an explicit durability setting", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const [sync] = yield* sql<{ synchronous: number }>`PRAGMA synchronous`
      assert.strictEqual(sync!.synchronous, 1)
    }).pipe(Effect.provide(sqliteLayer({ synchronous: "NORMAL" }))))

  it.scoped("refuses to update or delete evidence", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO evidence_records (record_id, record_type, chain_id, sequence, policy_id, policy_version,
        payload_json, payload_digest, chain_hash, created_at, hash_algorithm)
        VALUES ('r', 'task_closed', 'c', 0, 'p', '1', '{}', 'd', 'h', 't', 'sha256-v1')`
      const update = yield* Effect.flip(sql`UPDATE evidence_records SET payload_json = '{"x":1}'`)
      const remove = yield* Effect.flip(sql`DELETE FROM evidence_records`)
      assert.include(String(update.cause), "append-only")
      assert.include(String(remove.cause), "append-only")
    }).pipe(Effect.provide(sqliteLayer())))

  it.scoped("an interrupted write transaction is rolled back: none of its writes stays, and later writes commit", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const transaction = writeTransaction(sql)
      yield* sql`CREATE TABLE t (n INTEGER NOT NULL)`
      const written = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        transaction((connection) =>
          connection.execute("INSERT INTO t (n) VALUES (1)", [], undefined).pipe(
            Effect.zipRight(Deferred.succeed(written, undefined)),
            Effect.zipRight(Effect.never)
          )
        )
      )
      yield* Deferred.await(written)
      yield* Fiber.interrupt(fiber)
      const numbers = sql<{ n: number }>`SELECT n FROM t ORDER BY n`
      assert.deepStrictEqual(yield* numbers, [])
      yield* sql`INSERT INTO t (n) VALUES (2)`
      yield* transaction((connection) => connection.execute("INSERT INTO t (n) VALUES (3)", [], undefined))
      assert.deepStrictEqual((yield* numbers).map((row) => row.n), [2, 3])
    }).pipe(Effect.provide(sqliteLayer())))
})
