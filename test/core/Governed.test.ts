import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Either, Exit, Fiber, Layer, Schema, TestClock } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionBackendCapabilityReport, ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as InvocationToken from "../../core/action/InvocationToken.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import type { EvidenceRecord, StoredRecord } from "../../core/evidence/Evidence.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceStore, EvidenceUnavailableError } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as IdempotencyStore from "../../core/execution/IdempotencyStore.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base, chainRecords, run } from "../fixtures/layers.ts"
import { bound, installPolicy, unconfigured } from "../fixtures/policy.ts"

const CANARY = "canary-7f3a9c-secret"
const calls = { write: 0, fail: 0, slow: 0, contained: 0 }

const actions = [
  Action.make({
    name: "notes.contained",
    input: Schema.Struct({}),
    output: Schema.Void,
    containment: ["network"],
    handler: () => void calls.contained++
  }),
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.Struct({ stored: Schema.String }),
    handler: ({ text }) => {
      calls.write++
      return { stored: text }
    }
  }),
  Action.make({
    name: "notes.fail",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => {
      calls.fail++
      return Effect.fail(new Action.ActionError({ code: "notes.broken", message: CANARY }))
    }
  }),
  Action.make({
    name: "notes.slow",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => {
      calls.slow++
      return Effect.never
    }
  }),
  Action.make({ name: "notes.sign", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined }),
  Action.make({
    name: "notes.save",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.Void,
    effects: ["filesystem.write"],
    handler: () => undefined
  }),
  Action.make({
    name: "notes.publish",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: () => "published"
  })
]

