import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Either, Fiber, Layer, Option, Stream, TestClock } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import type { Draft, StoredRecord } from "../../core/evidence/Evidence.ts"
import { EvidenceStore, EvidenceUnavailableError } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import { appendOperation } from "../../core/evidence/internal/writer.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import { ActionExecutor } from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { heldAction, toolSet } from "../fixtures/actions.ts"
import { appendGranted } from "../fixtures/evidence.ts"
import { base } from "../fixtures/layers.ts"

const tools = toolSet()
const held = heldAction("hold")

const stores = Layer.mergeAll(
  MemoryEvidenceStore.layer,
  MemoryPolicySnapshotStore.layer,
  MemoryApprovalQueue.layer,
  MemoryExecutorRegistry.layer
)
  .pipe(Layer.provideMerge(base([...tools.actions, held.action])))

const layer = Governed.layer().pipe(
  Layer.provideMerge(Governance.layerWriter),
  Layer.provideMerge(stores)
)

// Hard gate denies `refuse`; soft gate denies `noop` (escalated to a lead); advisory gate denies `add`.
const declaration = {
  approver_class: "lead",
  rules: [
    { rule_id: "allow-all", kind: "action", effect: "allow", action_patterns: ["*"] },
    { rule_id: "no-refuse", kind: "action", effect: "deny", action_patterns: ["refuse"] },
    { rule_id: "review-noop", kind: "action", effect: "deny", action_patterns: ["noop"] },
    { rule_id: "lint-add", kind: "action", effect: "deny", action_patterns: ["add"] },
    { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["nothing"] }
  ],
  gates: [
    { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-all", "no-refuse", "ask"] },
    { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow-all", "review-noop"] },
    { gate_id: "lint", level: "advisory", order: 2, rule_ids: ["allow-all", "lint-add"] }
  ]
}

const compile = (extra: Record<string, unknown> = {}) =>
  Effect.orDie(
    PolicySnapshot.compile(
      Either.getOrThrow(PermissionPolicy.decode({ policy_id: "p", version: "1", ...declaration, ...extra }))
    )
  )

const install = Effect.gen(function*() {
  const store = yield* PolicySnapshotStore
  const snapshot = yield* compile()
  yield* store.put(snapshot)
  yield* store.activate("p", "1", "ops", Time.fromMicros(0))
  return { policy_id: "p", version: "1", digest: snapshot.digest } satisfies PolicySnapshotRef
})

const exec = (boundary: Governance.TaskBoundary, action: string, args: Record<string, unknown>, approval?: string) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: "alice" },
      effect_backend: InProcessBackend.make.ref,
      policy_snapshot: boundary.policy
    })
    const request = ExecutionRequest.make({
      request_id: yield* IdGenerator.uuid,
      action: { name: action },
      arguments: args,
      execution_scope: scope,
      ...(approval === undefined ? {} : { approval_id: Uuid.make(approval) })
    })
    return yield* executor.execute(request, { context, boundary })
  })

const headOf = (chain_id: string) =>
  Effect.map(Effect.flatMap(EvidenceStore, (store) => store.head(chain_id)), (head) => Option.getOrThrow(head).hash)

const recordsOf = (chain_id: string) =>
  Effect.map(Effect.flatMap(EvidenceStore, (store) => Stream.runCollect(store.read(chain_id))), Chunk.toReadonlyArray)

/** The version 2 summary counted straight from the stored records, independently of TaskCertificate. */
const countFrom = (records: ReadonlyArray<StoredRecord>) => {
  const counts: Record<string, number> = {
    summary_version: 2,
    hard_allow: 0,
    hard_deny: 0,
    soft_allow: 0,
    soft_deny: 0,
    advisory_allow: 0,
    advisory_deny: 0,
    exceptions: 0,
    evaluator_errors: 0
  }
  for (const record of records) {
    if (record.record_type === "exception_granted") counts.exceptions!++
    if (record.record_type !== "gate_evaluated") continue
    const payload = JSON.parse(record.payload_json) as { level: string; decision: string; evaluator_error?: true }
    if (payload.evaluator_error === true) counts.evaluator_errors!++
    else counts[`${payload.level}_${payload.decision}`]!++
  }
  return counts
}

const summaryOf = (certificate: TaskCertificate.TaskCertificate): Record<string, number | undefined> => ({
  ...certificate.gate_summary
})

