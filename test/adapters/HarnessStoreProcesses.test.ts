/**
 * Processes recording verify runs into one data directory at once (`writ harness probe --verify` twice, say): each
 * read-modify-write of the store's file holds its lock, so no process's runs are lost to another's write.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as HarnessStore from "../../adapters/node/HarnessStore.ts"
import { bundleChild, root } from "../fixtures/child.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const child = (script: string, args: ReadonlyArray<string>) =>
  Effect.async<{ code: number | null; stderr: string }>((resume) => {
    const p = spawn(process.execPath, [script, ...args], { env: { PATH: process.env.PATH ?? "" }, stdio: "pipe" })
    let stderr = ""
    p.stderr.on("data", (c) => stderr += c)
    p.on("close", (code) => resume(Effect.succeed({ code, stderr })))
  })

describe("the harness store written by processes at once", () => {
  it.scoped(
    "six processes recording 25 verify runs each: all 150 are kept, and no lock is left",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const script = path.join(dir, "child.cjs")
        yield* Effect.promise(() =>
          bundleChild({ entry: path.join(root, "test/fixtures/verify-record-child.ts") }, script)
        )
        const data = path.join(dir, "data")
        const ended = yield* Effect.all(
          Array.from({ length: 6 }, (_, p) => child(script, [data, `p${p}`, "25"])),
          { concurrency: "unbounded" }
        )
        for (const { code, stderr } of ended) assert.strictEqual(code, 0, stderr)
        const runs = yield* HarnessStore.make(data).verifications
        const kept = new Set(runs.map((run) => run.run_id))
        assert.strictEqual(kept.size, 150, `kept ${kept.size} of 150`)
        for (let p = 0; p < 6; p++) for (let i = 0; i < 25; i++) assert.isTrue(kept.has(`p${p}-${i}`), `p${p}-${i}`)
        assert.deepStrictEqual(fs.readdirSync(path.join(data, "harness")).sort(), ["verify.json"])
      }),
    120_000
  )

  it.live("a lock its holder left behind when it died is taken over", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "harness", "verify.json")
      fs.mkdirSync(path.dirname(file), { recursive: true })
      // A pid no process has: the largest a Linux pid can be.
      fs.writeFileSync(`${file}.lock`, "4194304")
      const store = HarnessStore.make(dir)
      yield* store.record([])
      assert.deepStrictEqual(yield* store.verifications, [])
      assert.isFalse(fs.existsSync(`${file}.lock`), "the dead holder's lock is gone")
    })))
})
