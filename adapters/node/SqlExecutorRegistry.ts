/**
 * The durable ExecutorRegistry over `@effect/sql`, for a store one machine shares (SQLite in WAL mode): a row per
 * registered executor with what tells its process apart, deleted when its scope closes (a failed delete is logged and
 * leaves the row, which errs towards refusing recovery). A row a crash left is forgotten once its process is proven
 * ended: gone, a zombie, its pid reused, or the kernel restarted since; a process in another pid namespace, or on
 * another host where the boot is unknown, stays live until an operator forgets it.
 *
 * Runtimes: Node (process ids and /proc; tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import * as os from "node:os"
import { IdGenerator } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { ExecutorRegistry, RegisteredExecutor } from "../../core/evidence/ExecutorRegistry.ts"
import * as ProcessIdentity from "./internal/processIdentity.ts"

const ExecutorRow = Schema.Struct({
  executor_id: Schema.String,
  pid: Schema.Int,
  host: Schema.String,
  boot_id: Schema.String,
  pid_namespace: Schema.String,
  started: Schema.String,
  opened_at: Schema.String
})

type ExecutorRow = typeof ExecutorRow.Type

const fromRow = (row: ExecutorRow) =>
  new RegisteredExecutor({
    executor_id: row.executor_id,
    holder: `process ${row.pid} on ${row.host}`,
    opened_at: row.opened_at
  })

/** An ExecutorRegistry over the SqlClient in context, naming executors by the IdGenerator in context. */
export const make: Effect.Effect<ExecutorRegistry.Service, never, SqlClient.SqlClient | IdGenerator> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const ids = yield* IdGenerator
    const host = os.hostname()
    const self = ProcessIdentity.current()
    const findAll = SqlSchema.findAll({
      Request: Schema.Void,
      Result: ExecutorRow,
      execute: () =>
        sql`SELECT executor_id, pid, host, boot_id, pid_namespace, started, opened_at FROM executors
          ORDER BY opened_at, executor_id`
    })
    const remove = (executor_ids: ReadonlyArray<string>) =>
      sql<{ executor_id: string }>`DELETE FROM executors WHERE executor_id IN ${sql.in(executor_ids)}
        RETURNING executor_id`
    // Proven ended: a process of this host (or of this very kernel boot, whatever the host is called) that has gone.
    const ended = (row: ExecutorRow) =>
      (row.host === host || (row.boot_id !== "" && row.boot_id === self.boot_id)) &&
      !ProcessIdentity.mayBeRunning(row, self)

    return {
      register: Effect.acquireRelease(
        Effect.gen(function*() {
          const row: ExecutorRow = { executor_id: yield* ids.uuid, host, ...self, opened_at: yield* Time.now }
          yield* Effect.orDie(sql`INSERT INTO executors ${sql.insert(row)}`)
          return fromRow(row)
        }),
        (executor) => Effect.ignoreLogged(remove([executor.executor_id]))
      ),
      live: Effect.gen(function*() {
        const rows = yield* Effect.orDie(findAll(undefined))
        const gone = rows.filter(ended)
        if (gone.length > 0) yield* Effect.orDie(remove(gone.map((row) => row.executor_id)))
        return rows.filter((row) => !gone.includes(row)).map(fromRow)
      }),
      forget: (executor_id) => Effect.map(Effect.orDie(remove([executor_id])), (rows) => rows.length > 0)
    }
  }
)

/** The SQL ExecutorRegistry as a layer. */
export const layer: Layer.Layer<ExecutorRegistry, never, SqlClient.SqlClient | IdGenerator> = Layer.effect(
  ExecutorRegistry,
  make
)
