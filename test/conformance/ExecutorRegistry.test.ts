/**
 * The ExecutorRegistry contract, for every layer: an executor is live from its registration until its scope closes.
 * For SQL, a row whose process is proven ended (exited, a zombie, its pid reused, the kernel restarted) is forgotten;
 * one in another pid namespace or on another host stays live.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Schedule, Scope } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as ProcessIdentity from "../../adapters/node/internal/processIdentity.ts"
import * as SqlExecutorRegistry from "../../adapters/node/SqlExecutorRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { ExecutorRegistry } from "../../core/evidence/ExecutorRegistry.ts"
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

  it.effect("forget drops one registration, once; an unknown id is false", () =>
    Effect.gen(function*() {
      const registry = yield* ExecutorRegistry
      const a = yield* registry.register
      const b = yield* registry.register
      assert.isTrue(yield* registry.forget(a.executor_id))
      assert.deepStrictEqual((yield* registry.live).map((e) => e.executor_id), [b.executor_id])
      assert.isFalse(yield* registry.forget(a.executor_id))
      assert.isFalse(yield* registry.forget("no-such-executor"))
    }).pipe(Effect.scoped, Effect.provide(layer)))
})

/** A process that has exited and been reaped: its pid. */
const endedPid = Effect.async<number>((resume) => {
  const child = spawn(process.execPath, ["-e", ""])
  child.once("exit", () => resume(Effect.succeed(child.pid!)))
})

/**
 * A zombie until the scope closes: a child that outlives its shell's `exec` into `sleep`, which never reaps it (the
 * shell could reap a child that ended before the `exec`); its parent is killed then. Its pid.
 */
const zombiePid = Effect.acquireRelease(
  Effect.async<{ readonly parent: ChildProcess; readonly zombie: number }>((resume) => {
    const parent = spawn("sh", ["-c", "sleep 0.2 & echo $!; exec sleep 60"], { stdio: ["ignore", "pipe", "ignore"] })
    parent.stdout.once("data", (chunk) => resume(Effect.succeed({ parent, zombie: Number(String(chunk).trim()) })))
  }),
  ({ parent }) => Effect.sync(() => parent.kill())
).pipe(Effect.map(({ zombie }) => zombie))

const self = ProcessIdentity.current()

/** A pid's state and start time, read from /proc as the adapter reads them. */
const statOf = (pid: number) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return { state: fields[0], started: fields[19] }
}

describe("ExecutorRegistry (sql): rows a crash left", () => {
  const insert = (executor_id: string, row: Partial<ProcessIdentity.ProcessIdentity & { host: string }>) =>
    Effect.flatMap(SqlClient.SqlClient, (client) =>
      client`INSERT INTO executors ${
        client.insert({
          executor_id,
          host: os.hostname(),
          ...self,
          ...row,
          opened_at: "2026-01-01T00:00:00.000000Z"
        })
      }`)

  it.scopedLive("a process proven ended is forgotten; one that cannot be seen stays live", () =>
    Effect.gen(function*() {
      const registry = yield* ExecutorRegistry
      const ended = yield* endedPid
      const zombie = yield* zombiePid
      yield* insert("alive", {})
      yield* insert("exited", { pid: ended })
      yield* insert("pid-reused", { started: "1" })
      const corpse = yield* Effect.retry(
        Effect.filterOrFail(Effect.sync(() => statOf(zombie)), (stat) => stat.state === "Z"),
        { schedule: Schedule.spaced("10 millis"), times: 200 }
      )
      yield* insert("zombie", { pid: zombie, started: corpse.started! })
      yield* insert("rebooted-since", { pid: ended, boot_id: "an-earlier-boot" })
      yield* insert("other-pid-namespace", { pid: ended, pid_namespace: "pid:[1]" })
      yield* insert("other-host", { pid: ended, host: "elsewhere", boot_id: "", pid_namespace: "", started: "" })
      const live = yield* registry.live
      assert.deepStrictEqual(live.map((e) => [e.executor_id, e.holder]), [
        ["alive", `process ${process.pid} on ${os.hostname()}`],
        ["other-host", `process ${ended} on elsewhere`],
        ["other-pid-namespace", `process ${ended} on ${os.hostname()}`]
      ])
      const rows = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (client) => client<{ executor_id: string }>`SELECT executor_id FROM executors ORDER BY executor_id`
      )
      assert.deepStrictEqual(
        rows.map((row) => row.executor_id),
        ["alive", "other-host", "other-pid-namespace"]
      )
    }).pipe(Effect.provide(sql)))
})
