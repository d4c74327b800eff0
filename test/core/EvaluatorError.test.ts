import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import type * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { ActionExecutor as Executor, layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import { PathResolver } from "../../core/policy/PolicyPath.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { toolSet } from "../fixtures/actions.ts"
import { base } from "../fixtures/layers.ts"
import { bound, unconfigured } from "../fixtures/policy.ts"

const tools = toolSet()

/** An action with a path argument, so the policy gate resolves it before any gate is evaluated. */
const readFile = Action.make({
  name: "read_file",
  input: Schema.Struct({ path: Schema.String }),
  output: Schema.String,
  effects: ["filesystem.read"],
  handler: () => {
    tools.counter.hit("read_file")
    return "contents"
  }
})

/** A path resolver that is down: every resolution dies inside the policy gate's own evaluation. */
const brokenPaths = Layer.succeed(PathResolver, { resolve: () => Effect.die(new Error("resolver unavailable")) })

const layerWith = (config: ActionExecutor.Config = {}) =>
  Governed.layer(config).pipe(
    Layer.provideMerge(Governance.layerWriter),
    Layer.provideMerge(
      Layer.mergeAll(
        MemoryEvidenceStore.layer,
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer,
        MemoryExecutorRegistry.layer,
        brokenPaths
      ).pipe(Layer.provideMerge(base([...tools.actions, readFile])))
    )
  )

const policyWith = (gates: ReadonlyArray<Record<string, unknown>>, extra: Record<string, unknown> = {}) => ({
  policy_id: "p",
  version: "1",
  approver_class: "lead",
  rules: [{ rule_id: "allow-all", kind: "action", effect: "allow", action_patterns: ["*"] }],
  gates: gates.map((gate, order) => ({ order, rule_ids: ["allow-all"], ...gate })),
  interceptors: bound("thrower"),
  ...extra
})

const install = (declaration: Record<string, unknown>) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const snapshot = yield* Effect.orDie(
      PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(declaration)))
    )
    yield* store.put(snapshot)
    yield* Effect.orDie(store.activate("p", "1", "ops", Time.fromMicros(0)))
    return yield* Governance.openBoundary({ policy_id: "p", version: "1", digest: snapshot.digest })
  })

const exec = (boundary: Governance.TaskBoundary, action: string, args: Record<string, unknown>, approval?: string) =>
  Effect.gen(function*() {
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
    return yield* (yield* Executor).execute(request, { context, boundary })
  })

/** Close the boundary; its gate_evaluated payloads and a freshly minted certificate. */
const closeAndMint = (boundary: Governance.TaskBoundary) =>
  Effect.gen(function*() {
    const closed = yield* Governance.closeBoundary(boundary)
    const records = Chunk.toReadonlyArray(yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id)))
    const gates = records.filter((record) => record.record_type === "gate_evaluated").map((record) =>
      JSON.parse(record.payload_json) as Record<string, unknown>
    )
    const certificate = yield* TaskCertificate.mint(boundary.chain_id, closed.head_hash)
    return { certificate, gates, types: records.map((record) => record.record_type) }
  })

const failedGates = (gates: ReadonlyArray<Record<string, unknown>>) =>
  gates.filter((gate) => gate.evaluator_error === true).map((gate) => [gate.gate_id, gate.level, gate.reason_code])

