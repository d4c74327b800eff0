/**
 * Gate 14 next to other writers: recovery refused while an executor process has the store open (and allowed once it
 * is gone), forced recovery while a live process concludes an operation, and two recoveries at once.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import type { Context } from "effect"
import { Chunk, Deferred, Effect, Fiber, Layer, Schema, Scope, Stream } from "effect"
import type { ChildProcess } from "node:child_process"
import { spawn } from "node:child_process"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { ExecutorRegistry } from "../../core/evidence/ExecutorRegistry.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { ProjectionStore } from "../../core/state/ProjectionStore.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { appendGranted } from "../fixtures/evidence.ts"
import { run } from "../fixtures/layers.ts"
import { bound, installPolicy, unconfigured } from "../fixtures/policy.ts"
import { root } from "../fixtures/sources.ts"
import { tempDir } from "../fixtures/sqlite.ts"
import { patched } from "../fixtures/state.ts"

const tempFile = Effect.map(tempDir, (dir) => path.join(dir, "writ.db"))

/** A "process": its own connection, stores and EvidenceWriter on the shared file. */
const build = <ROut>(layer: Layer.Layer<ROut, unknown, never>) => Layer.build(layer)

const declaration = {
  policy_id: "review",
  version: "1",
  rules: [{ rule_id: "allow-notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] }],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes"] }],
  interceptors: bound("slow.guard")
}

