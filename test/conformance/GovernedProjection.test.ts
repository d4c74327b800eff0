/**
 * Governed durable state is a projection of committed evidence: a governed call in a durable Run becomes one of the
 * Run's attempts (with its outcome intent) when the projector applies its terminal record, once, in both layers; the
 * executor drains the projector as the call concludes (stage 14), and says when that drain failed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Layer, Logger, Schema, Stream, TestClock } from "effect"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import { appendOperation } from "../../core/evidence/internal/writer.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import { ProjectionStore } from "../../core/state/ProjectionStore.ts"
import { RunStore } from "../../core/state/RunStore.ts"
import { StateStoreUnavailableError, summarize } from "../../core/state/StateStore.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { tempDir } from "../fixtures/sqlite.ts"
import { patched, stateStores } from "../fixtures/state.ts"

/** Holds `notes.wait` inside its call, once set: `entered` when it runs, then until `release`. */
const gate: { held?: { readonly entered: Deferred.Deferred<void>; readonly release: Deferred.Deferred<void> } } = {}

const actions = [
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: ({ text }) => text
  }),
  Action.make({
    name: "notes.fail",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.fail(new Action.ActionError({ code: "notes.broken", message: "no" }))
  }),
  Action.make({
    name: "notes.wait",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () =>
      gate.held === undefined
        ? Effect.succeed("free")
        : Effect.zipRight(
          Deferred.succeed(gate.held.entered, undefined),
          Effect.as(Deferred.await(gate.held.release), "held")
        )
  }),
  Action.make({ name: "notes.publish", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined })
]

const declaration = {
  policy_id: "projection",
  version: "1",
  rules: [
    { rule_id: "allow-notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
    { rule_id: "no-publish", kind: "action", effect: "deny", action_patterns: ["notes.publish"] }
  ],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes", "no-publish"] }]
}

const memoryStores = Governance.layerWriter.pipe(
  Layer.provideMerge(Layer.mergeAll(
    MemoryEvidenceStore.layer,
    MemoryStateStore.layer,
    MemoryPolicySnapshotStore.layer,
    MemoryApprovalQueue.layer,
    MemoryExecutorRegistry.layer
  )),
  Layer.provideMerge(Embedded.layerPlatform)
)

const sqlStores = Layer.unwrapScoped(
  Effect.map(tempDir, (dir) => Embedded.layerStores({ filename: path.join(dir, "writ.db") }))
)

const governed = <E>(
  stores: Layer.Layer<Layer.Layer.Success<typeof memoryStores>, E>,
  config: Parameters<typeof Governed.layer>[0] = {}
) =>
  Governed.layer(config).pipe(
    Layer.provideMerge(Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer)),
    Layer.provideMerge(stores)
  )

/** What the stores `steeredProjection` wraps do: refuse projection batches, hold the next one, count drains. */
const steering: {
  refuse: boolean
  hold?: { readonly entered: Deferred.Deferred<void>; readonly release: Deferred.Deferred<void> }
  drains: number
} = { refuse: false, drains: 0 }

/** `stores` whose ProjectionStore counts drains (each reads its cursor once) and refuses or holds batches as `steering` says. */
const steeredProjection = <E>(stores: Layer.Layer<Layer.Layer.Success<typeof memoryStores>, E>) =>
  patched(ProjectionStore, (store) => ({
    projectionCursor: (projector) => Effect.suspend(() => (steering.drains++, store.projectionCursor(projector))),
    applyProjection: (input) => {
      const hold = steering.hold
      delete steering.hold
      const applied = Effect.suspend(() =>
        steering.refuse
          ? Effect.fail(new StateStoreUnavailableError({ detail: "injected" }))
          : store.applyProjection(input)
      )
      return hold === undefined ? applied : Effect.zipRight(
        Effect.zipRight(Deferred.succeed(hold.entered, undefined), Deferred.await(hold.release)),
        applied
      )
    }
  })).pipe(Layer.provideMerge(stores))