const declaration = {
  policy_id: "gov",
  version: "1",
  approver_class: "lead",
  rules: [
    {
      rule_id: "allow-notes",
      kind: "action",
      effect: "allow",
      action_patterns: ["notes.write", "notes.fail", "notes.slow", "notes.publish", "notes.contained"]
    },
    { rule_id: "no-publish", kind: "action", effect: "deny", action_patterns: ["notes.publish"] },
    { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["notes.sign"] },
    { rule_id: "allow-sign", kind: "action", effect: "allow", action_patterns: ["notes.sign"] }
  ],
  gates: [
    { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes", "ask"] },
    { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow-notes", "allow-sign", "no-publish"] }
  ],
  interceptors: bound("throws-on-write", "malformed-on-slow", "stuck", "capacity", "test.meter")
}

/**
 * An EvidenceStore over the memory layer whose appends fail from the `failAt`-th record on (0-based), when set; with
 * `lost`, the append that reaches it commits first (its answer lost), and later ones go through.
 */
const flaky = (failAt: { current: number | undefined; lost?: boolean }) =>
  Layer.effect(
    EvidenceStore,
    Effect.map(EvidenceStore, (store) => {
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
      return EvidenceStore.of({
        ...store,
        append: (record) => Effect.map(appendAll([record]), (receipts) => receipts[0]!),
        appendAll
      })
    })
  ).pipe(Layer.provideMerge(MemoryEvidenceStore.layer))

const stores = (
  failAt: { current: number | undefined; lost?: boolean },
  snapshots: Layer.Layer<PolicySnapshotStore, never, Digest.Digest> = MemoryPolicySnapshotStore.layer
) =>
  Layer.mergeAll(
    snapshots,
    MemoryApprovalQueue.layer,
    MemoryExecutorRegistry.layer,
    MemoryStateStore.layer,
    flaky(failAt)
  ).pipe(
    Layer.provideMerge(base(actions))
  )

const layerWith = (
  failAt: { current: number | undefined; lost?: boolean } = { current: undefined },
  config: ActionExecutor.Config = {},
  snapshots?: Layer.Layer<PolicySnapshotStore, never, Digest.Digest>
) =>
  Governed.layer(config).pipe(
    Layer.provideMerge(Governance.layerWriter),
    Layer.provideMerge(stores(failAt, snapshots))
  )

/** The in-memory snapshot store, counting the snapshots read from it. */
const countedSnapshots = (reads: { count: number }) =>
  Layer.effect(
    PolicySnapshotStore,
    Effect.map(PolicySnapshotStore, (store) =>
      PolicySnapshotStore.of({
        ...store,
        get: (policy_id, version) => Effect.suspend(() => (reads.count++, store.get(policy_id, version)))
      }))
  ).pipe(Layer.provide(MemoryPolicySnapshotStore.layer))

const install = installPolicy(declaration)

const exec = (
  ref: PolicySnapshotRef,
  boundary: Governance.TaskBoundary | undefined,
  action: string,
  args: Record<string, unknown>,
  extra: { readonly approval_id?: string; readonly metadata?: Record<string, unknown>; readonly request_id?: string } =
    {}
) =>
  Effect.gen(function*() {
    const request = {
      request_id: extra.request_id ?? (yield* IdGenerator.uuid),
      ...(extra.metadata === undefined ? {} : { metadata: extra.metadata }),
      ...(extra.approval_id === undefined ? {} : { approval_id: Uuid.make(extra.approval_id) })
    }
    return yield* run(action, args, request, { policy_snapshot: ref }, boundary === undefined ? {} : { boundary })
  })

/** `notes.slow` forked under `boundary`, until `cancel` is completed. */
const slowCall = (ref: PolicySnapshotRef, boundary: Governance.TaskBoundary, cancel: Deferred.Deferred<void>) =>
  Effect.fork(run("notes.slow", {}, { request_id: "slow" }, { policy_snapshot: ref }, { boundary, cancel }))

const records = chainRecords

const types = (chain: ReadonlyArray<StoredRecord>) => chain.map((record) => record.record_type)

const setup = Effect.gen(function*() {
  const ref = yield* install
  const boundary = yield* Governance.openBoundary(ref)
  return { ref, boundary }
})

describe("governed execution", () => {
  it.effect("a success commits policy_bound, operation_started, one gate_evaluated per applicable gate, then callable_completed", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const outcome = yield* exec(ref, boundary, "notes.write", { text: "hello" })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(outcome.profile, "governed")
      const chain = yield* records(boundary.chain_id)
      assert.deepStrictEqual(types(chain), [
        "policy_bound",
        "operation_started",
        "gate_evaluated",
        "gate_evaluated",
        "callable_completed"
      ])
      const gates = chain.filter((r) => r.record_type === "gate_evaluated").map((r) => JSON.parse(r.payload_json))
      assert.deepStrictEqual(gates.map((g) => `${g.stage}:${g.gate_id}:${g.decision}`), [
        "policy:base:allow",
        "policy:review:allow"
      ])
      const started = JSON.parse(chain[1]!.payload_json)
      assert.deepStrictEqual(started.argument_fields, ["text"])
      assert.strictEqual(started.arguments_digest, gates[0].arguments_digest)
      assert.isTrue(chain.every((r) => r.operation_id === chain[0]!.operation_id))
      const verified = yield* Effect.flatMap(EvidenceStore, (store) => store.verify(boundary.chain_id))
      assert.isTrue(verified.valid)
      assert.strictEqual(verified.checked_records, 5)
    }).pipe(Effect.provide(layerWith())))

  it.effect("a call reads its snapshot once, at its stage-3 pin: every policy stage, and the budget charge, decides on it", () => {
    const reads = { count: 0 }
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      reads.count = 0
      const outcome = yield* exec(ref, boundary, "notes.write", { text: "hello" })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(reads.count, 1)
      const denied = yield* exec(ref, boundary, "notes.save", { path: "notes/a.txt" })
      assert.strictEqual(denied._tag, "denied")
      assert.strictEqual(reads.count, 2)
    }).pipe(Effect.provide(layerWith(undefined, {}, countedSnapshots(reads))))
  })

  it.effect("every outcome closes its operation with exactly one matching terminal record", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      assert.strictEqual((yield* exec(ref, boundary, "notes.fail", {}))._tag, "failed")
      assert.strictEqual((yield* exec(ref, boundary, "notes.publish", { text: "ls" }))._tag, "escalated")
      const cancel = yield* Deferred.make<void>()
      const fiber = yield* slowCall(ref, boundary, cancel)
      yield* Effect.yieldNow()
      while (calls.slow === 0) yield* Effect.yieldNow()
      yield* Deferred.succeed(cancel, undefined)
      assert.strictEqual((yield* Fiber.join(fiber))._tag, "cancelled")
      const chain = yield* records(boundary.chain_id)
      const terminals = chain.filter((r) =>
        !["policy_bound", "operation_started", "gate_evaluated"].includes(r.record_type)
      )
      assert.deepStrictEqual(terminals.map((r) => r.record_type), [
        "callable_failed",
        "operation_denied",
        "operation_cancelled"
      ])
      const started = chain.filter((r) => r.record_type === "operation_started").map((r) => r.operation_id)
      assert.deepStrictEqual(terminals.map((r) => r.operation_id), started)
      assert.strictEqual(JSON.parse(terminals[1]!.payload_json).disposition, "escalate")
      assert.isTrue(JSON.parse(terminals[2]!.payload_json).call_executed)
    }).pipe(Effect.provide(layerWith())))

  it.effect("preflight refusals open no operation: schema, no boundary, a boundary under another policy, a supplied operation context", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const before = calls.write
      const other = yield* Governance.openBoundary({ ...ref, version: "2" })
      const refusals = [
        yield* exec(ref, boundary, "notes.write", { text: 1 }),
        yield* exec(ref, undefined, "notes.write", { text: "x" }),
        yield* exec(ref, other, "notes.write", { text: "x" }),
        yield* exec(ref, boundary, "notes.write", { text: "x" }, { metadata: { operation_context: { actor: "root" } } })
      ]
      assert.deepStrictEqual(refusals.map((o) => o._tag === "denied" ? o.reason.code : o._tag), [
        "schema.invalid",
        "governance.no_boundary",
        "governance.policy_mismatch",
        "context.operation_context_supplied"
      ])
      assert.deepStrictEqual(yield* records(boundary.chain_id), [])
      assert.deepStrictEqual(yield* records(other.chain_id), [])
      assert.strictEqual(calls.write, before)
    }).pipe(Effect.provide(layerWith())))

  it.effect("every injected pre-call append failure prevents the call; a post-call one reports call_executed and never retries", () =>
    Effect.gen(function*() {
      // A successful governed call appends 5 records: 4 before the call, 1 after.
      for (let failAt = 0; failAt <= 4; failAt++) {
        const injected = { current: undefined as number | undefined }
        const before = calls.write
        const error = yield* Effect.gen(function*() {
          const { boundary, ref } = yield* setup
          injected.current = failAt
          return yield* Effect.flip(exec(ref, boundary, "notes.write", { text: "x" }))
        }).pipe(Effect.provide(layerWith(injected)))
        assert.strictEqual(error._tag, "GovernanceEvidenceError")
        const executed = calls.write - before
        assert.strictEqual(executed, failAt === 4 ? 1 : 0, `append ${failAt}`)
        assert.strictEqual(
          (error as Governance.GovernanceEvidenceError).call_executed,
          failAt === 4,
          `append ${failAt}`
        )
      }
    }))

  /** A boundary whose first start append fails (committed first, with `lost`), then `after` on it. */
  const afterFailedStart = <A, E, R>(
    lost: boolean,
    after: (opened: { boundary: Governance.TaskBoundary; ref: PolicySnapshotRef }) => Effect.Effect<A, E, R>
  ) => {
    const injected = { current: undefined as number | undefined, lost }
    return Effect.gen(function*() {
      const opened = yield* setup
      injected.current = 0
      const before = calls.write
      const error = yield* Effect.flip(exec(opened.ref, opened.boundary, "notes.write", { text: "x" }))
      assert.isTrue(error._tag === "GovernanceEvidenceError" && !error.call_executed)
      assert.strictEqual(calls.write, before, "the callable is unreachable")
      injected.current = undefined
      return yield* after(opened)
    }).pipe(Effect.provide(layerWith(injected)))
  }

  it.effect("a start that committed but was answered as failed is closed as denied ahead of the chain's next record", () =>
    afterFailedStart(true, ({ boundary, ref }) =>
      Effect.gen(function*() {
        assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "y" }))._tag, "succeeded")
        yield* Governance.closeBoundary(boundary)
        const chain = yield* records(boundary.chain_id)
        assert.deepStrictEqual(types(chain), [
          "policy_bound",
          "operation_started",
          "operation_denied",
          "policy_bound",
          "operation_started",
          "gate_evaluated",
          "gate_evaluated",
          "callable_completed",
          "task_closed"
        ])
        assert.strictEqual(chain[2]!.operation_id, chain[1]!.operation_id)
        assert.strictEqual(JSON.parse(chain[2]!.payload_json).reason_code, "evidence.append_failed")
        const certificate = yield* TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)
        assert.strictEqual(certificate.process_grade, "FULL")
      })))

  it.effect("a start that committed but was answered as failed, with nothing after it, is closed before task_closed", () =>
    afterFailedStart(true, ({ boundary }) =>
      Effect.gen(function*() {
        yield* Governance.closeBoundary(boundary)
        const chain = yield* records(boundary.chain_id)
        assert.deepStrictEqual(types(chain), ["policy_bound", "operation_started", "operation_denied", "task_closed"])
        assert.strictEqual((yield* TaskCertificate.mint(boundary.chain_id, chain[3]!.chain_hash)).process_grade, "FULL")
      })))

  it.effect("a lost-answer start closed by a forced recovery in this process gets no second terminal", () =>
    afterFailedStart(true, ({ boundary, ref }) =>
      Effect.gen(function*() {
        assert.strictEqual((yield* EvidenceProjector.recover({ force: true })).closed.length, 1)
        assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "y" }))._tag, "succeeded")
        const chain = yield* records(boundary.chain_id)
        const first = chain[1]!.operation_id
        assert.deepStrictEqual(
          chain.filter((r) => r.operation_id === first && terminalTypes.has(r.record_type)).map((r) => r.record_type),
          ["external_result_ambiguous"]
        )
      })))

  it.effect("a start whose append really failed is owed nothing: the chain goes on without it", () =>
    afterFailedStart(false, ({ boundary }) =>
      Effect.gen(function*() {
        yield* Governance.closeBoundary(boundary)
        assert.deepStrictEqual(types(yield* records(boundary.chain_id)), ["task_closed"])
      })))

  it.effect("a captured failure whose callable_failed cannot be committed is an OutcomeEvidenceError", () =>
    Effect.gen(function*() {
      const injected = { current: undefined as number | undefined }
      const error = yield* Effect.gen(function*() {
        const { boundary, ref } = yield* setup
        injected.current = 4
        return yield* Effect.flip(exec(ref, boundary, "notes.fail", {}))
      }).pipe(Effect.provide(layerWith(injected)))
      assert.strictEqual(error._tag, "OutcomeEvidenceError")
      assert.strictEqual((error as Governance.OutcomeEvidenceError).failure_code, "notes.broken")
    }))

  it.effect("an approval that lets a soft deny pass is a new request's attempt and commits exception_granted", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const escalated = yield* exec(ref, boundary, "notes.publish", { text: "ls" })
      assert.strictEqual(escalated._tag, "escalated")
      const approval = escalated._tag === "escalated" ? escalated.approval! : undefined
      const queue = yield* ApprovalQueue
      yield* queue.approve(approval!.approval_id, { id: "bob", approver_class: "lead" })
      const same = yield* exec(ref, boundary, "notes.publish", { text: "ls" }, {
        approval_id: approval!.approval_id,
        request_id: escalated.request_id
      })
      assert.deepStrictEqual(same._tag === "denied" && same.reason.code, "approval.same_request")
      const approved = yield* exec(ref, boundary, "notes.publish", { text: "ls" }, {
        approval_id: approval!.approval_id
      })
      assert.strictEqual(approved._tag, "succeeded")
      const chain = yield* records(boundary.chain_id)
      const exception = chain.find((r) => r.record_type === "exception_granted")!
      assert.deepStrictEqual(
        [JSON.parse(exception.payload_json).approval_id, JSON.parse(exception.payload_json).evaluator],
        [approval!.approval_id, "policy.rules"]
      )
      assert.notStrictEqual(exception.operation_id, chain[0]!.operation_id)
    }).pipe(Effect.provide(layerWith())))

  it.effect("no argument, result or failure message ever reaches a payload", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      yield* exec(ref, boundary, "notes.write", { text: CANARY })
      yield* exec(ref, boundary, "notes.fail", {})
      yield* exec(ref, boundary, "notes.publish", { text: CANARY })
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      assert.isAbove(chain.length, 10)
      for (const record of chain) assert.notInclude(JSON.stringify(record), CANARY)
    }).pipe(Effect.provide(layerWith())))

  it.effect("the operation records the one report stage 3 admitted the call on, and a report that stops containing denies before any operation", () => {
    let probes = 0
    let network: "enforced" | "unsupported" = "enforced"
    // The probe at which the backend reports otherwise for once: between a call's stage 3 and its stage 4.
    let changesAt = 0
    const reports: Array<ActionBackendCapabilityReport> = []
    const flipping = Layer.succeed(ActionExecutionBackend, {
      ...InProcessBackend.make,
      probe: Effect.sync(() => {
        const report = ActionBackendCapabilityReport.make({
          backend: InProcessBackend.make.ref,
          containment: {
            filesystem: "unsupported",
            network,
            subprocess: "unsupported",
            environment: "unsupported",
            secrets: "unsupported"
          },
          verified_by: ++probes === changesAt ? "another verification" : "probe"
        })
        reports.push(report)
        return report
      })
    })
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const contained = calls.contained
      const admitted = yield* exec(ref, boundary, "notes.contained", {})
      assert.strictEqual(admitted._tag, "succeeded")
      assert.strictEqual(probes, 2, "probed at stage 3, and again at stage 4 to check the report stands")
      const started = (yield* records(boundary.chain_id)).find((record) => record.record_type === "operation_started")!
      const payload = JSON.parse(started.payload_json) as {
        backend: { capability_digest: string }
        preflight: { report_id: string; digest: string }
      }
      const first = yield* Digest.canonical(yield* Schema.encode(ActionBackendCapabilityReport)(reports[0]!))
      assert.strictEqual(payload.backend.capability_digest, first)
      assert.match(payload.preflight.digest, /^[0-9a-f]{64}$/)
      const before = (yield* records(boundary.chain_id)).length
      changesAt = probes + 2
      const changed = yield* exec(ref, boundary, "notes.contained", {})
      assert.deepStrictEqual(changed._tag === "denied" && [changed.reason.code, changed.stage], [
        "preflight.report_changed",
        "governed_start"
      ])
      assert.strictEqual((yield* records(boundary.chain_id)).length, before, "no operation_started")
      network = "unsupported"
      const refused = yield* exec(ref, boundary, "notes.contained", {})
      assert.deepStrictEqual(refused._tag === "denied" && [refused.reason.code, refused.stage], [
        "containment.unsupported",
        "bind_context"
      ])
      assert.strictEqual((yield* records(boundary.chain_id)).length, before)
      assert.strictEqual(calls.contained, contained + 1)
    }).pipe(Effect.provide(
      Governed.layer().pipe(
        Layer.provide(flipping),
        Layer.provideMerge(Governance.layerWriter),
        Layer.provideMerge(stores({ current: undefined }))
      )
    ))
  })

  it.effect("an evaluator or a transformer that throws is a denial, and its operation closes and certifies", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const first = yield* exec(ref, boundary, "notes.write", { text: "x" })
      assert.deepStrictEqual(first._tag === "denied" && first.reason.code, "control.evaluator_error")
      const second = yield* exec(ref, boundary, "notes.fail", {})
      assert.deepStrictEqual(second._tag === "denied" && second.reason.code, "transform.failed")
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      const terminals = chain.filter((record) => terminalTypes.has(record.record_type))
      assert.deepStrictEqual(terminals.map((record) => record.record_type), ["operation_denied", "operation_denied"])
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)
      assert.strictEqual(certificate.process_grade, "FULL")
    }).pipe(Effect.provide(layerWith(undefined, {
      interceptors: [{
        id: "throws-on-write",
        identity: unconfigured,
        stage: "policy",
        evaluate: ({ descriptor }) => {
          if (descriptor.name === "notes.write") throw new Error("evaluator bug")
          return Effect.succeed(Interceptor.allow())
        }
      }],
      transformers: [{
        id: "throws",
        transform: () => {
          throw new Error("transformer bug")
        }
      }]
    }))))

  it.effect("a defect after the start still closes the operation; a throwing backend fails the call; a malformed verdict is an evaluator error", () => {
    const throwing = Layer.succeed(ActionExecutionBackend, {
      ...InProcessBackend.make,
      invoke: () => {
        throw new Error("backend bug")
      }
    })
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const malformed = yield* exec(ref, boundary, "notes.slow", {})
      assert.deepStrictEqual(malformed._tag === "denied" && malformed.reason.code, "control.evaluator_error")
      // The idempotency store dies at stage 12, after every pre-call record and before the token is released.
      const before = yield* Effect.exit(
        run("notes.fail", {}, { idempotency_key: "k" }, { policy_snapshot: ref }, { boundary })
      )
      assert.isTrue(Exit.isFailure(before) && Cause.isDie(before.cause))
      // A backend that throws instead of answering fails the call, as a defect inside its Effect would.
      const after = yield* exec(ref, boundary, "notes.write", { text: "x" })
      assert.strictEqual(after._tag === "failed" && after.failure.code, "handler.defect")
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      const terminals = chain.filter((record) => terminalTypes.has(record.record_type))
      assert.deepStrictEqual(terminals.map((record) => record.record_type), [
        "operation_denied",
        "operation_denied",
        "callable_failed"
      ])
      assert.deepStrictEqual(terminals.slice(0, 2).map((record) => JSON.parse(record.payload_json).reason_code), [
        "control.evaluator_error",
        "executor.defect"
      ])
      assert.isTrue(
        (yield* Effect.either(TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)))._tag === "Right"
      )
    }).pipe(Effect.provide(
      Governed.layer({
        interceptors: [{
          id: "malformed-on-slow",
          identity: unconfigured,
          stage: "policy",
          evaluate: ({ descriptor }) =>
            Effect.succeed(
              descriptor.name === "notes.slow" ? undefined as unknown as Interceptor.Verdict : Interceptor.allow()
            )
        }]
      }).pipe(
        Layer.provide(throwing),
        Layer.provideMerge(Governance.layerWriter),
        Layer.provideMerge(stores({ current: undefined })),
        Layer.provideMerge(Layer.succeed(IdempotencyStore.IdempotencyStore, {
          get: () => Effect.die("idempotency store bug"),
          put: () => Effect.void
        }))
      )
    ))
  })

  it.effect("a cancellation or a deadline while a pre-call stage is blocked concludes the operation before any call", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const before = calls.write
      // Wait until the chain holds `count` records, a macrotask at a time (digests resolve there; the clock is a test's).
      const holding = (count: number) =>
        Effect.gen(function*() {
          while ((yield* records(boundary.chain_id)).length < count) {
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 1)))
          }
        })
      const cancel = yield* Deferred.make<void>()
      const cancelling = yield* Effect.fork(
        run("notes.write", { text: "x" }, {}, { policy_snapshot: ref }, { boundary, cancel })
      )
      yield* holding(2)
      yield* Deferred.succeed(cancel, undefined)
      const cancelled = yield* Fiber.join(cancelling)
      const deadline = Time.fromMicros((yield* Time.nowMicros) + 1_000_000)
      const timing = yield* Effect.fork(
        run("notes.write", { text: "y" }, { deadline }, { policy_snapshot: ref }, { boundary })
      )
      yield* holding(5)
      yield* TestClock.adjust("2 seconds")
      const timedOut = yield* Fiber.join(timing)
      assert.deepStrictEqual(
        [cancelled, timedOut].map((outcome) => [outcome._tag, "call_executed" in outcome && outcome.call_executed]),
        [["cancelled", false], ["timed_out", false]]
      )
      assert.deepStrictEqual(types(yield* records(boundary.chain_id)), [
        "policy_bound",
        "operation_started",
        "operation_cancelled",
        "policy_bound",
        "operation_started",
        "operation_timed_out"
      ])
      assert.strictEqual(calls.write, before)
    }).pipe(Effect.provide(layerWith(undefined, {
      interceptors: [{ id: "stuck", identity: unconfigured, stage: "authorise", evaluate: () => Effect.never }]
    }))))

  it.effect("the writer forgets a closed chain, and a call it denies leaves nothing behind", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const writer = yield* Governance.EvidenceWriter
      const other = yield* Governance.openBoundary(ref)
      const held = writer.held()
      assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "a" }))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      assert.strictEqual(writer.held(), held - 1)
      const foreign = new Governance.TaskBoundary({ ...other, chain_id: yield* IdGenerator.uuid })
      for (const closedOrForeign of [boundary, foreign]) {
        const late = yield* exec(ref, closedOrForeign, "notes.write", { text: "late" })
        assert.deepStrictEqual(late._tag === "denied" && late.reason.code, "governance.boundary_not_open")
      }
      assert.strictEqual(writer.held(), held - 1)
      yield* Governance.closeBoundary(other)
      assert.strictEqual(writer.held(), held - 2)
    }).pipe(Effect.provide(layerWith())))

  it.effect("a closed boundary takes no further operation, and cannot be closed twice", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      yield* Governance.closeBoundary(boundary)
      const again = yield* Effect.flip(Governance.closeBoundary(boundary))
      assert.strictEqual(again._tag, "BoundaryError")
      const before = calls.write
      const late = yield* exec(ref, boundary, "notes.write", { text: "late" })
      assert.deepStrictEqual(
        [late._tag, late._tag === "denied" && late.reason.code],
        ["denied", "governance.boundary_not_open"]
      )
      assert.strictEqual(calls.write, before)
      assert.deepStrictEqual(types(yield* records(boundary.chain_id)), ["task_closed"])
    }).pipe(Effect.provide(layerWith())))

  it.effect("certifiable needs a durable evidence store and a durable policy snapshot store; governed takes either", () => {
    // The memory stores, claiming durability: what the profile check reads, and nothing else.
    const durableEvidence = Layer.effect(
      EvidenceStore,
      Effect.map(EvidenceStore, (store) => EvidenceStore.of({ ...store, durable: true }))
    )
    const durablePolicies = Layer.effect(
      PolicySnapshotStore,
      Effect.map(PolicySnapshotStore, (store) => PolicySnapshotStore.of({ ...store, durable: true }))
    )
    const profileOver = (
      durable: Layer.Layer<never, never, EvidenceStore | PolicySnapshotStore>,
      options: Governed.Options
    ) =>
      Effect.provide(
        Effect.map(ActionExecutor.ActionExecutor, (executor) => executor.profile),
        Governed.layer({}, options).pipe(
          Layer.provideMerge(Governance.layerWriter),
          Layer.provideMerge(durable),
          Layer.provideMerge(stores({ current: undefined }))
        )
      ).pipe(Effect.catchTag("ProfileUnavailableError", (error) => Effect.succeed(`${error.profile}: ${error.detail}`)))
    return Effect.gen(function*() {
      const certifiable = { certifiable: true }
      assert.strictEqual(
        yield* profileOver(Layer.empty, certifiable),
        "certifiable: the evidence store is not durable"
      )
      assert.strictEqual(
        yield* profileOver(durableEvidence, certifiable),
        "certifiable: the policy snapshot store is not durable"
      )
      assert.strictEqual(
        yield* profileOver(durablePolicies, certifiable),
        "certifiable: the evidence store is not durable"
      )
      assert.strictEqual(yield* profileOver(Layer.merge(durableEvidence, durablePolicies), certifiable), "certifiable")
      assert.strictEqual(yield* profileOver(Layer.empty, {}), "governed")
    })
  })

  it.effect("a call beyond capacity is deferred at stage 3 and opens no operation; the lease is back once a call ends", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const cancel = yield* Deferred.make<void>()
      const holding = yield* slowCall(ref, boundary, cancel)
      const before = calls.slow
      while (calls.slow === before) yield* Effect.yieldNow()
      const deferred = yield* exec(ref, boundary, "notes.write", { text: "later" })
      assert.isTrue(deferred._tag === "deferred" && deferred.reason.code === "capacity.unavailable")
      assert.strictEqual(deferred.stage, "bind_context")
      yield* Deferred.succeed(cancel, undefined)
      assert.strictEqual((yield* Fiber.join(holding))._tag, "cancelled")
      assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "now" }))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      assert.strictEqual(
        types(chain).filter((type) => type === "operation_started").length,
        2,
        "the deferral opened none"
      )
      assert.strictEqual(
        (yield* TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)).process_grade,
        "FULL"
      )
    }).pipe(Effect.provide(layerWith(undefined, { capacity: [Capacity.bounded({ id: "one-call", permits: 1 })] }))))

  it.effect("a deferral after the start is no gate result: the operation closes with operation_denied, and no gate counts it", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const outcome = yield* exec(ref, boundary, "notes.write", { text: "later" })
      assert.strictEqual(outcome._tag, "deferred")
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      assert.deepStrictEqual(types(chain), ["policy_bound", "operation_started", "operation_denied", "task_closed"])
      const denied = JSON.parse(chain[2]!.payload_json)
      assert.deepStrictEqual([denied.disposition, denied.reason_code], ["defer", "capacity.unavailable"])
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, chain[3]!.chain_hash)
      assert.strictEqual(certificate.process_grade, "FULL")
      const { summary_version, ...counts } = certificate.gate_summary
      assert.strictEqual(summary_version, 2)
      assert.deepStrictEqual(Object.values(counts).filter((count) => count !== 0), [])
    }).pipe(Effect.provide(layerWith(undefined, {
      interceptors: [{
        id: "capacity",
        identity: unconfigured,
        stage: "authorise",
        evaluate: () => Effect.succeed({ disposition: "defer", code: "capacity.unavailable" })
      }]
    }))))

  it.effect("observers see the committed terminal record's identifiers, and a failing observer changes nothing", () => {
    const seen: Array<Interceptor.Concluded["evidence"]> = []
    const observers = [
      { id: "audit-ui", observe: () => Effect.fail("ui down") },
      {
        id: "audit",
        observe: (event: Interceptor.Concluded) => Effect.sync(() => seen.push(event.evidence))
      }
    ]
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const outcome = yield* exec(ref, boundary, "notes.write", { text: "x" })
      assert.strictEqual(outcome._tag, "succeeded")
      const chain = yield* records(boundary.chain_id)
      assert.deepStrictEqual(seen, [{
        chain_id: boundary.chain_id,
        record_id: chain.at(-1)!.record_id,
        head_hash: chain.at(-1)!.chain_hash
      }])
      assert.isTrue((yield* Effect.flatMap(EvidenceStore, (store) => store.verify(boundary.chain_id))).valid)
    }).pipe(Effect.provide(layerWith({ current: undefined }, { observers })))
  })

  it.effect("an approval the policy requires satisfies its gate: recorded as allowed, no exception, nothing degraded", () =>
    Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const escalated = yield* exec(ref, boundary, "notes.sign", {})
      assert.strictEqual(escalated._tag, "escalated")
      const approval_id = escalated._tag === "escalated" ? escalated.approval!.approval_id : ""
      yield* Effect.flatMap(ApprovalQueue, (queue) => queue.approve(approval_id, { id: "bob", approver_class: "lead" }))
      assert.strictEqual((yield* exec(ref, boundary, "notes.sign", {}, { approval_id }))._tag, "succeeded")
      const chain = yield* records(boundary.chain_id)
      const second = chain.filter((r) => r.operation_id === chain.at(-1)!.operation_id)
      const gates = second.filter((r) => r.record_type === "gate_evaluated").map((r) => JSON.parse(r.payload_json))
      assert.deepStrictEqual(gates.map((g) => `${g.gate_id}:${g.decision}:${g.reason_code}`), [
        "base:allow:approval.granted",
        "review:allow:policy.allowed"
      ])
      assert.isFalse(chain.some((r) => r.record_type === "exception_granted"))
    }).pipe(Effect.provide(layerWith())))
})

