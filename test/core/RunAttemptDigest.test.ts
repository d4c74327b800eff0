import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Layer, Schema, Stream } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import type * as Interceptor from "../../core/execution/Interceptor.ts"
import { durableInMemory, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { stateStores } from "../fixtures/state.ts"

const actions = [
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: ({ text }) => text
  })
]
const declaration = {
  policy_id: "projection",
  version: "1",
  rules: [{ rule_id: "allow-notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] }],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes"] }]
}
const transformers: ReadonlyArray<Interceptor.Transformer> = [{
  id: "upper",
  transform: (evaluation) => Effect.succeed({ text: String(evaluation.arguments.text).toUpperCase() })
}]

const stores = Layer.mergeAll(
  MemoryEvidenceStore.layer,
  durableInMemory,
  MemoryPolicySnapshotStore.layer,
  MemoryApprovalQueue.layer,
  MemoryExecutorRegistry.layer
).pipe(Layer.provideMerge(Layer.merge(WebCryptoDigest.layer, IdGenerator.layerCrypto)))

const inRun = (ref?: PolicySnapshotRef, boundary?: Governance.TaskBoundary) =>
  Effect.gen(function*() {
    const state = yield* stateStores
    const created = yield* state.createRun()
    yield* state.transition(created.run_id, "preparing", "queued")
    yield* state.transition(created.run_id, "queued", "running")
    const execution_scope = DurableRun.make({ run_id: created.run_id })
    const outcome = yield* run(
      "notes.write",
      { text: "a" },
      { execution_scope },
      ref === undefined ? {} : { policy_snapshot: ref },
      boundary === undefined ? {} : { boundary }
    )
    return { outcome, run_id: created.run_id }
  })

describe("a governed Run attempt's arguments digest", () => {
  it.effect("a governed Run attempt records the digest of the arguments the call ran with, as the durable one does", () =>
    Effect.gen(function*() {
      const durable = yield* Effect.gen(function*() {
        const { run_id } = yield* inRun()
        return (yield* (yield* stateStores).listAttempts(run_id))[0]!.arguments_digest
      }).pipe(Effect.provide(
        ActionExecutor.layerDurable({ transformers }).pipe(
          Layer.provideMerge(Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer)),
          Layer.provideMerge(stores)
        )
      ))
      const governed = yield* Effect.gen(function*() {
        const ref = yield* installPolicy(declaration)
        const boundary = yield* Governance.openBoundary(ref)
        const { outcome, run_id } = yield* inRun(ref, boundary)
        assert.strictEqual(outcome._tag, "succeeded")
        yield* EvidenceProjector.drain()
        const chain = Chunk.toReadonlyArray(
          yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id))
        )
        const gates = chain.filter((r) => r.record_type === "gate_evaluated").map((r) =>
          JSON.parse(r.payload_json).arguments_digest
        )
        return { attempt: (yield* (yield* stateStores).listAttempts(run_id))[0]!.arguments_digest, gates }
      }).pipe(
        Effect.scoped,
        Effect.provide(
          Governed.layer({ transformers }).pipe(
            Layer.provideMerge(Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer)),
            Layer.provideMerge(Governance.layerWriter.pipe(Layer.provideMerge(stores)))
          )
        )
      )
      assert.strictEqual(governed.gates.at(-1), durable, "the last gate evaluated the transformed arguments")
      assert.strictEqual(governed.attempt, durable, JSON.stringify(governed))
    }))
})