/** Success, captured failure, hard denial and escalation under one boundary, then close it. */
const fullTask = Effect.gen(function*() {
  const ref = yield* install
  const boundary = yield* Governance.openBoundary(ref)
  const outcomes = [
    yield* exec(boundary, "add", { a: 1, b: 2 }),
    yield* exec(boundary, "explode", { secret: "hunter2" }),
    yield* exec(boundary, "refuse", {}),
    yield* exec(boundary, "noop", {})
  ]
  assert.deepStrictEqual(outcomes.map((o) => o._tag), ["succeeded", "failed", "denied", "escalated"])
  yield* Governance.closeBoundary(boundary)
  return { ref, boundary, head: yield* headOf(boundary.chain_id) }
})

const reasonOf = <A, R>(effect: Effect.Effect<A, TaskCertificate.CertificateError, R>) =>
  Effect.map(Effect.flip(effect), (error) => error.reason)

describe("TaskCertificate.mint", () => {
  it.effect("a closed task of success, failure, denial and escalation is FULL, its summary the committed gate results", () =>
    Effect.gen(function*() {
      const { boundary, head, ref } = yield* fullTask
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, head)
      const records = yield* recordsOf(boundary.chain_id)
      assert.strictEqual(certificate.process_grade, "FULL")
      assert.deepStrictEqual(summaryOf(certificate), countFrom(records))
      assert.isAtLeast(certificate.gate_summary.hard_deny, 1)
      assert.isAtLeast(certificate.gate_summary.soft_deny, 1)
      assert.isAtLeast(certificate.gate_summary.advisory_deny, 1)
      assert.strictEqual(certificate.gate_summary.exceptions, 0)
      assert.deepStrictEqual(
        [certificate.chain_id, certificate.task_boundary_id, certificate.evidence_chain_head],
        [boundary.chain_id, boundary.task_boundary_id, head]
      )
      assert.deepStrictEqual(
        [certificate.policy_id, certificate.policy_version, certificate.policy_digest],
        [ref.policy_id, ref.version, ref.digest]
      )
      assert.deepStrictEqual(
        records.filter((r) => r.record_type !== "gate_evaluated" && r.record_type !== "policy_bound").map((r) =>
          r.record_type
        ),
        [
          "operation_started",
          "callable_completed",
          "operation_started",
          "callable_failed",
          "operation_started",
          "operation_denied",
          "operation_started",
          "operation_denied",
          "task_closed"
        ]
      )
    }).pipe(Effect.provide(layer)))

  it.effect("an approval consumed for a soft deny grants an exception, and the certificate is DEGRADED", () =>
    Effect.gen(function*() {
      const ref = yield* install
      const boundary = yield* Governance.openBoundary(ref)
      const escalated = yield* exec(boundary, "noop", {})
      assert.strictEqual(escalated._tag, "escalated")
      const approval = escalated._tag === "escalated" ? escalated.approval!.approval_id : ""
      yield* (yield* ApprovalQueue).approve(approval, { id: "maya", approver_class: "lead" })
      assert.strictEqual((yield* exec(boundary, "noop", {}, approval))._tag, "succeeded")
      assert.strictEqual((yield* exec(boundary, "add", { a: 2, b: 3 }))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id))
      const records = yield* recordsOf(boundary.chain_id)
      assert.strictEqual(records.filter((r) => r.record_type === "exception_granted").length, 1)
      assert.strictEqual(certificate.process_grade, "DEGRADED")
      assert.strictEqual(certificate.gate_summary.exceptions, 1)
      assert.deepStrictEqual(summaryOf(certificate), countFrom(records))
      assert.isTrue((yield* TaskCertificate.verify(certificate)).valid)
      const upgraded = yield* TaskCertificate.verify(
        new TaskCertificate.TaskCertificate({ ...certificate, process_grade: "FULL" })
      )
      assert.strictEqual(upgraded.failure_code, "grade_mismatch")
    }).pipe(Effect.provide(layer)))

  it.effect("an empty closed boundary is FULL with nothing counted", () =>
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(yield* install)
      yield* Governance.closeBoundary(boundary)
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id))
      assert.strictEqual(certificate.process_grade, "FULL")
      assert.deepStrictEqual(Object.values(summaryOf(certificate)), [2, 0, 0, 0, 0, 0, 0, 0, 0])
    }).pipe(Effect.provide(layer)))

  it.effect("a boundary runs only on the writer that opened it, as itself; a chain with records is never opened again", () =>
    Effect.gen(function*() {
      const ref = yield* install
      const boundary = yield* Governance.openBoundary(ref)
      assert.strictEqual((yield* exec(boundary, "add", { a: 1, b: 1 }))._tag, "succeeded")
      const before = tools.counter.count("add")
      const strangers = [
        new Governance.TaskBoundary({ ...boundary, task_boundary_id: yield* IdGenerator.uuid }),
        new Governance.TaskBoundary({ ...boundary, chain_id: yield* IdGenerator.uuid })
      ]
      for (const stranger of strangers) {
        const outcome = yield* exec(stranger, "add", { a: 1, b: 1 })
        assert.deepStrictEqual(
          outcome._tag === "denied" ? outcome.reason.code : outcome._tag,
          "governance.boundary_not_open"
        )
      }
      assert.strictEqual(tools.counter.count("add"), before)
      assert.deepStrictEqual(yield* recordsOf(strangers[1]!.chain_id), [])
      // Another process's writer (a restart) cannot take the boundary over: it stays abandoned there, never certified.
      const restartedWriter = yield* Governance.makeWriter
      const refused = yield* Effect.flip(restartedWriter.open(boundary))
      assert.deepStrictEqual([refused._tag, refused._tag === "BoundaryError" && refused.reason], [
        "BoundaryError",
        "in_use"
      ])
      const restarted = yield* Effect.flip(
        Effect.provideService(Governance.closeBoundary(boundary), Governance.EvidenceWriter, restartedWriter)
      )
      assert.deepStrictEqual([restarted._tag, restarted._tag === "BoundaryError" && restarted.reason], [
        "BoundaryError",
        "abandoned"
      ])
      const again = yield* Effect.flip((yield* Governance.EvidenceWriter).open(boundary))
      assert.strictEqual(again._tag === "BoundaryError" && again.reason, "in_use")
    }).pipe(Effect.provide(layer)))

  it.effect("not_closed before the close; the close mints; a second close is rejected and leaves the head", () =>
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(yield* install)
      yield* exec(boundary, "add", { a: 1, b: 1 })
      const open = yield* headOf(boundary.chain_id)
      const early = yield* Effect.flip(TaskCertificate.mint(boundary.chain_id, open))
      assert.strictEqual(early.reason, "not_closed")
      const records = yield* recordsOf(boundary.chain_id)
      assert.strictEqual(early.failed_record_id, records.at(-1)!.record_id)
      yield* Governance.closeBoundary(boundary)
      const closed = yield* headOf(boundary.chain_id)
      assert.strictEqual((yield* TaskCertificate.mint(boundary.chain_id, closed)).evidence_chain_head, closed)
      const again = yield* Effect.flip(Governance.closeBoundary(boundary))
      assert.strictEqual(again._tag, "BoundaryError")
      // A writer that starts cold (another process) reads the closed head from the store and refuses too.
      const fresh = yield* Effect.flip(
        Governance.closeBoundary(boundary).pipe(
          Effect.provideServiceEffect(Governance.EvidenceWriter, Governance.makeWriter)
        )
      )
      assert.strictEqual(fresh._tag, "BoundaryError")
      const afterClose = yield* exec(boundary, "add", { a: 1, b: 1 })
      assert.deepStrictEqual(
        [afterClose._tag, afterClose._tag === "denied" && afterClose.reason.code],
        ["denied", "governance.boundary_not_open"]
      )
      assert.strictEqual(yield* headOf(boundary.chain_id), closed)
      // The pre-close head is no longer the head: a record follows it.
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(boundary.chain_id, open)), "broken_link")
    }).pipe(Effect.provide(layer)))

  it.effect("a record the store let past task_closed, or a second task_closed, makes the chain not_closed", () =>
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(yield* install)
      yield* exec(boundary, "add", { a: 1, b: 1 })
      yield* Governance.closeBoundary(boundary)
      const store = yield* EvidenceStore
      // Appended straight to the store, past the writer that refuses a closed chain.
      const extend = (record_type: Draft["record_type"]) =>
        Effect.gen(function*() {
          const records = yield* recordsOf(boundary.chain_id)
          const last = records.at(-1)!
          const record = yield* Evidence.seal({
            record_type,
            operation_id: null,
            policy_id: boundary.policy.policy_id,
            policy_version: boundary.policy.version,
            payload: { task_boundary_id: boundary.task_boundary_id, policy_digest: boundary.policy.digest }
          }, {
            record_id: yield* IdGenerator.uuid,
            chain_id: boundary.chain_id,
            sequence: last.sequence + 1,
            previous_chain_hash: Sha256Hex.make(last.chain_hash),
            created_at: yield* Time.now
          })
          yield* store.append(record)
          return last
        })
      const closed = yield* extend("record_superseded")
      const past = yield* Effect.flip(TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id)))
      assert.deepStrictEqual([past.reason, past.failed_record_id], ["not_closed", closed.record_id])
      yield* extend("task_closed")
      const twice = yield* Effect.flip(TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id)))
      assert.deepStrictEqual([twice.reason, twice.failed_record_id], ["not_closed", closed.record_id])
    }).pipe(Effect.provide(layer)))

  it.effect("an abandoned boundary is never certified, while the one after it is", () =>
    Effect.gen(function*() {
      const ref = yield* install
      const abandoned = yield* Governance.openBoundary(ref)
      yield* exec(abandoned, "add", { a: 1, b: 2 })
      const empty = yield* Governance.openBoundary(ref)
      const next = yield* Governance.openBoundary(ref)
      yield* exec(next, "add", { a: 3, b: 4 })
      yield* Governance.closeBoundary(next)
      assert.strictEqual(
        yield* reasonOf(TaskCertificate.mint(abandoned.chain_id, yield* headOf(abandoned.chain_id))),
        "not_closed"
      )
      const head = yield* headOf(next.chain_id)
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(abandoned.chain_id, head)), "broken_link")
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(empty.chain_id, head)), "broken_link")
      assert.strictEqual((yield* TaskCertificate.mint(next.chain_id, head)).task_boundary_id, next.task_boundary_id)
    }).pipe(Effect.provide(layer)))

  it.effect("missing_policy when the exact version is gone, holds other content, or does not recompute", () =>
    Effect.gen(function*() {
      const { boundary, head } = yield* fullTask
      const mintWith = <R>(setup: Effect.Effect<void, unknown, R>) =>
        Effect.flip(
          Effect.zipRight(Effect.orDie(setup), TaskCertificate.mint(boundary.chain_id, head)).pipe(
            Effect.provide(MemoryPolicySnapshotStore.layer)
          )
        )
      // Same id and version, other content: one hard gate that allows everything.
      const other = compile({
        rules: [declaration.rules[0], declaration.rules[4]],
        gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-all", "ask"] }]
      })
      // A fresh store holding the same snapshot certifies: each refusal below is the policy's fault.
      const same = yield* TaskCertificate.mint(boundary.chain_id, head).pipe(
        Effect.provide(
          Layer.effectDiscard(
            Effect.orDie(Effect.flatMap(PolicySnapshotStore, (store) => Effect.flatMap(compile(), store.put)))
          ).pipe(Layer.provideMerge(MemoryPolicySnapshotStore.layer))
        )
      )
      assert.strictEqual(same.policy_digest, boundary.policy.digest)
      const gone = yield* mintWith(Effect.void)
      assert.strictEqual(gone.reason, "missing_policy")
      assert.include(gone.detail, "no policy p@1")
      const replaced = yield* mintWith(Effect.flatMap(PolicySnapshotStore, (store) => Effect.flatMap(other, store.put)))
      assert.strictEqual(replaced.reason, "missing_policy")
      assert.include(replaced.detail, "is not the snapshot the chain recorded")
      // A store serving content that does not recompute to the digest it claims (writ's own stores refuse it on put).
      const forging = Layer.effect(
        PolicySnapshotStore,
        Effect.gen(function*() {
          const snapshot = PolicySnapshot.PolicySnapshot.make({ ...(yield* other), digest: boundary.policy.digest })
          return { ...(yield* MemoryPolicySnapshotStore.make), get: () => Effect.succeed(snapshot) }
        })
      )
      const forged = yield* Effect.flip(TaskCertificate.mint(boundary.chain_id, head).pipe(Effect.provide(forging)))
      assert.strictEqual(forged.reason, "missing_policy")
      assert.include(forged.detail, "does not recompute")
      // The original store still certifies the same chain.
      assert.strictEqual((yield* TaskCertificate.mint(boundary.chain_id, head)).policy_digest, boundary.policy.digest)
    }).pipe(Effect.provide(layer)))

  it.effect("incomplete_operations: a start unbound or without a terminal, a terminal never started, two terminals, a reused id", () =>
    Effect.gen(function*() {
      const ref = yield* install
      const writer = yield* Governance.EvidenceWriter
      const draft = (
        boundary: Governance.TaskBoundary,
        record_type: Draft["record_type"],
        operation_id: Uuid | null
      ): Draft => ({
        record_type,
        operation_id,
        policy_id: ref.policy_id,
        policy_version: ref.version,
        payload: record_type === "operation_started" || record_type === "policy_bound"
          ? { task_boundary_id: boundary.task_boundary_id, policy_digest: ref.digest }
          : { stage: "outcome" }
      })
      // Each start follows its own policy_bound, as the executor writes them, unless `bound` is false.
      const chain = (plan: ReadonlyArray<readonly [Draft["record_type"], Uuid]>, bound = true) =>
        Effect.gen(function*() {
          const boundary = yield* Governance.openBoundary(ref)
          const ids = []
          for (const [type, operation] of plan) {
            if (bound && type === "operation_started") {
              yield* appendGranted(writer, boundary.chain_id, draft(boundary, "policy_bound", operation))
            }
            ids.push((yield* appendGranted(writer, boundary.chain_id, draft(boundary, type, operation))).record_id)
          }
          yield* Governance.closeBoundary(boundary)
          return {
            minted: yield* Effect.either(TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id))),
            ids
          }
        })
      const refused = (plan: Parameters<typeof chain>[0], bound = true) =>
        Effect.map(chain(plan, bound), ({ ids, minted }) => {
          assert.isTrue(Either.isLeft(minted))
          const error = Either.flip(minted).pipe(Either.getOrThrow)
          return { ids, error }
        })
      const [a, b] = [yield* IdGenerator.uuid, yield* IdGenerator.uuid]
      // The same builder with every operation concluded once certifies: the refusals below are the operations' fault.
      const complete = yield* chain([["operation_started", a], ["callable_completed", a]])
      assert.isTrue(Either.isRight(complete.minted))
      const open = yield* refused([["operation_started", a], ["operation_started", b], ["callable_completed", b]])
      assert.deepStrictEqual([open.error.reason, open.error.failed_record_id], ["incomplete_operations", open.ids[0]])
      const orphan = yield* refused([["callable_completed", a]])
      assert.deepStrictEqual([orphan.error.reason, orphan.error.failed_record_id], [
        "incomplete_operations",
        orphan.ids[0]
      ])
      const twice = yield* refused([["operation_started", a], ["callable_failed", a], ["operation_denied", a]])
      assert.deepStrictEqual([twice.error.reason, twice.error.failed_record_id], [
        "incomplete_operations",
        twice.ids[2]
      ])
      // An operation id is fresh only once: started again after its operation concluded, it is not a new operation.
      const reused = yield* refused([
        ["operation_started", a],
        ["callable_completed", a],
        ["operation_started", a],
        ["operation_denied", a]
      ])
      assert.deepStrictEqual([reused.error.reason, reused.error.failed_record_id], [
        "incomplete_operations",
        reused.ids[2]
      ])
      // A start must follow its own operation's policy_bound: without one, or after another's, it is not governed.
      const unbound = yield* refused([["operation_started", a], ["callable_completed", a]], false)
      assert.deepStrictEqual([unbound.error.reason, unbound.error.failed_record_id], [
        "incomplete_operations",
        unbound.ids[0]
      ])
      const boundElsewhere = yield* refused(
        [["policy_bound", b], ["operation_started", a], ["callable_completed", a]],
        false
      )
      assert.deepStrictEqual([boundElsewhere.error.reason, boundElsewhere.error.failed_record_id], [
        "incomplete_operations",
        boundElsewhere.ids[1]
      ])
    }).pipe(Effect.provide(layer)))

  it.effect("a record changed between the store and the certificate is content_mismatch; a store error is unavailable", () =>
    Effect.gen(function*() {
      const { boundary, head } = yield* fullTask
      const store = yield* EvidenceStore
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, head)
      const records = yield* recordsOf(boundary.chain_id)
      const target = records.find((r) => r.record_type === "gate_evaluated" && r.payload_json.includes("\"deny\""))!
      const lying = EvidenceStore.of({
        ...store,
        read: (chain_id, after) =>
          Stream.map(store.read(chain_id, after), (record) =>
            record.record_id === target.record_id
              ? { ...record, payload_json: record.payload_json.replace("\"deny\"", "\"allow\"") }
              : record)
      })
      const tampered = yield* Effect.flip(
        TaskCertificate.mint(boundary.chain_id, head).pipe(Effect.provideService(EvidenceStore, lying))
      )
      assert.deepStrictEqual([tampered.reason, tampered.failed_record_id], ["content_mismatch", target.record_id])
      const reverified = yield* TaskCertificate.verify(certificate).pipe(Effect.provideService(EvidenceStore, lying))
      assert.deepStrictEqual([reverified.valid, reverified.failure_code], [false, "content_mismatch"])
      const down = EvidenceStore.of({
        ...store,
        read: () => Stream.fail(new EvidenceUnavailableError({ detail: "disk gone" }))
      })
      assert.strictEqual(
        yield* reasonOf(TaskCertificate.mint(boundary.chain_id, head).pipe(Effect.provideService(EvidenceStore, down))),
        "unavailable"
      )
      assert.strictEqual(
        yield* reasonOf(TaskCertificate.verify(certificate).pipe(Effect.provideService(EvidenceStore, down))),
        "unavailable"
      )
    }).pipe(Effect.provide(layer)))
})