/** A live executor process whose `notes.block` callable waits inside the call until released. */
const liveProcess = (filename: string, entered: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Governed.layer().pipe(
    Layer.provideMerge(Layer.merge(
      ActionRegistry.layerWith([
        Action.make({
          name: "notes.block",
          input: Schema.Struct({}),
          output: Schema.String,
          handler: () =>
            Effect.zipRight(Deferred.succeed(entered, undefined), Effect.as(Deferred.await(release), "done"))
        })
      ]),
      InProcessBackend.layer
    )),
    Layer.provideMerge(Embedded.layerStores({ filename }))
  )

const install = installPolicy(declaration)

/** A live executor process whose guard holds each call before its gate results until released. */
const guardedProcess = (
  filename: string,
  entered: Deferred.Deferred<void>,
  release: Deferred.Deferred<void>,
  calls: { count: number }
) =>
  Governed.layer({
    interceptors: [{
      id: "slow.guard",
      identity: unconfigured,
      stage: "guard",
      evaluate: () =>
        Effect.zipRight(Deferred.succeed(entered, undefined), Effect.as(Deferred.await(release), Interceptor.allow()))
    }]
  }).pipe(
    Layer.provideMerge(Layer.merge(
      ActionRegistry.layerWith([
        Action.make({
          name: "notes.write",
          input: Schema.Struct({}),
          output: Schema.String,
          handler: () => Effect.sync(() => String(++calls.count))
        })
      ]),
      InProcessBackend.layer
    )),
    Layer.provideMerge(Embedded.layerStores({ filename }))
  )

const chainRecords = (chain_id: string) =>
  Effect.flatMap(EvidenceStore, (store) => Effect.map(Stream.runCollect(store.read(chain_id)), Chunk.toReadonlyArray))

/** An orphan in the stores of `process`: started, gated, never concluded (what a SIGKILL before its terminal leaves). */
const orphanIn = (process: Context.Context<Governance.EvidenceWriter | IdGenerator.IdGenerator>) =>
  Effect.gen(function*() {
    const writer = yield* Governance.EvidenceWriter
    const chain = yield* IdGenerator.uuid
    const op = yield* IdGenerator.uuid
    for (const record_type of ["policy_bound", "operation_started", "gate_evaluated"] as const) {
      yield* appendGranted(writer, chain, {
        record_type,
        operation_id: op,
        policy_id: "p",
        policy_version: "1",
        payload: {}
      })
    }
    return chain
  }).pipe(Effect.provide(process))

/** A recovery process whose ProjectionStore runs `hook` right after it lists the open operations. */
const recoveryProcess = (filename: string, hook: Effect.Effect<void>) =>
  patched(ProjectionStore, (state) => ({
    projectedOperations: (filter) =>
      Effect.tap(state.projectedOperations(filter), () => filter?.open_only === true ? hook : Effect.void)
  })).pipe(Layer.provideMerge(Embedded.layerStores({ filename })))

/**
 * Recovery next to other writers: each closing record follows the chain as recovery read it, so an operation that
 * concluded meanwhile, or that another recovery closed first, never gets a second terminal record.
 */
describe("gate 14: recovery racing another writer", () => {
  it.scoped("an operation that concludes after recovery listed it open keeps its one terminal record", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const live = yield* build(liveProcess(filename, entered, release))
      const { boundary, fiber } = yield* Effect.gen(function*() {
        const ref = yield* install
        const boundary = yield* Governance.openBoundary(ref)
        const fiber = yield* Effect.fork(
          run("notes.block", {}, { request_id: "live-1" }, { policy_snapshot: ref }, { boundary })
        )
        yield* Deferred.await(entered)
        return { boundary, fiber }
      }).pipe(Effect.provide(live))

      // Its executor is registered and alive: recovery refuses and closes nothing.
      const refused = yield* Effect.flip(
        EvidenceProjector.recover().pipe(Effect.provide(recoveryProcess(filename, Effect.void)))
      )
      assert.strictEqual(refused._tag, "LiveExecutorsError")
      // Forced, the live call finishes (and commits callable_completed) after recover has listed it as open.
      const finishLive = Effect.zipRight(Deferred.succeed(release, undefined), Effect.asVoid(Fiber.await(fiber)))
      const recovery = yield* build(recoveryProcess(filename, finishLive))
      yield* EvidenceProjector.recover({ force: true }).pipe(Effect.provide(recovery))

      const records = yield* chainRecords(boundary.chain_id).pipe(Effect.provide(recovery))
      const terminals = records.filter((r) => terminalTypes.has(r.record_type)).map((r) => r.record_type)
      assert.deepStrictEqual(
        terminals,
        ["callable_completed"],
        "every started operation has exactly one terminal record"
      )
    }))

  it.scoped("forced recovery in the live executor's own process leaves its running operation alone", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const live = yield* build(liveProcess(filename, entered, release))
      yield* Effect.gen(function*() {
        const ref = yield* install
        const boundary = yield* Governance.openBoundary(ref)
        const fiber = yield* Effect.fork(
          run("notes.block", {}, { request_id: "live-1" }, { policy_snapshot: ref }, { boundary })
        )
        yield* Deferred.await(entered)
        const report = yield* EvidenceProjector.recover({ force: true })
        assert.deepStrictEqual(report.closed, [])
        assert.deepStrictEqual(report.unclosable.map((u) => u.reason.includes("still running in this process")), [true])
        yield* Deferred.succeed(release, undefined)
        assert.strictEqual((yield* Fiber.join(fiber))._tag, "succeeded")
        const records = yield* chainRecords(boundary.chain_id)
        assert.deepStrictEqual(records.filter((r) => terminalTypes.has(r.record_type)).map((r) => r.record_type), [
          "callable_completed"
        ])
      }).pipe(Effect.provide(live))
    }))

  it.scoped("an operation another process's forced recovery closed is never concluded again, nor called", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const calls = { count: 0 }
      const live = yield* build(guardedProcess(filename, entered, release, calls))
      const { boundary, fiber } = yield* Effect.gen(function*() {
        const ref = yield* install
        const boundary = yield* Governance.openBoundary(ref)
        const fiber = yield* Effect.fork(
          run("notes.write", {}, { request_id: "live-1" }, { policy_snapshot: ref }, { boundary })
        )
        yield* Deferred.await(entered)
        return { boundary, fiber }
      }).pipe(Effect.provide(live))
      const recovery = yield* build(Embedded.layerStores({ filename }))
      const report = yield* EvidenceProjector.recover({ force: true }).pipe(Effect.provide(recovery))
      assert.strictEqual(report.closed.length, 1)

      yield* Deferred.succeed(release, undefined)
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.isTrue(error._tag === "GovernanceEvidenceError" && !error.call_executed, error.message)
      assert.strictEqual(calls.count, 0, "the callable is unreachable")
      const records = yield* chainRecords(boundary.chain_id).pipe(Effect.provide(recovery))
      assert.deepStrictEqual(records.filter((r) => terminalTypes.has(r.record_type)).map((r) => r.record_type), [
        "external_result_ambiguous"
      ])
    }))

  it.scoped("an executor that registers while recovery lists the open operations is seen: nothing is closed", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const seed = yield* build(Embedded.layerStores({ filename }))
      const chain_id = yield* orphanIn(seed)
      // The registry is asked after the listing: an executor that started a listed operation registered before it.
      const registering = Effect.asVoid(Effect.flatMap(ExecutorRegistry, (registry) => registry.register)).pipe(
        Effect.provide(seed),
        Scope.extend(yield* Effect.scope)
      )
      const refused = yield* Effect.flip(
        EvidenceProjector.recover().pipe(
          Effect.provide(recoveryProcess(filename, registering))
        )
      )
      assert.strictEqual(refused._tag, "LiveExecutorsError")
      const records = yield* chainRecords(chain_id).pipe(Effect.provide(seed))
      assert.isFalse(records.some((r) => terminalTypes.has(r.record_type)), "the open operation stays open")
    }))

  it.scoped("two recoveries at once close an orphan once", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const seed = yield* build(Embedded.layerStores({ filename }))
      const chain_id = yield* orphanIn(seed)

      // `writ recover` started twice (two shells, or a unit and an operator): the second runs while the first is
      // between its listing and its append.
      const second = yield* build(Embedded.layerStores({ filename }))
      const first = yield* build(
        recoveryProcess(filename, Effect.orDie(Effect.asVoid(EvidenceProjector.recover().pipe(Effect.provide(second)))))
      )
      yield* EvidenceProjector.recover().pipe(Effect.provide(first))

      const records = yield* chainRecords(chain_id).pipe(Effect.provide(first))
      const terminals = records.filter((r) => terminalTypes.has(r.record_type)).map((r) => r.record_type)
      assert.deepStrictEqual(terminals, ["external_result_ambiguous"], "exactly one terminal record")
    }))
})