describe("evaluator failure", () => {
  it.effect("an interceptor that throws is a hard deny recorded as an evaluator error, counted apart from rule denials", () =>
    Effect.gen(function*() {
      const boundary = yield* install(policyWith([{ gate_id: "base", level: "hard" }]))
      const before = tools.counter.count("add")
      const outcome = yield* exec(boundary, "add", { a: 1, b: 2 })
      assert.deepStrictEqual(outcome._tag === "denied" && outcome.reason.code, "control.evaluator_error")
      assert.strictEqual(tools.counter.count("add"), before)
      const { certificate, gates } = yield* closeAndMint(boundary)
      assert.deepStrictEqual(failedGates(gates), [["thrower", "hard", "control.evaluator_error"]])
      assert.deepStrictEqual(
        [certificate.gate_summary.summary_version, certificate.gate_summary.evaluator_errors],
        [2, 1]
      )
      assert.strictEqual(certificate.gate_summary.hard_deny, 0)
      assert.isTrue((yield* TaskCertificate.verify(certificate)).valid)
    }).pipe(Effect.provide(layerWith({
      interceptors: [{
        id: "thrower",
        identity: unconfigured,
        stage: "policy",
        evaluate: () => {
          throw new Error("evaluator bug")
        }
      }]
    }))))

  it.effect("a certificate with a version 1 summary (evaluator errors counted as denies) still verifies; mixed forms do not", () =>
    Effect.gen(function*() {
      const boundary = yield* install(policyWith([{ gate_id: "base", level: "hard" }]))
      assert.strictEqual((yield* exec(boundary, "add", { a: 1, b: 2 }))._tag, "denied")
      assert.strictEqual((yield* exec(boundary, "noop", {}))._tag, "succeeded")
      const { certificate } = yield* closeAndMint(boundary)
      const { evaluator_errors, summary_version, ...counts } = certificate.gate_summary
      assert.deepStrictEqual([summary_version, evaluator_errors, counts.hard_deny, counts.hard_allow], [2, 1, 0, 3])
      const withSummary = (summary: ConstructorParameters<typeof TaskCertificate.GateSummary>[0]) =>
        TaskCertificate.verify(
          new TaskCertificate.TaskCertificate({
            ...certificate,
            gate_summary: new TaskCertificate.GateSummary(summary)
          })
        )
      const v1 = yield* withSummary({ ...counts, hard_deny: counts.hard_deny + 1 })
      assert.deepStrictEqual([v1.valid, v1.failure_code], [true, null])
      const unfolded = yield* withSummary(counts)
      assert.strictEqual(unfolded.failure_code, "summary_mismatch")
      const uncounted = yield* withSummary({ ...counts, summary_version: 2, evaluator_errors: 0, hard_deny: 1 })
      assert.strictEqual(uncounted.failure_code, "summary_mismatch")
    }).pipe(Effect.provide(layerWith({
      interceptors: [{
        id: "thrower",
        identity: unconfigured,
        stage: "policy",
        evaluate: (evaluation) =>
          evaluation.descriptor.name === "add" ? Effect.die(new Error("evaluator bug")) : Effect.succeed({
            disposition: "allow",
            code: "thrower.allowed"
          })
      }]
    }))))

  it.effect("a policy gate whose evaluation fails denies fail-closed by default, each applicable gate an evaluator error", () =>
    Effect.gen(function*() {
      const boundary = yield* install(policyWith([
        { gate_id: "base", level: "hard" },
        { gate_id: "review", level: "soft", on_error: "deny" }
      ]))
      const before = tools.counter.count("read_file")
      const outcome = yield* exec(boundary, "read_file", { path: "/work/a.txt" })
      assert.deepStrictEqual(outcome._tag === "denied" && [outcome.reason.code, outcome.stage], [
        "control.evaluator_error",
        "guard"
      ])
      assert.strictEqual(tools.counter.count("read_file"), before)
      assert.lengthOf(yield* (yield* ApprovalQueue).list({}), 0)
      const { certificate, gates } = yield* closeAndMint(boundary)
      assert.deepStrictEqual(failedGates(gates), [
        ["base", "hard", "control.evaluator_error"],
        ["review", "soft", "control.evaluator_error"]
      ])
      assert.deepStrictEqual(
        [
          certificate.gate_summary.evaluator_errors,
          certificate.gate_summary.hard_deny,
          certificate.gate_summary.soft_deny
        ],
        [2, 0, 0]
      )
    }).pipe(Effect.provide(layerWith())))

  it.effect("a gate on_error: escalate escalates its failed evaluation to the approver; the approval passes it as an exception", () =>
    Effect.gen(function*() {
      const boundary = yield* install(policyWith([{ gate_id: "base", level: "hard", on_error: "escalate" }]))
      const before = tools.counter.count("read_file")
      const outcome = yield* exec(boundary, "read_file", { path: "/work/a.txt" })
      assert.deepStrictEqual(
        outcome._tag === "escalated" && [outcome.reason.code, outcome.approval?.approver_class],
        ["control.evaluator_error", "lead"]
      )
      assert.strictEqual(tools.counter.count("read_file"), before)
      const approval = outcome._tag === "escalated" ? outcome.approval!.approval_id : ""
      yield* (yield* ApprovalQueue).approve(approval, { id: "maya", approver_class: "lead" })
      const approved = yield* exec(boundary, "read_file", { path: "/work/a.txt" }, approval)
      assert.strictEqual(approved._tag, "succeeded")
      assert.strictEqual(tools.counter.count("read_file"), before + 1)
      const { certificate, gates, types } = yield* closeAndMint(boundary)
      // The guard part and the policy part each fail, and the one approval passes each (once per attempt).
      assert.strictEqual(types.filter((type) => type === "exception_granted").length, 2)
      assert.deepStrictEqual(failedGates(gates).map(([gate]) => gate), ["base", "base", "base"])
      assert.strictEqual(certificate.process_grade, "DEGRADED")
      assert.deepStrictEqual([certificate.gate_summary.evaluator_errors, certificate.gate_summary.exceptions], [3, 2])
    }).pipe(Effect.provide(layerWith())))

  it.effect("on_error: escalate still denies when another applicable gate is on deny, or no approver is named", () =>
    Effect.gen(function*() {
      const mixed = yield* install(policyWith([
        { gate_id: "base", level: "hard", on_error: "escalate" },
        { gate_id: "strict", level: "hard" }
      ]))
      const denied = yield* exec(mixed, "read_file", { path: "/work/a.txt" })
      assert.deepStrictEqual(denied._tag === "denied" && denied.reason.code, "control.evaluator_error")
      yield* Governance.closeBoundary(mixed)
      const store = yield* PolicySnapshotStore
      const declaration = policyWith([{ gate_id: "base", level: "hard", on_error: "escalate" }], {
        version: "2",
        approver_class: undefined
      })
      const snapshot = yield* Effect.orDie(
        PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(declaration)))
      )
      yield* store.put(snapshot)
      yield* Effect.orDie(store.activate("p", "2", "ops", Time.fromMicros(0)))
      const unapproved = yield* Governance.openBoundary({ policy_id: "p", version: "2", digest: snapshot.digest })
      const refused = yield* exec(unapproved, "read_file", { path: "/work/a.txt" })
      assert.deepStrictEqual(refused._tag === "denied" && refused.reason.code, "control.evaluator_error")
      assert.lengthOf(yield* (yield* ApprovalQueue).list({}), 0)
    }).pipe(Effect.provide(layerWith())))

  it.effect("minimal: a policy gate on_error: escalate files an approval when its evaluation fails; the default denies", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const contextOf = (version: string, escalating: boolean) =>
        Effect.gen(function*() {
          const declaration = policyWith([{
            gate_id: "base",
            level: "hard",
            ...(escalating ? { on_error: "escalate" } : {})
          }], {
            version
          })
          const snapshot = yield* Effect.orDie(
            PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(declaration)))
          )
          yield* store.put(snapshot)
          yield* Effect.orDie(store.activate("p", version, "ops", Time.fromMicros(0)))
          return { policy_id: "p", version, digest: snapshot.digest }
        })
      const run = (policy: { policy_id: string; version: string; digest: PolicySnapshot.PolicySnapshot["digest"] }) =>
        Effect.gen(function*() {
          const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
          const context = yield* Ingress.bind({
            execution_scope: scope,
            authenticated_principal: { id: "alice" },
            effect_backend: InProcessBackend.make.ref,
            policy_snapshot: policy
          })
          const request = ExecutionRequest.make({
            request_id: yield* IdGenerator.uuid,
            action: { name: "read_file" },
            arguments: { path: "/work/a.txt" },
            execution_scope: scope
          })
          return yield* (yield* Executor).execute(request, { context })
        })
      const before = tools.counter.count("read_file")
      const denied = yield* run(yield* contextOf("1", false))
      assert.deepStrictEqual(denied._tag === "denied" && denied.reason.code, "control.evaluator_error")
      assert.lengthOf(yield* (yield* ApprovalQueue).list({}), 0)
      const escalated = yield* run(yield* contextOf("2", true))
      assert.deepStrictEqual(
        escalated._tag === "escalated" && [escalated.reason.code, escalated.approval?.approver_class],
        ["control.evaluator_error", "lead"]
      )
      assert.lengthOf(yield* (yield* ApprovalQueue).list({}), 1)
      assert.strictEqual(tools.counter.count("read_file"), before)
    }).pipe(Effect.provide(
      layerPolicyGated().pipe(
        Layer.provideMerge(
          Layer.mergeAll(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer, brokenPaths).pipe(
            Layer.provideMerge(base([...tools.actions, readFile]))
          )
        )
      )
    )))
})