describe("TaskCertificate.verify", () => {
  it.effect("a fresh certificate verifies; an altered summary, grade, policy, boundary, head or mint time does not", () =>
    Effect.gen(function*() {
      yield* TestClock.adjust("1 hour")
      const { boundary, head } = yield* fullTask
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, head)
      const verdict = (altered: Partial<TaskCertificate.TaskCertificate>) =>
        Effect.map(
          TaskCertificate.verify(new TaskCertificate.TaskCertificate({ ...certificate, ...altered })),
          (v) => v.failure_code
        )
      const fresh = yield* TaskCertificate.verify(certificate)
      assert.deepStrictEqual([fresh.valid, fresh.failure_code, fresh.detail], [true, null, null])
      const summary = certificate.gate_summary
      assert.strictEqual(
        yield* verdict({
          gate_summary: new TaskCertificate.GateSummary({ ...summary, hard_deny: summary.hard_deny - 1 })
        }),
        "summary_mismatch"
      )
      assert.strictEqual(
        yield* verdict({ gate_summary: new TaskCertificate.GateSummary({ ...summary, exceptions: 1 }) }),
        "summary_mismatch"
      )
      assert.strictEqual(yield* verdict({ process_grade: "DEGRADED" }), "grade_mismatch")
      assert.strictEqual(yield* verdict({ policy_version: "2" }), "policy_mismatch")
      assert.strictEqual(yield* verdict({ policy_digest: Sha256Hex.make("0".repeat(64)) }), "policy_mismatch")
      assert.strictEqual(yield* verdict({ task_boundary_id: yield* IdGenerator.uuid }), "not_closed")
      assert.strictEqual(yield* verdict({ evidence_chain_head: Sha256Hex.make("a".repeat(64)) }), "broken_link")
      const records = yield* recordsOf(boundary.chain_id)
      const earlier = Sha256Hex.make(records.at(-2)!.chain_hash)
      assert.strictEqual(yield* verdict({ evidence_chain_head: earlier }), "broken_link")
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(boundary.chain_id, "a".repeat(64))), "broken_link")
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(boundary.chain_id, earlier)), "broken_link")
      const closed_at = records.at(-1)!.created_at
      assert.isTrue(certificate.minted_at >= closed_at)
      assert.strictEqual(yield* verdict({ minted_at: Time.fromMicros(0) }), "minted_before_close")
      assert.strictEqual(yield* verdict({ minted_at: Time.Timestamp.make(closed_at) }), null)
    }).pipe(Effect.provide(layer)))
})

