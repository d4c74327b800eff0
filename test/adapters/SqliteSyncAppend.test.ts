import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as SqlExecutorRegistry from "../../adapters/node/SqlExecutorRegistry.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqliteEvidenceStore from "../../adapters/node/SqliteEvidenceStore.ts"
import * as SqlApprovalQueue from "../../adapters/sql/SqlApprovalQueue.ts"
import * as SqlBudgetLedger from "../../adapters/sql/SqlBudgetLedger.ts"
import * as SqlEvidenceStore from "../../adapters/sql/SqlEvidenceStore.ts"
import * as SqlPolicySnapshotStore from "../../adapters/sql/SqlPolicySnapshotStore.ts"
import * as SqlStateStore from "../../adapters/sql/SqlStateStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import type * as Evidence from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { chainRecords, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const add = Action.make({
  name: "calc.add",
  input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  output: Schema.Number,
  handler: ({ a, b }) => a + b
})

const policy = {
  policy_id: "sqlite-sync",
  version: "1",
  rules: [{ rule_id: "calc", kind: "action", effect: "allow", action_patterns: ["calc.*"] }],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["calc"] }]
}

/** Appends the store committed through an Effect, and in the calling step. */
const counted = { effect: 0, now: 0 }

/** The store's dispatch, counting each append by the way it was committed. */
const counting = (dispatch: SqlEvidenceStore.Dispatch): SqlEvidenceStore.Dispatch => (commit, maxBatch) =>
  Effect.map(dispatch(commit, maxBatch), (submit) => {
    const effect = (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
      counted.effect++
      return submit(records)
    }
    const now = submit.now
    return now === undefined ? effect : Object.assign(effect, {
      now: (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
        const placed = now(records)
        if (placed !== undefined) counted.now++
        return placed
      }
    })
  })

/** The governed executor over every SQL store on a fresh file, its evidence dispatched as `direct` says. */
const governedOnSqlite = (direct: boolean) =>
  Layer.unwrapScoped(Effect.map(tempDir, (dir) => {
    const filename = path.join(dir, "writ.db")
    const dispatch = direct ? SqliteEvidenceStore.dispatchCommitThread({ filename }) : undefined
    return Governed.layer().pipe(
      Layer.provideMerge(Governance.layerWriter),
      Layer.provideMerge(
        Layer.mergeAll(
          SqlEvidenceStore.layerWith(dispatch === undefined ? {} : { dispatch: counting(dispatch) }),
          SqlStateStore.layer,
          SqlPolicySnapshotStore.layer,
          SqlApprovalQueue.layer,
          SqlBudgetLedger.layer,
          SqlExecutorRegistry.layer,
          ActionRegistry.layerWith([add]),
          InProcessBackend.layer
        )
      ),
      Layer.provideMerge(Sqlite.layer({ filename })),
      Layer.provideMerge(Embedded.layerPlatform)
    )
  }))

/**
 * The boundaries opened and each given a first call one by one (so every chain's head is known), then `calls` more
 * calls on each, all boundaries at once, counted from there: each chain's record types, verified.
 */
const workload = (boundaries: number, calls: number) =>
  Effect.gen(function*() {
    const ref = yield* installPolicy(policy)
    const store = yield* EvidenceStore
    const pinned = { policy_snapshot: ref }
    const opened = yield* Effect.forEach(Array.from({ length: boundaries }), () =>
      Effect.tap(
        Governance.openBoundary(ref),
        (boundary) => run("calc.add", { a: 0, b: 0 }, {}, pinned, { boundary })
      ))
    counted.effect = counted.now = 0
    return yield* Effect.forEach(opened, (boundary) =>
      Effect.gen(function*() {
        for (let i = 0; i < calls; i++) {
          const outcome = yield* run("calc.add", { a: i, b: 1 }, {}, pinned, { boundary })
          assert.strictEqual(outcome._tag, "succeeded")
        }
        yield* Governance.closeBoundary(boundary)
        assert.isTrue((yield* store.verify(boundary.chain_id)).valid)
        return (yield* chainRecords(boundary.chain_id)).map((record) => record.record_type)
      }), { concurrency: "unbounded" })
  })

describe("governed evidence on SQLite committed in the calling step", () => {
  it.effect("an operation running alone commits on the direct connection: the chain the effect path writes", () =>
    Effect.gen(function*() {
      const direct = yield* Effect.provide(workload(1, 3), governedOnSqlite(true))
      const { effect, now } = counted
      const viaEffect = yield* Effect.provide(workload(1, 3), governedOnSqlite(false))
      assert.deepStrictEqual(direct, viaEffect)
      // 3 calls of 3 commits each in the calling step, and the close of the boundary.
      assert.deepStrictEqual({ effect, now }, { effect: 1, now: 9 })
    }))

  it.effect("operations running together group-commit: none commits in its calling step, and every chain verifies", () =>
    Effect.gen(function*() {
      const chains = yield* Effect.provide(workload(16, 4), governedOnSqlite(true))
      assert.strictEqual(chains.length, 16)
      for (const chain of chains) assert.strictEqual(chain.length, 5 * 4 + 1)
      // While any other runs, an operation's commits join the store's group commit; only the last one may run alone.
      assert.isAtLeast(counted.effect, 16 * 4 * 3 + 16 - 3)
      assert.isAtMost(counted.now, 3)
    }))
})
