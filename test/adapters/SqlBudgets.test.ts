import { assert, describe, it } from "@effect/vitest"
import type { Context } from "effect"
import { Effect, Layer, Schema } from "effect"
import * as path from "node:path"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlBudgetLedger from "../../adapters/sql/SqlBudgetLedger.ts"
import * as SqlPolicySnapshotStore from "../../adapters/sql/SqlPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionUsage from "../../core/action/ActionUsage.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { exec, install, summary } from "../fixtures/budgets.ts"
import { base } from "../fixtures/layers.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const actions = [
  Action.make({
    name: "model.complete",
    input: Schema.Struct({ tokens: Schema.optionalWith(Schema.Number, { default: () => 0 }) }),
    output: Schema.String,
    handler: ({ tokens }) => Effect.as(ActionUsage.report({ tokens }), "done")
  })
]

describe("budgets kept in the database", () => {
  // An executor over a database file, with ids of its own: what a restarted process or a second one builds.
  const onFile = (filename: string, seed: number) =>
    ActionExecutor.layerPolicyGated().pipe(
      Layer.provideMerge(Layer.mergeAll(SqlPolicySnapshotStore.layer, SqlBudgetLedger.layer)),
      Layer.provideMerge(Sqlite.layer({ filename })),
      Layer.provideMerge(base(actions, seed))
    )
  const executorOn = (filename: string, seed: number) => Layer.build(onFile(filename, seed))
  const execWith = (
    executor: Context.Context<Layer.Layer.Success<ReturnType<typeof onFile>>>,
    args: Record<string, unknown>,
    ref: PolicySnapshotRef
  ) => Effect.provide(exec("model.complete", args, ref), executor)

  it.scoped("a restarted executor sees the calls admitted before the restart", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const calls = yield* Effect.provide(install("calls", 2), onFile(filename, 1))
      const before = yield* executorOn(filename, 1)
      assert.strictEqual(summary(yield* execWith(before, {}, calls)), "succeeded")
      assert.strictEqual(summary(yield* execWith(before, {}, calls)), "succeeded")
      const after = yield* executorOn(filename, 2)
      assert.strictEqual(summary(yield* execWith(after, {}, calls)), "deferred budget.exhausted")
    }))

  it.scoped("two executors on one database share every window", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const tokens = yield* Effect.provide(install("tokens", 100), onFile(filename, 1))
      const [first, second] = [yield* executorOn(filename, 3), yield* executorOn(filename, 4)]
      assert.strictEqual(summary(yield* execWith(first, { tokens: 60 }, tokens)), "succeeded")
      assert.strictEqual(summary(yield* execWith(second, { tokens: 60 }, tokens)), "succeeded")
      assert.strictEqual(summary(yield* execWith(first, { tokens: 1 }, tokens)), "deferred budget.exhausted")
      assert.strictEqual(summary(yield* execWith(second, { tokens: 1 }, tokens)), "deferred budget.exhausted")
    }))
})