const setup = Effect.gen(function*() {
  const state = yield* RunStore
  const ref = yield* installPolicy(declaration)
  const created = yield* state.createRun()
  yield* state.transition(created.run_id, "preparing", "queued")
  yield* state.transition(created.run_id, "queued", "running")
  const boundary = yield* Governance.openBoundary(ref)
  const execution_scope = DurableRun.make({ run_id: created.run_id })
  const inRun = (action: string, args: Record<string, unknown>) =>
    run(action, args, { execution_scope }, { policy_snapshot: ref }, { boundary })
  return { run_id: created.run_id, ref, boundary, inRun }
})

const summaryOf = (outcome: ExecutionOutcome) => {
  const summary = summarize(outcome)
  return [outcome.attempt_id, summary.tag, summary.reason_code, summary.call_executed]
}

for (const [name, stores] of [["memory", memoryStores], ["sql", sqlStores]] as const) {
  describe(`governed Run projection: ${name}`, () => {
    it.scoped("each governed call in a durable Run is projected once as its attempt, with its outcome intent", () =>
      Effect.gen(function*() {
        const state = yield* stateStores
        const { boundary, inRun, ref, run_id } = yield* setup
        const outcomes = [
          yield* inRun("notes.write", { text: "a" }),
          yield* inRun("notes.fail", {}),
          yield* inRun("notes.publish", {})
        ]
        assert.deepStrictEqual(outcomes.map((o) => o._tag), ["succeeded", "failed", "denied"])
        const outside = yield* run("notes.write", { text: "b" }, {}, { policy_snapshot: ref }, { boundary })
        assert.strictEqual(outside._tag, "succeeded")
        assert.isTrue(outcomes.every((o) => o.projection_pending === undefined), "each projected as it concluded")

        const drained = yield* EvidenceProjector.drain()
        assert.strictEqual(drained.inserted, 4, "the call outside any Run: its records, projected by the next drain")
        const attempts = yield* state.listAttempts(run_id)
        assert.deepStrictEqual(
          attempts.map((a) => [a.attempt_id, a.outcome.tag, a.outcome.reason_code, a.outcome.call_executed]),
          outcomes.map(summaryOf)
        )
        assert.deepStrictEqual(attempts.map((a) => a.outcome.result_digest !== null), [true, false, false])
        assert.deepStrictEqual(attempts.map((a) => a.action_name), ["notes.write", "notes.fail", "notes.publish"])
        for (const attempt of attempts) assert.match(attempt.arguments_digest!, /^[0-9a-f]{64}$/)
        const intents = yield* state.pendingIntents(100)
        assert.deepStrictEqual(
          intents.map((i) => [i.attempt_id, i.topic]),
          attempts.map((a) => [a.attempt_id, "writ.outcome"])
        )

        yield* EvidenceProjector.drain({ projector: "again" })
        assert.strictEqual((yield* state.listAttempts(run_id)).length, 3, "a replay projects no attempt twice")
        assert.strictEqual((yield* state.pendingIntents(100)).length, 3)
      }).pipe(Effect.provide(governed(stores))))

    it.scoped("an owner attempt the Run does not hold is refused at stage 3, before any operation; its own is taken", () =>
      Effect.gen(function*() {
        const { boundary, inRun, ref, run_id } = yield* setup
        const first = yield* inRun("notes.write", { text: "a" })
        const owned = (owner_attempt_id: string) =>
          run(
            "notes.write",
            { text: "b" },
            {
              execution_scope: DurableRun.make({ run_id, owner_attempt_id: Uuid.make(owner_attempt_id) })
            },
            { policy_snapshot: ref },
            { boundary }
          )
        const nested = yield* owned(first.attempt_id)
        const forged = yield* owned(yield* IdGenerator.uuid)
        assert.deepStrictEqual(
          [nested._tag, forged._tag === "denied" ? [forged.reason.code, forged.stage] : forged._tag],
          ["succeeded", ["scope.owner_attempt_mismatch", "bind_context"]]
        )
        const chain = yield* Effect.flatMap(EvidenceStore, (store) => Stream.runCollect(store.read(boundary.chain_id)))
        const operations = Chunk.toArray(chain).filter((r) => r.record_type === "operation_started")
        assert.strictEqual(operations.length, 2, "the refused call opened no operation")
      }).pipe(Effect.provide(governed(stores))))

    it.scoped("a drain that fails leaves the outcome projection_pending, logged; the next drain projects it", () =>
      Effect.gen(function*() {
        const state = yield* stateStores
        const { inRun, run_id } = yield* setup
        const logged: Array<unknown> = []
        const logger = Logger.make(({ message }) => void logged.push(message))
        steering.refuse = true
        const pending = yield* inRun("notes.write", { text: "a" }).pipe(
          Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
          Effect.ensuring(Effect.sync(() => (steering.refuse = false)))
        )
        assert.deepStrictEqual([pending._tag, pending.projection_pending], ["succeeded", true])
        assert.include(String(logged), "projection into its Run is pending")
        assert.deepStrictEqual(yield* state.listAttempts(run_id), [])
        const next = yield* inRun("notes.write", { text: "b" })
        assert.strictEqual(next.projection_pending, undefined)
        assert.deepStrictEqual(
          (yield* state.listAttempts(run_id)).map((a) => a.attempt_id),
          [pending.attempt_id, next.attempt_id]
        )
      }).pipe(Effect.provide(governed(steeredProjection(stores)))))

    it.scoped("a start naming a Run this store does not hold projects its records, and no attempt", () =>
      Effect.gen(function*() {
        const state = yield* stateStores
        const writer = yield* Governance.EvidenceWriter
        const [chain_id, operation_id, run_id, attempt_id] = [
          yield* IdGenerator.uuid,
          yield* IdGenerator.uuid,
          yield* IdGenerator.uuid,
          yield* IdGenerator.uuid
        ]
        const draft = { operation_id, policy_id: "projection", policy_version: "1" }
        yield* appendOperation(writer, chain_id, [{
          ...draft,
          record_type: "operation_started",
          payload: {
            attempt_id,
            request_id: "elsewhere",
            scope: { kind: "durable_run", run_id, owner_attempt_id: null },
            action: { name: "notes.write", version: "1" },
            arguments_digest: null
          }
        }, {
          ...draft,
          record_type: "callable_completed",
          payload: { stage: "outcome", attempt_id, result_digest: null, replay_of: null }
        }])
        const drained = yield* EvidenceProjector.drain()
        assert.strictEqual(drained.inserted, 2)
        assert.deepStrictEqual(yield* state.listAttempts(run_id), [])
        assert.deepStrictEqual(yield* state.pendingIntents(10), [])
      }).pipe(Effect.provide(governed(stores))))

    it.scoped("an operation whose start an earlier drain projected is projected when its terminal record comes", () =>
      Effect.gen(function*() {
        const state = yield* stateStores
        const { inRun, run_id } = yield* setup
        const held = { entered: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
        gate.held = held
        const fiber = yield* Effect.fork(inRun("notes.wait", {}))
        yield* Deferred.await(held.entered)
        yield* EvidenceProjector.drain()
        assert.strictEqual((yield* state.projectedOperations({ open_only: true })).length, 1)
        assert.deepStrictEqual(yield* state.listAttempts(run_id), [])
        yield* Deferred.succeed(held.release, undefined)
        const outcome = yield* Fiber.join(fiber)
        delete gate.held
        yield* EvidenceProjector.drain()
        assert.deepStrictEqual((yield* state.listAttempts(run_id)).map((a) => [a.attempt_id, a.outcome.tag]), [[
          outcome.attempt_id,
          "succeeded"
        ]])
      }).pipe(Effect.provide(governed(stores))))
  })
}

/** How many operations on a chain have their terminal record. */
const terminalsOn = (chain_id: string) =>
  Effect.flatMap(EvidenceStore, (store) =>
    Effect.map(
      Stream.runCollect(store.read(chain_id)),
      (records) => Chunk.filter(records, (record) => terminalTypes.has(record.record_type)).length
    ))

/**
 * The first call's drain held in its `applyProjection` while `others`, in the boundary whose chain is `chain_id`,
 * conclude (their terminal records committed) and wait for the next drain; then all joined.
 */
const concludeWhileHeld = (
  chain_id: string,
  inRun: (text: string) => ReturnType<typeof run>,
  others: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const hold = { entered: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
    steering.hold = hold
    const first = yield* Effect.fork(inRun("first"))
    yield* Deferred.await(hold.entered)
    const before = steering.drains
    const waiting = yield* Effect.forEach(others, (text) => Effect.fork(inRun(text)))
    // Each has concluded once its terminal record is in, and is waiting for the held drain once it is suspended.
    while (
      (yield* terminalsOn(chain_id)) < 1 + others.length ||
      (yield* Effect.forEach(waiting, Fiber.status)).some((status) => status._tag === "Running")
    ) {
      yield* Effect.yieldNow()
    }
    yield* Deferred.succeed(hold.release, undefined)
    const outcomes = [yield* Fiber.join(first), ...(yield* Effect.forEach(waiting, Fiber.join))]
    return { outcomes, drains: steering.drains - before }
  })

describe("governed Run projection: the executor's drains", () => {
  it.scoped("calls that conclude while a drain runs share the next one", () =>
    Effect.gen(function*() {
      const state = yield* stateStores
      const { boundary, inRun, run_id } = yield* setup
      const { drains, outcomes } = yield* concludeWhileHeld(
        boundary.chain_id,
        (text) => inRun("notes.write", { text }),
        ["b", "c", "d"]
      )
      assert.strictEqual(drains, 1, "one drain for the three calls")
      assert.isTrue(outcomes.every((o) => o._tag === "succeeded" && o.projection_pending === undefined))
      assert.deepStrictEqual(
        (yield* state.listAttempts(run_id)).map((a) => a.attempt_id),
        outcomes.map((o) => o.attempt_id)
      )
    }).pipe(Effect.provide(governed(steeredProjection(memoryStores)))))

  it.scoped("calls that conclude while a drain runs share its successor's failure too: one drain, all pending", () =>
    Effect.gen(function*() {
      const { boundary, inRun } = yield* setup
      steering.refuse = true
      const { drains, outcomes } = yield* concludeWhileHeld(
        boundary.chain_id,
        (text) => inRun("notes.write", { text }),
        ["b", "c", "d"]
      )
        .pipe(Effect.ensuring(Effect.sync(() => (steering.refuse = false))))
      assert.strictEqual(drains, 1)
      assert.isTrue(outcomes.every((o) => o._tag === "succeeded" && o.projection_pending === true))
    }).pipe(Effect.provide(governed(steeredProjection(memoryStores)))))

  it.scoped("a deadline or a cancellation while a call waits on its drain leaves its outcome pending, not late", () =>
    Effect.gen(function*() {
      const state = yield* stateStores
      const { boundary, ref, run_id } = yield* setup
      const execution_scope = DurableRun.make({ run_id })
      const stopped = (stop: "deadline" | "cancel") =>
        Effect.gen(function*() {
          const hold = { entered: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
          steering.hold = hold
          const cancel = yield* Deferred.make<void>()
          const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
          const call = yield* Effect.fork(run(
            "notes.write",
            { text: stop },
            { execution_scope, ...(stop === "deadline" ? { deadline } : {}) },
            { policy_snapshot: ref },
            { boundary, ...(stop === "cancel" ? { cancel } : {}) }
          ))
          yield* Deferred.await(hold.entered)
          yield* stop === "deadline" ? TestClock.adjust("2 seconds") : Deferred.succeed(cancel, undefined)
          return yield* Fiber.join(call)
        })
      const outcomes = [yield* stopped("deadline"), yield* stopped("cancel")]
      assert.deepStrictEqual(outcomes.map((o) => [o._tag, o.projection_pending]), [["succeeded", true], [
        "succeeded",
        true
      ]])
      yield* EvidenceProjector.drain()
      assert.deepStrictEqual(
        (yield* state.listAttempts(run_id)).map((a) => a.attempt_id),
        outcomes.map((o) => o.attempt_id)
      )
    }).pipe(Effect.provide(governed(steeredProjection(memoryStores)))))

  it.scoped("a call waiting for its Run's projection holds no capacity", () =>
    Effect.gen(function*() {
      const { boundary, inRun, ref } = yield* setup
      // The second call, outside any Run, runs while the first waits on its drain: the one permit is free.
      const { outcomes } = yield* concludeWhileHeld(
        boundary.chain_id,
        (text) =>
          text === "first"
            ? inRun("notes.write", { text })
            : run("notes.write", { text }, {}, { policy_snapshot: ref }, { boundary }),
        ["outside"]
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["succeeded", "succeeded"])
    }).pipe(Effect.provide(
      governed(steeredProjection(memoryStores), { capacity: [Capacity.bounded({ id: "one", permits: 1 })] })
    )))
})
