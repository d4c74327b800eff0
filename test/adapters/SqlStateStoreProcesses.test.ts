/**
 * Two processes finish the same Runs at once on one SQLite file (runs.md): for each Run exactly one terminal outcome
 * wins and the other is kept as audit, and neither process sees a store error. With deferred transactions (BEGIN,
 * not BEGIN IMMEDIATE) a finish that read before the other process wrote failed with SQLITE_BUSY instead.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlStateStore from "../../adapters/sql/SqlStateStore.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as StateStore from "../../core/state/StateStore.ts"
import { bundleChild, root } from "../fixtures/child.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const child = (script: string, args: ReadonlyArray<string>) =>
  Effect.async<{ code: number | null; stdout: string; stderr: string }>((resume) => {
    const p = spawn(process.execPath, [script, ...args], {
      env: { PATH: process.env.PATH ?? "", NODE_PATH: path.join(root, "node_modules") },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    p.stdout.on("data", (c) => stdout += c)
    p.stderr.on("data", (c) => stderr += c)
    p.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
  })

describe("two processes finish the same Runs", () => {
  it.scoped("each Run: one winner, one observation, no store error", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const script = path.join(dir, "child.cjs")
      yield* Effect.promise(() => bundleChild({ entry: path.join(root, "test/fixtures/finish-child.ts") }, script))
      const filename = path.join(dir, "writ.db")
      const runs = 2000
      const ids = yield* Effect.gen(function*() {
        const store = yield* StateStore.RunStore
        const out: Array<string> = []
        for (let i = 0; i < runs; i++) {
          const run = yield* store.createRun()
          yield* store.transition(run.run_id, "preparing", "queued")
          yield* store.transition(run.run_id, "queued", "running")
          out.push(run.run_id)
        }
        return out
      }).pipe(Effect.provide(SqlStateStore.layer.pipe(
        Layer.provide(Sqlite.layer({ filename, synchronous: "NORMAL" })),
        Layer.provide(IdGenerator.layerCrypto)
      )))
      const list = path.join(dir, "runs.txt")
      fs.writeFileSync(list, ids.join("\n"))
      const [a, b] = yield* Effect.all([
        child(script, [filename, list, "cancelled"]),
        child(script, [filename, list, "timed_out"])
      ], { concurrency: "unbounded" })
      assert.strictEqual(a.code, 0, a.stderr)
      assert.strictEqual(b.code, 0, b.stderr)
      const ta = JSON.parse(a.stdout)
      const tb = JSON.parse(b.stdout)
      const errors = [...ta.errors, ...tb.errors]
      assert.deepStrictEqual(
        { won: ta.won + tb.won, lost: ta.lost + tb.lost, errors: errors.length, first: errors[0] },
        { won: runs, lost: runs, errors: 0, first: undefined }
      )
    }), 120_000)
})
