/**
 * The ExecutorRegistry contract, for every layer: an executor is live from its registration until its scope closes.
 * For SQL, a row whose process is known to have ended is forgotten, and one on another host stays live.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { spawn } from "node:child_process"
import * as os from "node:os"
import * as MemoryExecutorRegistry from "../../adapters/MemoryExecutorRegistry.ts"
import * as SqlExecutorRegistry from "../../adapters/SqlExecutorRegistry.ts"
import { ExecutorRegistry } from "../../core/ExecutorRegistry.ts"
import * as IdGenerator from "../../core/IdGenerator.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"

const sql = SqlExecutorRegistry.layer.pipe(Layer.provideMerge(sqliteLayer()), Layer.provide(IdGenerator.layerCrypto))

const layers = [["memory", MemoryExecutorRegistry.layer], ["sql", sql]] as const

describe.each(layers)("ExecutorRegistry (%s)", (_, layer) => {
  it.effect("an executor is live from registration until its scope closes; each is listed once", () =>
    Effect.gen(function*() {
      const registry = yield* ExecutorRegistry
      assert.deepStrictEqual(yield* registry.live, [])
      const first = yield* Scope.make()
      const second = yield* Scope.make()
      const a = yield* Scope.extend(registry.register, first)
      const b = yield* Scope.extend(registry.register, second)
      assert.notStrictEqual(a.executor_id, b.executor_id)
      assert.sameMembers((yield* registry.live).map((e) => e.executor_id), [a.executor_id, b.executor_id])
      yield* Scope.close(first, Exit.void)
      assert.deepStrictEqual((yield* registry.live).map((e) => e.executor_id), [b.executor_id])
      yield* Scope.close(second, Exit.void)
      assert.deepStrictEqual(yield* registry.live, [])
    }).pipe(Effect.provide(layer)))
})

describe("ExecutorRegistry (sql): rows a crash left", () => {
  const insert = (row: { executor_id: string; pid: number; host: string }) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (client) => client`INSERT INTO executors ${client.insert({ ...row, opened_at: "2026-01-01T00:00:00.000000Z" })}`
    )

  it.effect("a row of an ended process on this host is forgotten; one on another host stays live", () =>
    Effect.gen(function*() {
      const registry = yield* ExecutorRegistry
      const ended = yield* Effect.async<number>((resume) => {
        const child = spawn(process.execPath, ["-e", ""])
        child.once("exit", () => resume(Effect.succeed(child.pid!)))
      })
      const host = os.hostname()
      yield* insert({ executor_id: "crashed", pid: ended, host })
      yield* insert({ executor_id: "elsewhere", pid: ended, host: `not-${host}` })
      yield* insert({ executor_id: "alive", pid: process.pid, host })
      const live = yield* registry.live
      assert.deepStrictEqual(live.map((e) => [e.executor_id, e.holder]), [
        ["alive", `process ${process.pid} on ${host}`],
        ["elsewhere", `process ${ended} on not-${host}`]
      ])
      const rows = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (client) => client<{ executor_id: string }>`SELECT executor_id FROM executors ORDER BY executor_id`
      )
      assert.deepStrictEqual(rows.map((row) => row.executor_id), ["alive", "elsewhere"], "the ended one is deleted")
    }).pipe(Effect.provide(sql)))
})