const liveChild = [
  "--import",
  path.join(root, "test/fixtures/typescript-hooks.mjs"),
  path.join(root, "test/fixtures/live-executor-child.ts")
]

/** An executor process on `filename` holding one call open: its pid and chain once the call runs. */
const startLiveChild = (filename: string) =>
  Effect.acquireRelease(
    Effect.async<{ child: ChildProcess; pid: number; chain_id: string }, Error>((resume) => {
      const child = spawn(process.execPath, [...liveChild, filename], { stdio: ["pipe", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stderr.on("data", (chunk) => stderr += chunk)
      child.stdout.on("data", (chunk) => {
        stdout += chunk
        if (stdout.includes("\n")) resume(Effect.succeed({ child, ...JSON.parse(stdout) }))
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`the executor child exited (${code}): ${stderr}`))))
    }),
    ({ child }) => Effect.sync(() => child.kill("SIGKILL"))
  )

/** Resolve when the child has exited (and been reaped), after `end` is done to it. */
const ended = (child: ChildProcess, end: () => void) =>
  Effect.async<number | null>((resume) => {
    child.once("exit", (code) => resume(Effect.succeed(code)))
    end()
  })

const openOperations = Effect.flatMap(ProjectionStore, (state) => state.projectedOperations({ open_only: true }))

describe("gate 14: recovery next to a live executor process", () => {
  it.scoped("refused while the process runs (naming it); once it is killed, its operation is closed", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const live = yield* startLiveChild(filename)
      const stores = yield* build(Embedded.layerStores({ filename }))
      const refused = yield* Effect.flip(EvidenceProjector.recover().pipe(Effect.provide(stores)))
      assert.strictEqual(refused._tag, "LiveExecutorsError")
      assert.include(refused.message, `process ${live.pid} on `)
      const chainLength = (yield* chainRecords(live.chain_id).pipe(Effect.provide(stores))).length
      assert.strictEqual((yield* openOperations.pipe(Effect.provide(stores))).length, 1, "still open")

      assert.strictEqual(yield* ended(live.child, () => live.child.kill("SIGKILL")), null)
      const report = yield* EvidenceProjector.recover().pipe(Effect.provide(stores))
      assert.strictEqual(report.closed.length, 1)
      const records = yield* chainRecords(live.chain_id).pipe(Effect.provide(stores))
      assert.strictEqual(records.length, chainLength + 1)
      assert.strictEqual(records.at(-1)!.record_type, "external_result_ambiguous")
      assert.deepStrictEqual(yield* Effect.flatMap(ExecutorRegistry, (r) => r.live).pipe(Effect.provide(stores)), [])
    }))

  it.scoped("an executor that closes cleanly leaves no registration behind", () =>
    Effect.gen(function*() {
      const filename = yield* tempFile
      const live = yield* startLiveChild(filename)
      const stores = yield* build(Embedded.layerStores({ filename }))
      const registry = yield* Effect.provide(ExecutorRegistry, stores)
      assert.deepStrictEqual((yield* registry.live).map((executor) => executor.holder.split(" on ")[0]), [
        `process ${live.pid}`
      ])
      assert.strictEqual(yield* ended(live.child, () => live.child.stdin!.write("close\n")), 0)
      // Read the table itself: `live` would also drop the row of a process that has ended.
      const rows = yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT executor_id FROM executors`).pipe(
        Effect.provide(stores)
      )
      assert.deepStrictEqual(rows, [], "the executor deleted its own registration")
      // Its interrupted call is closed by the executor itself, so recovery has nothing to close.
      const report = yield* EvidenceProjector.recover().pipe(Effect.provide(stores))
      assert.deepStrictEqual([report.closed, report.unclosable], [[], []])
    }))
})
