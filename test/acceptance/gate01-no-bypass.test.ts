/**
 * Gate 1, no bypass: every public route enters the ActionExecutor exactly once, no module but
 * the executor can reach a backend's invoke or a handler, and no export can open an operation in evidence.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Adapters from "../../adapters/index.ts"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import { ActionOutbox } from "../../core/action/ActionOutbox.ts"
import { ActionRegistry } from "../../core/action/ActionRegistry.ts"
import * as ActionRegistryModule from "../../core/action/ActionRegistry.ts"
import { ActionUsage } from "../../core/action/ActionUsage.ts"
import { mint } from "../../core/action/internal/token.ts"
import { InvocationTokenError } from "../../core/action/InvocationTokenError.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { grantRecords } from "../../core/evidence/internal/capability.ts"
import { appendAdmitting, appendOperation, closeOperation } from "../../core/evidence/internal/writer.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Writ from "../../core/index.ts"
import * as Demo from "../../runtime/Demo.ts"
import * as Cli from "../../runtime/node/Cli.ts"
import { createExecutor } from "../../runtime/Promise.ts"
import * as WritPromise from "../../runtime/Promise.ts"
import * as WritTesting from "../../runtime/Testing.ts"
import { factsOf, productionFiles } from "../fixtures/sources.ts"

const importers = (target: string) => productionFiles().filter((file) => factsOf(file).imports.includes(target)).sort()
const callers = (callee: string) => productionFiles().filter((file) => factsOf(file).calls.includes(callee)).sort()

describe("gate 1: static", () => {
  // The child runner is the other route to a callable: in a process of its own, it mints a token and invokes once,
  // only after it holds the one-use token of its spawn, which only a subprocess backend that spent the executor's
  // token hands it (test/adapters/ChildRunner.test.ts checks the runner's refusals).
  it("only the executor (and, in its child, the child runner) mints invocation tokens and calls a backend's invoke", () => {
    assert.deepStrictEqual(callers("mint"), [
      "adapters/node/internal/childRunner.ts",
      "core/execution/internal/executor/invoke.ts"
    ])
    // writ/testing's counting backend passes on the token the executor gave it; it mints none.
    assert.deepStrictEqual(callers(".invoke"), [
      "adapters/node/internal/childRunner.ts",
      "core/execution/internal/executor/invoke.ts",
      "runtime/testing/internal/env.ts"
    ])
    assert.deepStrictEqual(importers("core/action/internal/token.ts"), [
      "adapters/node/internal/childRunner.ts",
      "core/action/InvocationToken.ts",
      "core/execution/internal/executor/invoke.ts"
    ])
  })

  it("only a backend that runs handlers elsewhere (a subprocess, the edge) issues the failures the executor concludes by", () => {
    assert.deepStrictEqual(importers("core/action/internal/backendFailure.ts"), [
      "adapters/node/BubblewrapBackend.ts",
      "adapters/node/internal/childProcess.ts",
      "adapters/node/internal/subprocessBackend.ts",
      "adapters/web/EdgeBackend.ts",
      "core/execution/internal/executor/invoke.ts"
    ])
  })

  it("a handler is reachable only by spending a token, and only backends spend them", () => {
    assert.deepStrictEqual(importers("core/action/internal/callable.ts"), [
      "core/action/Action.ts",
      "core/action/internal/token.ts"
    ])
    assert.deepStrictEqual(callers("unseal"), ["core/action/internal/token.ts"])
    assert.deepStrictEqual(callers(".redeem"), [
      "adapters/memory/InProcessBackend.ts",
      "adapters/node/internal/subprocessBackend.ts",
      "adapters/web/EdgeBackend.ts"
    ])
    assert.deepStrictEqual(callers(".handler"), [])
  })

  it("the check sees call sites (it is not vacuous)", () => {
    assert.isTrue(productionFiles().length > 10)
    assert.include(factsOf("core/execution/internal/executor/invoke.ts").calls, ".invoke")
    assert.deepStrictEqual(importers("core/execution/internal/executor/invoke.ts"), [
      "core/execution/internal/executor/run.ts"
    ])
  })
})

const counting = () => {
  const counts = { entered: 0, invoked: 0 }
  const backend = Layer.succeed(ActionExecutionBackend, {
    ...InProcessBackend.make,
    invoke: (token, invocation) => {
      counts.invoked++
      return InProcessBackend.make.invoke(token, invocation)
    }
  })
  const observers = [{ id: "count", observe: () => Effect.sync(() => void counts.entered++) }]
  return { counts, backend, observers }
}

describe("gate 1: runtime routes", () => {
  it.effect("the executor: one entry, one invoke", () =>
    Effect.gen(function*() {
      const { backend, counts, observers } = counting()
      const layer = ActionExecutor.layerMinimal({ observers }).pipe(
        Layer.provideMerge(Layer.mergeAll(ActionRegistryModule.layerWith(Demo.actions), backend)),
        Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerSeeded(1)))
      )
      const outcome = yield* Effect.provide(Demo.runStep(Demo.script[1]!, 0), layer)
      assert.strictEqual(outcome._tag, "succeeded")
      assert.deepStrictEqual(counts, { entered: 1, invoked: 1 })
    }))

  it.live("the CLI: `writ exec` enters the executor once per call", () =>
    Effect.gen(function*() {
      const { backend, counts, observers } = counting()
      const layer = Demo.layerWith({ observers }, backend).pipe(
        Layer.provideMerge(Layer.mergeAll(NodeDigest.layer, IdGenerator.layerCrypto, NodeContext.layer))
      )
      yield* Cli.run(["node", "writ", "exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--json"]).pipe(
        Effect.provide(layer)
      )
      assert.deepStrictEqual(counts, { entered: 1, invoked: 1 })
      process.exitCode = undefined
    }))

  it.live("the Promise facade: one entry per call; an aborted signal cancels before the call", () =>
    Effect.promise(async () => {
      let calls = 0
      let entered = 0
      const executor = await createExecutor({
        principal: "alice",
        actions: [Action.make({
          name: "count",
          input: Schema.Struct({}),
          output: Schema.Number,
          handler: () => ++calls
        })],
        observers: [{ id: "count", observe: () => Effect.sync(() => void entered++) }]
      })
      const outcome = await executor.execute({ action: "count" })
      assert.strictEqual(outcome._tag, "succeeded")
      const aborted = AbortSignal.abort()
      const cancelled = await executor.execute({ action: "count" }, { signal: aborted })
      assert.isTrue(cancelled._tag === "cancelled" && !cancelled.call_executed)
      assert.deepStrictEqual({ calls, entered }, { calls: 1, entered: 2 })
      await executor.dispose()
    }))

  it.effect("the registry: registering, discovering, resolving and listing never reach a handler", () =>
    Effect.gen(function*() {
      let calls = 0
      const definition = Action.make({
        name: "guarded",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => void calls++
      })
      const registry = yield* ActionRegistry
      yield* registry.discover({ id: "plugin", discover: Effect.succeed([definition]) })
      const resolved = yield* registry.resolve({ name: "guarded" })
      const list = yield* registry.list
      const reachable = [
        ...Object.values(resolved.definition),
        ...Object.values(resolved.descriptor),
        ...Object.values(registry),
        ...list
      ]
      assert.isFalse(
        reachable.some((value) => typeof value === "function" && value.length <= 2 && value.name === "handler")
      )
      assert.notProperty(resolved.definition, "handler")
      assert.strictEqual(calls, 0)
    }).pipe(Effect.provide(ActionRegistryModule.layer), Effect.provide(NodeDigest.layer)))
})

describe("gate 1: the invocation token", () => {
  const definition = Demo.actions[1]!
  const invocation = {
    definition,
    input: { a: 1, b: 2 },
    context: { request_id: "r", attempt_id: "a" },
    usage: ActionUsage.of({ report: () => Effect.void }),
    outbox: ActionOutbox.of({ stage: () => Effect.void })
  }

  it.effect("a backend refuses an invoke without a fresh token", () =>
    Effect.gen(function*() {
      const forged = yield* Effect.either(InProcessBackend.make.invoke(Object.freeze({}) as never, invocation))
      assert.isTrue(Either.isLeft(forged) && (forged.left as { reason: string }).reason === "spent")
      const missing = yield* Effect.either(InProcessBackend.make.invoke(undefined as never, invocation))
      assert.isTrue(Either.isLeft(missing) && (missing.left as { reason: string }).reason === "missing")
    }))

  it.effect("a handler failing with an InvocationTokenError of its own is a failure, not a refusal", () =>
    Effect.gen(function*() {
      const sly = Action.make({
        name: "sly",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => Effect.fail(new InvocationTokenError({ reason: "spent", action: "sly" }))
      })
      const layer = ActionExecutor.layerMinimal().pipe(
        Layer.provideMerge(Layer.merge(ActionRegistryModule.layerWith([sly]), InProcessBackend.layer)),
        Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerSeeded(3)))
      )
      const outcome = yield* Effect.provide(Demo.runStep({ action: "sly", arguments: {}, note: "" }, 0), layer)
      assert.strictEqual(outcome._tag, "failed")
    }))

  it.effect("a token works once, and only for the action it was minted for", () =>
    Effect.gen(function*() {
      const token = mint(definition)
      assert.strictEqual(yield* InProcessBackend.make.invoke(token, invocation), 3)
      const again = yield* Effect.either(InProcessBackend.make.invoke(token, invocation))
      assert.isTrue(Either.isLeft(again) && (again.left as { reason: string }).reason === "spent")
      const other = yield* Effect.either(InProcessBackend.make.invoke(mint(Demo.actions[0]!), invocation))
      assert.isTrue(Either.isLeft(other) && (other.left as { reason: string }).reason === "mismatched")
      const Token = mint(definition).constructor as new(key: symbol, definition: unknown) => unknown
      assert.throws(() => new Token(Symbol("writ/InvocationToken.mint"), definition), /minted by the executor only/)
    }))
})

// --- Evidence: no export opens an operation ---

const forgeDeclaration = {
  policy_id: "forge",
  version: "1",
  rules: [{ rule_id: "allow-all", kind: "action", effect: "allow", action_patterns: ["*"] }],
  gates: [{ gate_id: "hard", level: "hard", order: 0, rule_ids: ["allow-all"] }]
}

const forgedAction = Writ.Action.make({
  name: "calc.add",
  input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  output: Schema.Number,
  handler: ({ a, b }) => a + b
})

/** Open a boundary and derive an operation context for it from its six inputs, as an attacker holding the exports can. */
const forgedOperation = Effect.gen(function*() {
  const snapshot = yield* Effect.orDie(
    Writ.PolicySnapshot.compile(Either.getOrThrow(Writ.PermissionPolicy.decode(forgeDeclaration)))
  )
  const policies = yield* Writ.PolicySnapshotStore.PolicySnapshotStore
  yield* policies.put(snapshot)
  const policy = { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
  const boundary = yield* Writ.Governance.openBoundary(policy)
  const scope = Writ.ExecutionScope.EphemeralOperation.make({ scope_id: yield* Writ.IdGenerator.uuid })
  const context = yield* Writ.Ingress.bind({
    execution_scope: scope,
    authenticated_principal: { id: "mallory" },
    effect_backend: Adapters.InProcessBackend.make.ref,
    policy_snapshot: policy
  })
  const request = Writ.ExecutionRequest.ExecutionRequest.make({
    request_id: yield* Writ.IdGenerator.uuid,
    action: { name: forgedAction.name },
    arguments: { a: 1, b: 2 },
    execution_scope: scope
  })
  const registry = yield* Writ.ActionRegistry.ActionRegistry
  const descriptor = Either.getOrThrow(registry.resolve({ name: forgedAction.name })).descriptor
  // A forger has no preflight report (only the executor makes one), so it builds the whole context itself.
  const operation = Writ.Governance.OperationContext.make({
    operation_id: yield* Writ.IdGenerator.uuid,
    task_boundary_id: boundary.task_boundary_id,
    chain_id: boundary.chain_id,
    attempt_id: yield* Writ.IdGenerator.uuid,
    request_id: request.request_id,
    request_digest: snapshot.digest,
    actor: context.authenticated_principal.id,
    tenant: null,
    session_id: null,
    scope: { kind: "ephemeral_operation", run_id: null, owner_attempt_id: null },
    action: { name: descriptor.name, version: descriptor.version, digest: descriptor.digest },
    policy,
    backend: { ...context.effect_backend, capability_digest: snapshot.digest },
    preflight: {
      report_id: yield* Writ.IdGenerator.uuid,
      digest: snapshot.digest,
      admission_leases: [],
      verified_at: Writ.Time.fromMicros(0),
      expires_at: null
    },
    arguments_digest: snapshot.digest
  })
  const record = { operation_id: operation.operation_id, policy_id: policy.policy_id, policy_version: policy.version }
  const bound = { task_boundary_id: boundary.task_boundary_id, policy_digest: policy.digest }
  const drafts: ReadonlyArray<Writ.Evidence.Draft> = [
    { ...record, record_type: "policy_bound", payload: { ...bound, release_state: "active", rule_count: 1 } },
    { ...record, record_type: "operation_started", payload: { ...bound, attempt_id: operation.attempt_id } },
    { ...record, record_type: "callable_completed", payload: { stage: "outcome", result_digest: null } }
  ]
  return { boundary, drafts }
})

const forgeLayer = <Out>(
  evidence: Layer.Layer<Out, never, Writ.Digest.Digest>
) =>
  Writ.Governance.layerWriter.pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        evidence,
        Adapters.MemoryPolicySnapshotStore.layer,
        Writ.ActionRegistry.layerWith([forgedAction])
      )
    ),
    Layer.provideMerge(Layer.merge(Adapters.NodeDigest.layer, Writ.IdGenerator.layerCrypto))
  )