describe("gate results", () => {
  // A second gate that also guards the filesystem: its guard part refuses /secrets, its policy part allows.
  const guardingSecrets = (gate_id: string, level: "advisory" | "soft", approver: Record<string, string> = {}) =>
    installPolicy({
      policy_id: `guarded-${level}`,
      version: "1",
      ...approver,
      rules: [
        { rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
        { rule_id: "fs", kind: "filesystem", effect: "allow", roots: ["/"], modes: ["write"] },
        { rule_id: "fs-secrets", kind: "filesystem", effect: "deny", roots: ["/secrets"], modes: ["write"] }
      ],
      gates: [
        { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow", "fs"] },
        { gate_id, level, order: 1, rule_ids: ["allow", "fs", "fs-secrets"] }
      ]
    })
  const audited = guardingSecrets("audit", "advisory")

  it.effect("a gate whose guard part denies is one gate result: an advisory one is recorded once, as a deny", () =>
    Effect.gen(function*() {
      const ref = yield* audited
      const boundary = yield* Governance.openBoundary(ref)
      assert.strictEqual((yield* exec(ref, boundary, "notes.save", { path: "/secrets/key" }))._tag, "succeeded")
      assert.strictEqual((yield* exec(ref, boundary, "notes.save", { path: "/tmp/note" }))._tag, "succeeded")
      const gates = (yield* records(boundary.chain_id))
        .filter((record) => record.record_type === "gate_evaluated")
        .map((record) => {
          const payload = JSON.parse(record.payload_json)
          return `${payload.gate_id}:${payload.decision}`
        })
      assert.deepStrictEqual(gates, ["audit:deny", "base:allow", "base:allow", "audit:allow"])
    }).pipe(Effect.provide(layerWith())))

  it.effect("an advisory deny's allow references the gate_evaluated record of the denying result in the chain", () =>
    Effect.gen(function*() {
      const ref = yield* audited
      const boundary = yield* Governance.openBoundary(ref)
      const outcome = yield* exec(ref, boundary, "notes.save", { path: "/secrets/key" })
      assert.strictEqual(outcome._tag, "succeeded")
      const referenced = outcome.decisions.flatMap((decision) => decision.evidence)
      assert.lengthOf(referenced, 1)
      const chain = yield* records(boundary.chain_id)
      const resolved = chain.filter((record) =>
        record.record_type === "gate_evaluated" &&
        `gate_evaluated:${JSON.parse(record.payload_json).result_id}` === referenced[0]
      )
      assert.lengthOf(resolved, 1)
      const payload = JSON.parse(resolved[0]!.payload_json)
      assert.deepStrictEqual([payload.gate_id, payload.level, payload.decision], ["audit", "advisory", "deny"])
      assert.strictEqual(resolved[0]!.operation_id, chain.at(-1)!.operation_id)
      const ids = chain.filter((r) => r.record_type === "gate_evaluated").map((r) =>
        JSON.parse(r.payload_json).result_id
      )
      assert.strictEqual(new Set(ids).size, ids.length)
    }).pipe(Effect.provide(layerWith())))

  const softly = (approver: Record<string, string>) =>
    installPolicy({
      policy_id: "softly",
      version: approver.approver_class === undefined ? "plain" : "with-authority",
      ...approver,
      rules: [
        { rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
        { rule_id: "no-publish", kind: "action", effect: "deny", action_patterns: ["notes.publish"] }
      ],
      gates: [
        { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow"] },
        { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow", "no-publish"] }
      ]
    })

  it.effect("an unresolved soft deny escalates to the approver the policy names, with no approval rule; else it is denied", () =>
    Effect.gen(function*() {
      const named = yield* softly({ approver_class: "lead" })
      const escalated = yield* exec(named, yield* Governance.openBoundary(named), "notes.publish", { text: "t" })
      assert.isTrue(escalated._tag === "escalated" && escalated.approval?.approver_class === "lead")
      const plain = yield* softly({})
      const denied = yield* exec(plain, yield* Governance.openBoundary(plain), "notes.publish", { text: "t" })
      assert.strictEqual(denied._tag, "denied")
    }).pipe(Effect.provide(layerWith())))

  it.effect("a soft gate's guard deny escalates like its policy deny; an approval lets it pass once, recorded, degraded", () =>
    Effect.gen(function*() {
      const ref = yield* guardingSecrets("review", "soft", { approver_class: "lead" })
      const boundary = yield* Governance.openBoundary(ref)
      const escalated = yield* exec(ref, boundary, "notes.save", { path: "/secrets/key" })
      assert.isTrue(escalated._tag === "escalated" && escalated.approval?.approver_class === "lead")
      const approval_id = escalated._tag === "escalated" ? escalated.approval!.approval_id : ""
      yield* (yield* ApprovalQueue).approve(approval_id, { id: "bob", approver_class: "lead" })
      const approved = yield* exec(ref, boundary, "notes.save", { path: "/secrets/key" }, { approval_id })
      assert.strictEqual(approved._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      const approvedRecords = chain.filter((record) => record.operation_id === chain.at(-2)!.operation_id)
      assert.deepStrictEqual(
        approvedRecords.map((record) => {
          const payload = JSON.parse(record.payload_json)
          return record.record_type === "gate_evaluated" ? `${payload.gate_id}:${payload.decision}` : record.record_type
        }),
        ["policy_bound", "operation_started", "review:deny", "exception_granted", "base:allow", "callable_completed"]
      )
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)
      assert.strictEqual(certificate.process_grade, "DEGRADED")
    }).pipe(Effect.provide(layerWith())))
})

/** A backend that spends the token itself before the real invoke, which then refuses it as spent. */
const spending = Layer.succeed(ActionExecutionBackend, {
  ...InProcessBackend.make,
  invoke: (token, invocation) => {
    InvocationToken.redeem(token, invocation.definition)
    return InProcessBackend.make.invoke(token, invocation)
  }
})

describe("the executor's own refusals and races", () => {
  it.effect("a token the backend refuses is a denial at invoke, closed as operation_denied, and charges no meter", () => {
    const charged: Array<unknown> = []
    const meter: Interceptor.Interceptor = {
      id: "test.meter",
      identity: unconfigured,
      stage: "policy",
      evaluate: () => Effect.succeed({ ...Interceptor.allow("test.allowed"), metered: true }),
      charge: (_, usage) => Effect.sync(() => void charged.push(usage))
    }
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      const before = calls.write
      const outcome = yield* exec(ref, boundary, "notes.write", { text: "x" })
      assert.deepStrictEqual(outcome._tag === "denied" && [outcome.reason.code, outcome.stage], [
        "invoke.token_refused",
        "invoke"
      ])
      assert.strictEqual(calls.write, before)
      assert.deepStrictEqual(charged, [])
      const terminal = (yield* records(boundary.chain_id)).at(-1)!
      assert.strictEqual(terminal.record_type, "operation_denied")
      assert.strictEqual(JSON.parse(terminal.payload_json).reason_code, "invoke.token_refused")
    }).pipe(Effect.provide(
      Governed.layer({ interceptors: [meter] }).pipe(
        Layer.provide(spending),
        Layer.provideMerge(Governance.layerWriter),
        Layer.provideMerge(stores({ current: undefined }))
      )
    ))
  })

  it.effect("a boundary whose close begins while a call is admitted denies it (boundary_not_open), and closes", () => {
    const gate: { entered?: Deferred.Deferred<void>; go?: Deferred.Deferred<void> } = {}
    const waiting: Capacity.Capacity = {
      id: "waiting",
      admit: () =>
        Effect.gen(function*() {
          if (gate.entered !== undefined) yield* Deferred.succeed(gate.entered, undefined)
          if (gate.go !== undefined) yield* Deferred.await(gate.go)
          return Either.right({ release: Effect.void })
        })
    }
    return Effect.gen(function*() {
      const { boundary, ref } = yield* setup
      gate.entered = yield* Deferred.make<void>()
      gate.go = yield* Deferred.make<void>()
      const call = yield* Effect.fork(exec(ref, boundary, "notes.write", { text: "x" }))
      yield* Deferred.await(gate.entered)
      const closing = yield* Effect.fork(Governance.closeBoundary(boundary))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      // The close waits for the admitted call: it has not appended task_closed yet.
      assert.deepStrictEqual(types(yield* records(boundary.chain_id)), [])
      yield* Deferred.succeed(gate.go, undefined)
      const outcome = yield* Fiber.join(call)
      assert.deepStrictEqual(outcome._tag === "denied" && [outcome.reason.code, outcome.stage], [
        "governance.boundary_not_open",
        "bind_context"
      ])
      yield* Fiber.join(closing)
      assert.deepStrictEqual(types(yield* records(boundary.chain_id)), ["task_closed"])
    }).pipe(Effect.provide(layerWith({ current: undefined }, { capacity: [waiting] })))
  })
})

describe("governed quota", () => {
  const minute = 60_000_000
  const budgeted = {
    ...declaration,
    policy_id: "quota",
    rules: [
      ...declaration.rules,
      {
        rule_id: "writes",
        kind: "budget",
        effect: "limit",
        action_patterns: ["notes.write"],
        budget_kind: "calls",
        limit: 1,
        window_microseconds: minute
      },
      {
        rule_id: "walls",
        kind: "budget",
        effect: "limit",
        action_patterns: ["notes.fail"],
        budget_kind: "wall_microseconds",
        limit: 0,
        window_microseconds: minute
      }
    ],
    gates: [
      { ...declaration.gates[0]!, rule_ids: [...declaration.gates[0]!.rule_ids, "writes", "walls"] },
      declaration.gates[1]!
    ]
  }

  it.effect("a spent windowed budget defers at stage 3 until the window ends: no handler, no operation, no gate result, no certificate fact", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(budgeted)
      const boundary = yield* Governance.openBoundary(ref)
      const before = { write: calls.write, fail: calls.fail }
      assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "a" }))._tag, "succeeded")
      const after = yield* records(boundary.chain_id)
      const refused = [
        yield* exec(ref, boundary, "notes.write", { text: "b" }),
        yield* exec(ref, boundary, "notes.fail", {})
      ]
      assert.deepStrictEqual(
        refused.map((o) => o._tag === "deferred" ? [o.stage, o.reason.code, o.retry_at] : [o._tag]),
        [["bind_context", "budget.exhausted", Time.fromMicros(minute)], [
          "bind_context",
          "budget.exhausted",
          Time.fromMicros(minute)
        ]]
      )
      assert.deepStrictEqual([calls.write, calls.fail], [before.write + 1, before.fail])
      // Nothing was appended for either deferred call: not policy_bound, operation_started or a gate_evaluated.
      assert.deepStrictEqual(yield* records(boundary.chain_id), after)
      yield* TestClock.adjust(minute / 1000)
      assert.strictEqual((yield* exec(ref, boundary, "notes.write", { text: "c" }))._tag, "succeeded")
      assert.strictEqual(calls.write, before.write + 2)
      yield* Governance.closeBoundary(boundary)
      const chain = yield* records(boundary.chain_id)
      assert.strictEqual(chain.filter((r) => r.record_type === "operation_started").length, 2)
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, chain.at(-1)!.chain_hash)
      // Two admitted calls, each a hard and a soft allow: the deferred calls are no fact of the certificate.
      assert.deepStrictEqual(
        [certificate.gate_summary.hard_allow, certificate.gate_summary.soft_allow, certificate.gate_summary.hard_deny],
        [2, 2, 0]
      )
      assert.strictEqual(certificate.process_grade, "FULL")
    }).pipe(Effect.provide(layerWith())))
})
