/**
 * The durable ExecutorRegistry over `@effect/sql`: a row per registered executor with its process id and host, deleted
 * when its scope closes. A row a crash left is forgotten once its process is known to have ended (same host, no such
 * process); a process on another host, or one this process may not signal, counts as live. A process id reused since
 * its executor crashed keeps that row live, which refuses recovery rather than close a running operation.
 *
 * Runtimes: Node (process ids and host names; tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import * as os from "node:os"
import { ExecutorRegistry, RegisteredExecutor } from "../core/ExecutorRegistry.ts"
import { IdGenerator } from "../core/IdGenerator.ts"
import * as Time from "../core/Time.ts"

const ExecutorRow = Schema.Struct({
  executor_id: Schema.String,
  pid: Schema.Int,
  host: Schema.String,
  opened_at: Schema.String
})

/** Whether a process on this host may still be running: only "no such process" says it has ended. */
const mayBeRunning = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { readonly code?: unknown }).code !== "ESRCH"
  }
}

const registered = (row: typeof ExecutorRow.Type) =>
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
    const findAll = SqlSchema.findAll({
      Request: Schema.Void,
      Result: ExecutorRow,
      execute: () => sql`SELECT executor_id, pid, host, opened_at FROM executors ORDER BY opened_at, executor_id`
    })
    const insert = (row: typeof ExecutorRow.Type) => sql`INSERT INTO executors ${sql.insert(row)}`
    const remove = (executor_ids: ReadonlyArray<string>) =>
      sql`DELETE FROM executors WHERE executor_id IN ${sql.in(executor_ids)}`

    return {
      register: Effect.acquireRelease(
        Effect.gen(function*() {
          const row = { executor_id: yield* ids.uuid, pid: process.pid, host, opened_at: yield* Time.now }
          yield* Effect.orDie(insert(row))
          return registered(row)
        }),
        (executor) => Effect.ignoreLogged(remove([executor.executor_id]))
      ),
      live: Effect.gen(function*() {
        const rows = yield* Effect.orDie(findAll(undefined))
        const ended = rows.filter((row) => row.host === host && !mayBeRunning(row.pid))
        if (ended.length > 0) yield* Effect.orDie(remove(ended.map((row) => row.executor_id)))
        return rows.filter((row) => !ended.includes(row)).map(registered)
      })
    }
  }
)

/** The SQL ExecutorRegistry as a layer. */
export const layer: Layer.Layer<ExecutorRegistry, never, SqlClient.SqlClient | IdGenerator> = Layer.effect(
  ExecutorRegistry,
  make
)
