/**
 * The SQL VerifyRunStore on real SQLite files: a recorded run replaces the earlier ones of its control for the same
 * version and executable, survives reopening the file, and a row something other than writ wrote fails the read by
 * name instead of counting as a verified control.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Either, Layer } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlVerifyRunStore from "../../adapters/sql/SqlVerifyRunStore.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { VerifyRun } from "../../core/harness/CapabilityReport.ts"
import { VerifyRunStore } from "../../core/harness/VerifyRunStore.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => {
  readonly exec: (sql: string) => unknown
  readonly close: () => unknown
}

const run = (control: VerifyRun["control"], scenario: string, effect_absent: boolean, provider_version = "2.1.328") =>
  new VerifyRun({
    control,
    provider_version,
    executable_digest: Sha256Hex.make("a".repeat(64)),
    scenario,
    run_id: `run-${scenario}`,
    effect_absent
  })

const opened = (filename: string) =>
  Effect.map(
    Layer.build(SqlVerifyRunStore.layer.pipe(Layer.provide(Sqlite.layer({ filename })))),
    (context) => Context.get(context, VerifyRunStore)
  )

describe("SqlVerifyRunStore", () => {
  it.scoped("a run replaces its control's earlier runs for the same version and executable, and survives reopening", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const first = yield* opened(filename)
      yield* first.record([run("fs.write_roots@1", "write-outside", false), run("network.egress@1", "connect", true)])
      yield* first.record([run("fs.write_roots@1", "write-outside-again", true)])
      yield* first.record([run("fs.write_roots@1", "older-version", false, "2.0.0")])
      const again = yield* opened(filename)
      const kept = (yield* again.verifications).map((r) => [r.control, r.scenario, r.effect_absent, r.provider_version])
      assert.deepStrictEqual(kept, [
        ["network.egress@1", "connect", true, "2.1.328"],
        ["fs.write_roots@1", "write-outside-again", true, "2.1.328"],
        ["fs.write_roots@1", "older-version", false, "2.0.0"]
      ])
    }))

  it.scoped("a row another writer put there that is no verify run fails the read, naming it", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const store = yield* opened(filename)
      yield* store.record([run("fs.write_roots@1", "write-outside", true)])
      const foreign = new Database(filename)
      foreign.exec(
        "INSERT INTO harness_verifications (control, provider_version, executable_digest, scenario, run_id, " +
          "effect_absent) VALUES ('everything@1', '2.1.328', 'not-a-digest', 's', 'r', 1)"
      )
      foreign.close()
      const read = yield* Effect.either(store.verifications)
      assert.isTrue(Either.isLeft(read))
      if (Either.isLeft(read)) {
        assert.strictEqual(read.left._tag, "HarnessError")
        assert.include(read.left.message, "the recorded verify runs cannot be read")
      }
    }))
})
