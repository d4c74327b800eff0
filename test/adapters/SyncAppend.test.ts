import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Governed from "../../core/execution/Governed.ts"
import { chainRecords, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

let ran = 0
const add = Action.make({
  name: "calc.add",
  input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  output: Schema.Number,
  handler: ({ a, b }) => {
    ran++
    return a + b
  }
})
const boom = Action.make({
  name: "calc.boom",
  input: Schema.Struct({}),
  output: Schema.Number,
  handler: () => {
    ran++
    throw new Error("boom")
  }
})

const policy = {
  policy_id: "sync",
  version: "1",
  rules: [
    { rule_id: "calc", kind: "action", effect: "allow", action_patterns: ["calc.*"] },
    { rule_id: "no-boom-twice", kind: "action", effect: "deny", action_patterns: ["calc.never"] }
  ],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["calc", "no-boom-twice"] }]
}

/** How often the store was asked to append through an Effect, and in the calling step. */
const counted = { effect: 0, now: 0 }

const countingStore = Layer.effect(
  EvidenceStore,
  Effect.map(MemoryEvidenceStore.make, (store) => {
    const { now } = store.appendAll
    const appendAll = (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
      counted.effect++
      return store.appendAll(records)
    }
    return {
      ...store,
      appendAll: now === undefined ? appendAll : Object.assign(appendAll, {
        now: (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
          counted.now++
          return now(records)
        }
      })
    }
  })
)

// NodeDigest hashes in the calling step; without its synchronous form every append takes the Effect path.
const { sha256TextSync: _, ...asynchronous } = NodeDigest.make
const layerWith = (digest: Digest.Service) =>
  Governed.layer().pipe(
    Layer.provideMerge(Governance.layerWriter),
    Layer.provideMerge(
      Layer.mergeAll(
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer,
        MemoryExecutorRegistry.layer,
        countingStore
      ).pipe(
        Layer.provideMerge(
          Layer.merge(ActionRegistry.layerWith([add, boom]), InProcessBackend.layer).pipe(
            Layer.provideMerge(Layer.merge(Layer.succeed(Digest, digest), IdGenerator.layerCrypto))
          )
        )
      )
    )
  )

/** Three calls (allowed, not in the policy, a handler that throws) on one boundary: the chain's shape. */
const workload = Effect.gen(function*() {
  const ref = yield* installPolicy(policy)
  const boundary = yield* Governance.openBoundary(ref)
  const pinned = { policy_snapshot: ref }
  const outcomes = [
    yield* run("calc.add", { a: 1, b: 2 }, {}, pinned, { boundary }),
    yield* run("calc.boom", {}, {}, pinned, { boundary }),
    yield* run("calc.add", { a: 2, b: 2 }, {}, pinned, { boundary })
  ].map((outcome) => outcome._tag)
  yield* Governance.closeBoundary(boundary)
  const chain = yield* chainRecords(boundary.chain_id)
  const verified = yield* Effect.flatMap(EvidenceStore, (store) => store.verify(boundary.chain_id))
  return {
    outcomes,
    valid: verified.valid,
    shape: chain.map((record) => `${record.record_type}(${Object.keys(JSON.parse(record.payload_json)).join(",")})`)
  }
})

describe("governed evidence appended in the calling step", () => {
  it.effect("writes the chain the Effect path writes, and takes the synchronous path after the first append", () =>
    Effect.gen(function*() {
      counted.effect = counted.now = 0
      const synchronous = yield* Effect.provide(workload, layerWith(NodeDigest.make))
      const sync = { ...counted }
      counted.effect = counted.now = 0
      const effectful = yield* Effect.provide(workload, layerWith(asynchronous))
      assert.deepStrictEqual(synchronous.outcomes, ["succeeded", "failed", "succeeded"])
      assert.deepStrictEqual(synchronous, effectful)
      assert.isTrue(synchronous.valid)
      // 3 calls of 3 appends each, and the close: the first append learns the head through an Effect.
      assert.deepStrictEqual(sync, { effect: 2, now: 8 })
      assert.deepStrictEqual(counted, { effect: 10, now: 0 })
    }))

  it.effect("a chain another writer moved refuses the synchronous append: the call fails closed and never runs", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(policy)
      const boundary = yield* Governance.openBoundary(ref)
      const pinned = { policy_snapshot: ref }
      assert.strictEqual((yield* run("calc.add", { a: 1, b: 1 }, {}, pinned, { boundary }))._tag, "succeeded")
      // A second writer over the same store appends to the chain behind the first one's back.
      const other = yield* Governance.makeWriter
      yield* other.append(boundary.chain_id, {
        record_type: "record_superseded",
        operation_id: null,
        policy_id: ref.policy_id,
        policy_version: ref.version,
        payload: { note: "foreign" }
      })
      ran = 0
      const failed = yield* Effect.either(run("calc.add", { a: 2, b: 2 }, {}, pinned, { boundary }))
      assert.isTrue(failed._tag === "Left" && failed.left._tag === "GovernanceEvidenceError")
      assert.isFalse(failed._tag === "Left" && "call_executed" in failed.left && failed.left.call_executed)
      assert.strictEqual(ran, 0, "the callable never ran")
      const chain = yield* chainRecords(boundary.chain_id)
      assert.strictEqual(chain[chain.length - 1]!.payload_json, JSON.stringify({ note: "foreign" }))
    }).pipe(Effect.provide(layerWith(NodeDigest.make))))

  it.effect("a stored record keeps no chain-input text, and the same record appended again is a duplicate", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(policy)
      const boundary = yield* Governance.openBoundary(ref)
      assert.strictEqual(
        (yield* run("calc.add", { a: 1, b: 1 }, {}, { policy_snapshot: ref }, { boundary }))._tag,
        "succeeded"
      )
      const chain = yield* chainRecords(boundary.chain_id)
      assert.deepStrictEqual(chain.map((record) => Evidence.takeSealedInput(record as Evidence.EvidenceRecord)), [
        undefined,
        undefined,
        undefined,
        undefined
      ])
      const store = yield* EvidenceStore
      const again = yield* Effect.flip(store.appendAll([chain[1] as Evidence.EvidenceRecord]))
      assert.deepStrictEqual([again._tag, "reason" in again ? again.reason : undefined], [
        "EvidenceConflictError",
        "duplicate_record"
      ])
      assert.isTrue((yield* store.verify(boundary.chain_id)).valid)
    }).pipe(Effect.provide(layerWith(NodeDigest.make))))
})