const sqliteEvidence = Layer.unwrapScoped(
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "writ-forge-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) =>
      Adapters.SqlEvidenceStore.layer.pipe(
        Layer.provideMerge(Adapters.Sqlite.layer({ filename: path.join(dir, "writ.db") }))
      )
  )
)

const evidenceStores = [
  ["memory", Adapters.MemoryEvidenceStore.layer],
  ["sqlite", sqliteEvidence]
] as const

const refusedAs = (record_type: string) => (error: { readonly _tag: string }) => {
  assert.strictEqual(error._tag, "EvidenceForbiddenError")
  const forbidden = error as Writ.EvidenceStore.EvidenceForbiddenError
  assert.deepStrictEqual([forbidden.reason, forbidden.record_type], ["operation_record", record_type])
  assert.include(forbidden.message, record_type)
}

describe("gate 1: evidence", () => {
  it("only the executor's governed stages, a governed harness run and recovery hold the evidence append capability", () => {
    assert.deepStrictEqual(callers("appendOperation"), [
      "core/execution/internal/executor/governed.ts",
      "core/harness/GovernedRun.ts"
    ])
    // appendOperation is appendAdmitting with no budget place: the writer's own call.
    assert.deepStrictEqual(callers("appendAdmitting"), [
      "core/evidence/internal/writer.ts",
      "core/execution/internal/executor/governed.ts"
    ])
    assert.deepStrictEqual(callers("closeOperation"), ["core/evidence/EvidenceProjector.ts"])
    assert.deepStrictEqual(importers("core/evidence/internal/writer.ts"), [
      "core/evidence/EvidenceProjector.ts",
      "core/evidence/EvidenceWriter.ts",
      "core/execution/internal/executor/governed.ts",
      "core/harness/GovernedRun.ts"
    ])
    assert.deepStrictEqual(callers("grantRecords"), ["core/evidence/internal/writer.ts"])
    assert.deepStrictEqual(importers("core/evidence/internal/capability.ts"), [
      "core/evidence/EvidenceStore.ts",
      "core/evidence/internal/writer.ts"
    ])
    // Every store admits through the one check in core, on the appending thread.
    assert.deepStrictEqual(callers("isAdmissible"), ["core/evidence/EvidenceStore.ts"])
    assert.deepStrictEqual(callers("admitAll"), [
      "adapters/memory/MemoryEvidenceStore.ts",
      "adapters/sql/SqlEvidenceStore.ts"
    ])
  })

  it("no entry point exports the capability", () => {
    const capability: ReadonlyArray<unknown> = [appendOperation, appendAdmitting, closeOperation, grantRecords]
    const exported = [Writ, Adapters, WritPromise, WritTesting].flatMap((entry) =>
      Object.values(entry).flatMap((value) =>
        typeof value === "object" && value !== null ? Object.values(value) : [value]
      )
    )
    assert.isTrue(exported.length > 100)
    assert.isFalse(exported.some((value) => capability.includes(value)))
  })

  for (const [name, evidence] of evidenceStores) {
    it.scoped(`${name}: a forged operation is refused by the writer and the store, and no certificate holds it`, () =>
      Effect.gen(function*() {
        const { boundary, drafts } = yield* forgedOperation
        const writer = yield* Writ.Governance.EvidenceWriter
        const store = yield* Writ.EvidenceStore.EvidenceStore
        const digest = yield* Writ.Digest.Digest
        const chain_id = boundary.chain_id
        const record_ids = [yield* Writ.IdGenerator.uuid, yield* Writ.IdGenerator.uuid, yield* Writ.IdGenerator.uuid]
        const records = yield* Writ.Evidence.sealAllWith(digest, drafts, {
          chain_id,
          sequence: 0,
          previous_chain_hash: null,
          record_ids,
          created_at: yield* Writ.Time.now
        })
        refusedAs("policy_bound")(yield* Effect.flip(writer.appendAll(chain_id, drafts)))
        for (const draft of drafts) refusedAs(draft.record_type)(yield* Effect.flip(writer.append(chain_id, draft)))
        refusedAs("policy_bound")(yield* Effect.flip(store.appendAll(records)))
        for (const record of records) refusedAs(record.record_type)(yield* Effect.flip(store.append(record)))
        assert.isTrue(Option.isNone(yield* store.head(chain_id)))
        // A forgery after a record the public API may append, through appendAfter too.
        const superseded = yield* writer.append(chain_id, {
          record_type: "record_superseded",
          operation_id: null,
          policy_id: boundary.policy.policy_id,
          policy_version: boundary.policy.version,
          payload: { task_boundary_id: boundary.task_boundary_id, policy_digest: boundary.policy.digest }
        })
        const [after] = Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id)))
        refusedAs("policy_bound")(yield* Effect.flip(writer.appendAfter(chain_id, after!, drafts[0]!)))
        assert.deepStrictEqual(Option.getOrThrow(yield* store.head(chain_id)).hash, superseded.head_hash)
        const closed = yield* Writ.Governance.closeBoundary(boundary)
        const certificate = yield* Writ.TaskCertificate.mint(chain_id, closed.head_hash)
        assert.strictEqual(certificate.evidence_chain_head, closed.head_hash)
        assert.deepStrictEqual(
          Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id))).map((record) => record.record_type),
          ["record_superseded", "task_closed"]
        )
        assert.deepStrictEqual({ ...certificate.gate_summary }, {
          summary_version: 2,
          hard_allow: 0,
          hard_deny: 0,
          soft_allow: 0,
          soft_deny: 0,
          advisory_allow: 0,
          advisory_deny: 0,
          exceptions: 0,
          evaluator_errors: 0
        })
      }).pipe(Effect.provide(forgeLayer(evidence))))
  }

  it.scoped("recovery refuses to close an operation its chain never started", () =>
    Effect.gen(function*() {
      const { boundary } = yield* forgedOperation
      const writer = yield* Writ.Governance.EvidenceWriter
      const store = yield* Writ.EvidenceStore.EvidenceStore
      const chain_id = boundary.chain_id
      const first = yield* writer.append(chain_id, {
        record_type: "record_superseded",
        operation_id: null,
        policy_id: boundary.policy.policy_id,
        policy_version: boundary.policy.version,
        payload: { task_boundary_id: boundary.task_boundary_id, policy_digest: boundary.policy.digest }
      })
      // A projection that names an operation the chain never started, its "start" a record of another type.
      const phantom = Writ.Projection.ProjectedOperation.make({
        operation_id: yield* Writ.IdGenerator.uuid,
        chain_id,
        started_record_id: first.record_id,
        terminal_record_id: null,
        terminal_type: null,
        terminal_count: 0
      })
      const report = yield* Writ.EvidenceProjector.recover().pipe(
        Effect.updateService(Writ.ProjectionStore.ProjectionStore, (projection) => ({
          ...projection,
          projectedOperations: () => Effect.succeed([phantom])
        }))
      )
      assert.deepStrictEqual(report.closed, [])
      assert.deepStrictEqual(report.unclosable.map((entry) => entry.operation_id), [phantom.operation_id])
      assert.include(report.unclosable[0]!.reason, "external_result_ambiguous")
      assert.strictEqual(Option.getOrThrow(yield* store.head(chain_id)).hash, first.head_hash)
      // Nor can the public writer close it itself.
      const [after] = Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id)))
      refusedAs("external_result_ambiguous")(
        yield* Effect.flip(writer.appendAfter(chain_id, after!, {
          record_type: "external_result_ambiguous",
          operation_id: phantom.operation_id,
          policy_id: boundary.policy.policy_id,
          policy_version: boundary.policy.version,
          payload: { reason_code: "recovery.orphaned_operation", call_executed: null, stage: "recover" }
        }))
      )
      assert.strictEqual(Option.getOrThrow(yield* store.head(chain_id)).hash, first.head_hash)
    }).pipe(
      Effect.provide(
        Layer.mergeAll(Adapters.MemoryStateStore.layer, Adapters.MemoryExecutorRegistry.layer).pipe(
          Layer.provideMerge(forgeLayer(Adapters.MemoryEvidenceStore.layer))
        )
      )
    ))

  it.scoped("recovery through a writer over a lying store closes nothing: what it read must be the chain itself", () =>
    Effect.gen(function*() {
      const { boundary } = yield* forgedOperation
      const writer = yield* Writ.Governance.EvidenceWriter
      const store = yield* Writ.EvidenceStore.EvidenceStore
      const chain_id = boundary.chain_id
      const first = yield* writer.append(chain_id, {
        record_type: "record_superseded",
        operation_id: null,
        policy_id: boundary.policy.policy_id,
        policy_version: boundary.policy.version,
        payload: { task_boundary_id: boundary.task_boundary_id, policy_digest: boundary.policy.digest }
      })
      const [head] = Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id)))
      const operation_id = yield* Writ.IdGenerator.uuid
      // A start that exists only in what a wrapper store serves the writer it is handed to.
      const fakeStart = new Writ.Evidence.EvidenceRecord(
        { ...head!, record_type: "operation_started", operation_id } as Writ.Evidence.EvidenceRecord,
        { disableValidation: true }
      ) as Writ.Evidence.StoredRecord
      const lying: Writ.EvidenceStore.EvidenceStore.Service = {
        ...store,
        read: (chain, after) =>
          chain === chain_id && after === fakeStart.sequence - 1 ? Stream.make(fakeStart) : store.read(chain, after)
      }
      const lyingWriter = yield* Writ.Governance.makeWriter.pipe(
        Effect.provideService(Writ.EvidenceStore.EvidenceStore, lying)
      )
      const phantom = Writ.Projection.ProjectedOperation.make({
        operation_id,
        chain_id,
        started_record_id: head!.record_id as Writ.IdGenerator.Uuid,
        terminal_record_id: null,
        terminal_type: null,
        terminal_count: 0
      })
      let projected = false
      const report = yield* Writ.EvidenceProjector.recover().pipe(
        Effect.provideService(Writ.Governance.EvidenceWriter, lyingWriter),
        Effect.updateService(Writ.EvidenceStore.EvidenceProjectionSource, (source) => ({
          ...source,
          get: (chain, id) =>
            projected && id === head!.record_id ? Effect.succeed(Option.some(fakeStart)) : source.get(chain, id)
        })),
        Effect.updateService(Writ.ProjectionStore.ProjectionStore, (projection) => ({
          ...projection,
          projectedOperations: () => Effect.sync(() => (projected = true, [phantom]))
        }))
      )
      assert.deepStrictEqual(report.closed, [])
      assert.deepStrictEqual(report.unclosable.map((entry) => entry.operation_id), [operation_id])
      assert.strictEqual(Option.getOrThrow(yield* store.head(chain_id)).hash, first.head_hash)
    }).pipe(
      Effect.provide(
        Layer.mergeAll(Adapters.MemoryStateStore.layer, Adapters.MemoryExecutorRegistry.layer).pipe(
          Layer.provideMerge(forgeLayer(Adapters.MemoryEvidenceStore.layer))
        )
      )
    ))
})