/** Real time for a forked close to get as far as it can: it waits on no clock, only on the operations in flight. */
const settle = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))

const typesOf = (records: ReadonlyArray<StoredRecord>) => records.map((r) => r.record_type)

/** A boundary with `hold` in flight and a close of it forked once the handler has entered. */
const closeWhileHeld = Effect.gen(function*() {
  const gate = yield* held.arm
  const ref = yield* install
  const boundary = yield* Governance.openBoundary(ref)
  const running = yield* Effect.fork(exec(boundary, "hold", {}))
  yield* Deferred.await(gate.entered)
  const closing = yield* Effect.fork(Governance.closeBoundary(boundary))
  return { ref, boundary, running, closing, release: Deferred.succeed(gate.release, undefined) }
})

const gradeOf = (chain_id: string) =>
  Effect.map(
    Effect.flatMap(headOf(chain_id), (head) => TaskCertificate.mint(chain_id, head)),
    (certificate) => certificate.process_grade
  )

describe("Governance.closeBoundary", () => {
  it.effect("waits for the operation in flight, which concludes first; then task_closed, and the certificate is FULL", () =>
    Effect.gen(function*() {
      const { boundary, closing, release, running } = yield* closeWhileHeld
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(closing)))
      assert.notInclude(typesOf(yield* recordsOf(boundary.chain_id)), "task_closed")
      yield* release
      assert.strictEqual((yield* Fiber.join(running))._tag, "succeeded")
      yield* Fiber.join(closing)
      assert.deepStrictEqual(typesOf(yield* recordsOf(boundary.chain_id)).slice(-2), [
        "callable_completed",
        "task_closed"
      ])
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("an operation whose start follows the close's is refused before operation_started and never runs", () =>
    Effect.gen(function*() {
      const { boundary, closing, release, running } = yield* closeWhileHeld
      yield* settle
      const before = tools.counter.count("add")
      const late = yield* exec(boundary, "add", { a: 1, b: 1 })
      assert.deepStrictEqual(
        [late._tag, late._tag === "denied" && late.reason.code],
        ["denied", "governance.boundary_not_open"]
      )
      // A start from an executor that saw the boundary open just before the close began: the writer refuses it.
      const writer = yield* Governance.EvidenceWriter
      const raced = yield* Effect.flip(appendOperation(writer, boundary.chain_id, [{
        record_type: "operation_started",
        operation_id: yield* IdGenerator.uuid,
        policy_id: boundary.policy.policy_id,
        policy_version: boundary.policy.version,
        payload: {}
      }]))
      assert.deepStrictEqual([raced._tag, raced._tag === "BoundaryError" && raced.reason], ["BoundaryError", "closing"])
      assert.strictEqual(tools.counter.count("add"), before)
      yield* release
      assert.strictEqual((yield* Fiber.join(running))._tag, "succeeded")
      yield* Fiber.join(closing)
      const records = yield* recordsOf(boundary.chain_id)
      assert.strictEqual(typesOf(records).filter((type) => type === "operation_started").length, 1)
      assert.strictEqual(typesOf(records).at(-1), "task_closed")
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("a close waits only for its own chain: another boundary runs, closes and certifies meanwhile", () =>
    Effect.gen(function*() {
      const { boundary, closing, ref, release, running } = yield* closeWhileHeld
      const other = yield* Governance.openBoundary(ref)
      assert.strictEqual((yield* exec(other, "add", { a: 1, b: 2 }))._tag, "succeeded")
      yield* Governance.closeBoundary(other)
      assert.strictEqual(yield* gradeOf(other.chain_id), "FULL")
      yield* settle
      assert.isTrue(Option.isNone(yield* Fiber.poll(closing)))
      yield* release
      yield* Fiber.join(running)
      yield* Fiber.join(closing)
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("an operation interrupted while the close waits concludes with operation_cancelled before task_closed", () =>
    Effect.gen(function*() {
      const { boundary, closing, running } = yield* closeWhileHeld
      yield* settle
      yield* Fiber.interrupt(running)
      yield* Fiber.join(closing)
      assert.deepStrictEqual(typesOf(yield* recordsOf(boundary.chain_id)).slice(-2), [
        "operation_cancelled",
        "task_closed"
      ])
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("a boundary belongs to the writer that opened it: left open when its process ends, it is abandoned for good", () =>
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(yield* install)
      assert.strictEqual((yield* exec(boundary, "add", { a: 1, b: 2 }))._tag, "succeeded")
      const head = yield* headOf(boundary.chain_id)
      // Another process's writer, holding every id of the boundary, cannot close it.
      const stranger = yield* Effect.flip(
        Governance.closeBoundary(boundary).pipe(
          Effect.provideServiceEffect(Governance.EvidenceWriter, Governance.makeWriter)
        )
      )
      assert.isTrue(stranger._tag === "BoundaryError" && stranger.reason === "abandoned")
      assert.strictEqual(yield* headOf(boundary.chain_id), head)
      assert.strictEqual(yield* reasonOf(TaskCertificate.mint(boundary.chain_id, head)), "not_closed")
      // The writer that opened it still closes it.
      yield* Governance.closeBoundary(boundary)
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("only the boundary opened closes its chain: another id, opening time or policy is refused and changes nothing", () =>
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(yield* install)
      assert.strictEqual((yield* exec(boundary, "add", { a: 1, b: 2 }))._tag, "succeeded")
      const head = yield* headOf(boundary.chain_id)
      const forgeries = [
        ["boundary_mismatch", { task_boundary_id: yield* IdGenerator.uuid }],
        ["boundary_mismatch", { opened_at: Time.fromMicros(Time.toMicros(boundary.opened_at) + 1) }],
        ["policy_mismatch", { policy: { ...boundary.policy, version: "other" } }],
        ["policy_mismatch", { policy: { ...boundary.policy, digest: Sha256Hex.make("0".repeat(64)) } }]
      ] as const
      for (const [reason, fields] of forgeries) {
        const refused = yield* Effect.flip(
          Governance.closeBoundary(new Governance.TaskBoundary({ ...boundary, ...fields }))
        )
        assert.deepStrictEqual([refused._tag, refused._tag === "BoundaryError" && refused.reason], [
          "BoundaryError",
          reason
        ])
      }
      assert.strictEqual(yield* headOf(boundary.chain_id), head)
      // The chain is not closing: the real boundary still runs operations, then closes and certifies.
      assert.strictEqual((yield* exec(boundary, "add", { a: 2, b: 2 }))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      assert.strictEqual(typesOf(yield* recordsOf(boundary.chain_id)).at(-1), "task_closed")
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(layer)))

  it.effect("an interrupted close leaves the boundary refusing new operations; closing it again completes it", () =>
    Effect.gen(function*() {
      const { boundary, closing, release, running } = yield* closeWhileHeld
      yield* settle
      yield* Fiber.interrupt(closing)
      const late = yield* exec(boundary, "add", { a: 1, b: 1 })
      assert.deepStrictEqual(
        [late._tag, late._tag === "denied" && late.reason.code],
        ["denied", "governance.boundary_not_open"]
      )
      yield* release
      assert.strictEqual((yield* Fiber.join(running))._tag, "succeeded")
      yield* Governance.closeBoundary(boundary)
      assert.deepStrictEqual(typesOf(yield* recordsOf(boundary.chain_id)).slice(-2), [
        "callable_completed",
        "task_closed"
      ])
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
      assert.strictEqual((yield* Effect.flip(Governance.closeBoundary(boundary)))._tag, "BoundaryError")
    }).pipe(Effect.provide(layer)))

  it.effect("an operation interrupted while its start commits still concludes, and the close certifies FULL", () =>
    Effect.gen(function*() {
      const ref = yield* install
      const boundary = yield* Governance.openBoundary(ref)
      // An operation before it, so the writer holds a cached head an unfinished append would leave stale.
      assert.strictEqual((yield* exec(boundary, "add", { a: 1, b: 2 }))._tag, "succeeded")
      const hold = { committed: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
      startHold.armed = hold
      const running = yield* Effect.fork(exec(boundary, "add", { a: 1, b: 2 }))
      yield* Deferred.await(hold.committed)
      const interrupting = yield* Effect.fork(Fiber.interrupt(running))
      yield* Deferred.succeed(hold.release, undefined)
      yield* Fiber.join(interrupting)
      yield* Governance.closeBoundary(boundary)
      assert.deepStrictEqual(typesOf(yield* recordsOf(boundary.chain_id)).slice(-4), [
        "policy_bound",
        "operation_started",
        "operation_cancelled",
        "task_closed"
      ])
      assert.strictEqual(yield* gradeOf(boundary.chain_id), "FULL")
    }).pipe(Effect.provide(startHeldLayer)))
})

/** When armed, the memory store holds the next batch holding an `operation_started` after committing it. */
const startHold: {
  armed: { readonly committed: Deferred.Deferred<void>; readonly release: Deferred.Deferred<void> } | undefined
} = { armed: undefined }

const startHeldLayer = Governed.layer().pipe(
  Layer.provideMerge(Governance.layerWriter),
  Layer.provideMerge(
    Layer.mergeAll(
      Layer.effect(
        EvidenceStore,
        Effect.map(MemoryEvidenceStore.make, (store) =>
          EvidenceStore.of({
            ...store,
            appendAll: (records) =>
              Effect.flatMap(store.appendAll(records), (receipts) => {
                const hold = startHold.armed
                if (hold === undefined || !records.some((r) => r.record_type === "operation_started")) {
                  return Effect.succeed(receipts)
                }
                startHold.armed = undefined
                return Effect.as(
                  Effect.zipRight(Deferred.succeed(hold.committed, undefined), Deferred.await(hold.release)),
                  receipts
                )
              })
          }))
      ),
      MemoryPolicySnapshotStore.layer,
      MemoryApprovalQueue.layer,
      MemoryExecutorRegistry.layer
    ).pipe(Layer.provideMerge(base([...tools.actions, held.action])))
  )
)
