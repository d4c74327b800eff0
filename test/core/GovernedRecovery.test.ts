import { assert, describe, it } from "@effect/vitest"
import { Chunk, Context, Effect, Layer, Schema, Stream } from "effect"
import * as MemoryApprovalQueue from "../../adapters/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../../adapters/MemoryStateStore.ts"
import * as Action from "../../core/Action.ts"
import type { EvidenceRecord, StoredRecord } from "../../core/Evidence.ts"
import { terminalTypes } from "../../core/Evidence.ts"
import * as EvidenceProjector from "../../core/EvidenceProjector.ts"
import { EvidenceProjectionSource, EvidenceStore, EvidenceUnavailableError } from "../../core/EvidenceStore.ts"
import * as Governance from "../../core/Governance.ts"
import * as Governed from "../../core/Governed.ts"
import * as IdGenerator from "../../core/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/Refs.ts"
import { base, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const actions = [
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.Struct({ stored: Schema.String }),
    handler: ({ text }) => ({ stored: text })
  })
]
const declaration = {
  policy_id: "gov",
  version: "1",
  approver_class: "lead",
  rules: [{ rule_id: "allow-notes", kind: "action", effect: "allow", action_patterns: ["notes.write"] }],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes"] }]
}

/** Memory evidence (store + projection source); appends fail from `failAt` on; with `lost` the failing append commits first. */
const flaky = (failAt: { current: number | undefined; lost?: boolean }) =>
  Layer.effectContext(Effect.gen(function*() {
    const store = yield* EvidenceStore
    const source = yield* EvidenceProjectionSource
    let appended = 0
    const appendAll = (records: ReadonlyArray<EvidenceRecord>) =>
      Effect.suspend(() => {
        const from = appended
        appended += records.length
        const injected = new EvidenceUnavailableError({ detail: "injected" })
        if (failAt.current === undefined || from + records.length <= failAt.current) return store.appendAll(records)
        if (failAt.lost !== true) return Effect.fail(injected)
        failAt.current = undefined
        return Effect.zipRight(store.appendAll(records), Effect.fail(injected))
      })
    return Context.make(
      EvidenceStore,
      EvidenceStore.of({
        ...store,
        append: (record) => Effect.map(appendAll([record]), (receipts) => receipts[0]!),
        appendAll
      })
    ).pipe(Context.add(EvidenceProjectionSource, source))
  })).pipe(Layer.provide(MemoryEvidenceStore.layer))

const layerWith = (failAt: { current: number | undefined; lost?: boolean }) =>
  Governed.layer().pipe(
    Layer.provideMerge(Governance.layerWriter),
    Layer.provideMerge(
      Layer.mergeAll(
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer,
        MemoryExecutorRegistry.layer,
        MemoryStateStore.layer,
        flaky(failAt)
      ).pipe(Layer.provideMerge(base(actions)))
    )
  )

const exec = (ref: PolicySnapshotRef, boundary: Governance.TaskBoundary, text: string) =>
  Effect.gen(function*() {
    return yield* run("notes.write", { text }, { request_id: yield* IdGenerator.uuid }, { policy_snapshot: ref }, {
      boundary
    })
  })

const records = (chain_id: string) =>
  Effect.flatMap(
    EvidenceStore,
    (store) =>
      Effect.map(
        Stream.runCollect(store.read(chain_id)),
        (c) => Chunk.toReadonlyArray(c) as ReadonlyArray<StoredRecord>
      )
  )

describe("forced recovery next to a lost start answer", () => {
  it.effect("a lost-answer start closed by a forced recovery in this process gets no second terminal", () =>
    Effect.gen(function*() {
      const injected = { current: undefined as number | undefined, lost: true }
      yield* Effect.gen(function*() {
        const ref = yield* installPolicy(declaration)
        const boundary = yield* Governance.openBoundary(ref)
        injected.current = 0
        assert.strictEqual((yield* Effect.flip(exec(ref, boundary, "x")))._tag, "GovernanceEvidenceError")
        const report = yield* EvidenceProjector.recover({ force: true })
        assert.strictEqual(report.closed.length, 1, JSON.stringify(report))
        assert.strictEqual((yield* exec(ref, boundary, "y"))._tag, "succeeded")
        const chain = yield* records(boundary.chain_id)
        const first = chain[1]!.operation_id
        const terminals = chain.filter((r) => r.operation_id === first && terminalTypes.has(r.record_type))
        assert.deepStrictEqual(
          terminals.map((r) => r.record_type),
          ["external_result_ambiguous"],
          chain.map((r) => `${r.sequence}:${r.record_type}:${r.operation_id?.slice(0, 8)}`).join(" ")
        )
      }).pipe(Effect.provide(layerWith(injected)))
    }))
})
