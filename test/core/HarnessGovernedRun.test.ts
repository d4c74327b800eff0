/**
 * A governed harness run is one governed operation: `policy_bound`, `operation_started` with the plan's and the
 * report's digests, one `gate_evaluated` per callback decision (committed before the answer, decided by the policy
 * evaluation alone), one terminal, and the chain verifies and certifies. Observations never enter it: not as records,
 * not as gate results, not in the certificate's counts, and they cannot make a decision or be appended as evidence.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import type { GateOutcome } from "../../core/execution/Interceptor.ts"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as GovernedRun from "../../core/harness/GovernedRun.ts"
import type { CallbackDecision } from "../../core/harness/HarnessAdapter.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as Observation from "../../core/harness/ProviderObservation.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { claudePlanAndReport } from "../fixtures/harnessPlan.ts"

const layer = Governance.layerWriter.pipe(
  Layer.provideMerge(Layer.mergeAll(MemoryEvidenceStore.layer, MemoryPolicySnapshotStore.layer)),
  Layer.provideMerge(Layer.mergeAll(WebCryptoDigest.layer, IdGenerator.layerSeeded(22)))
)

const { plan, report } = claudePlanAndReport({
  digest: "b",
  plan: { declared_controls: ["callback.pre_tool@1"] },
  report: {
    requested: ["callback.pre_tool@1"],
    claims: [{
      control: "callback.pre_tool@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "PreToolUse hook"
    }]
  }
})

const observations: ReadonlyArray<Observation.ProviderObservation> = [
  new Observation.ToolUse({ plane: "observation", call_id: "t1", tool: "Bash", input: "{\"command\":\"rm -rf /\"}" }),
  new Observation.Denial({ plane: "observation", call_id: "t1", tool: "Bash", detail: "writ: policy.no_match" }),
  new Observation.ToolUse({ plane: "observation", call_id: "t2", tool: "Bash", input: "{\"command\":\"touch a\"}" }),
  new Observation.ToolResult({ plane: "observation", call_id: "t2", is_error: false, content: "" }),
  new Observation.Usage({ plane: "observation", input_tokens: 10, output_tokens: 5, turns: 3 }),
  new Observation.Exit({ plane: "observation", code: 0, signal: null, killed_by_harness: false })
]

/** The snapshot, stored and active, and a boundary opened under it. */
const setup = Effect.gen(function*() {
  const declared = Either.getOrThrow(PermissionPolicy.decode({
    policy_id: "cli-harness",
    version: "1",
    allow: { "shell.exec": ["touch *"] }
  }))
  const snapshot = yield* Effect.orDie(PolicySnapshot.compile(declared))
  const store = yield* PolicySnapshotStore
  yield* Effect.orDie(store.put(snapshot))
  const active = yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "test", yield* Time.now))
  const boundary = yield* Governance.openBoundary(active)
  const plan_digest = yield* Effect.orDie(HarnessPlan.digest(plan))
  const report_digest = yield* Effect.orDie(Digest.canonical(Schema.encodeSync(Report.CapabilityReport)(report)))
  return { snapshot: active, boundary, plan_digest, report_digest }
})

const readChain = (chain_id: string) =>
  Effect.flatMap(EvidenceStore, (store) => Effect.map(Stream.runCollect(store.read(chain_id)), Chunk.toReadonlyArray))

const payloadOf = (record: Evidence.StoredRecord) => JSON.parse(record.payload_json)

const call = (call_id: string, command: string) => ({ tool: "Bash", input: { command }, call_id })

describe("GovernedRun", () => {
  it.effect("one operation: started with both digests, a gate record per decision in order, one terminal; it verifies and certifies", () =>
    Effect.gen(function*() {
      const { boundary, plan_digest, report_digest, snapshot } = yield* setup
      const run = yield* GovernedRun.start({
        boundary,
        snapshot,
        plan,
        plan_digest,
        report,
        report_digest,
        prompt: "go",
        principal: "harness"
      })
      const denied = yield* run.decide(call("t1", "rm -rf /"))
      const allowed = yield* run.decide(call("t2", "touch a"))
      const wrapped = yield* run.decide(call("t3", "bash -c \"touch b\""))
      assert.strictEqual(denied.decision, "deny")
      assert.deepStrictEqual(allowed, { decision: "allow" })
      assert.include(wrapped.decision === "deny" ? wrapped.reason : "", "shell.")
      yield* run.end({ _tag: "exited", code: 0, signal: null, killed: false })
      const certified = yield* Ingress.closeAndCertify(boundary, true)
      assert.isTrue(certified.verification.valid)

      const records = yield* readChain(boundary.chain_id)
      assert.deepStrictEqual(records.map((r) => r.record_type), [
        "policy_bound",
        "operation_started",
        "gate_evaluated",
        "gate_evaluated",
        "gate_evaluated",
        "callable_completed",
        "task_closed"
      ])
      const started = payloadOf(records[1]!)
      assert.strictEqual(started.harness.plan_digest, plan_digest)
      assert.strictEqual(started.harness.report_digest, report_digest)
      assert.strictEqual(started.backend.capability_digest, report_digest)
      const gates = records.filter((r) => r.record_type === "gate_evaluated").map(payloadOf)
      assert.deepStrictEqual(gates.map((g) => [g.tool_call.call_id, g.decision, g.stage, g.reason_code]), [
        ["t1", "deny", "policy", "policy.no_match"],
        ["t2", "allow", "policy", "policy.allowed"],
        ["t3", "deny", "guard", "shell.unsafe_syntax"]
      ])
      assert.isTrue(records.every((r) => r.operation_id === null || r.operation_id === run.operation.operation_id))

      // The certificate counts the callback's decisions and nothing else.
      assert.isTrue(certified.certificate?.minted === true && certified.certificate.checked.valid)
      if (certified.certificate?.minted !== true) return
      const summary = certified.certificate.certificate.gate_summary
      assert.deepStrictEqual([summary.hard_allow, summary.hard_deny, summary.soft_deny, summary.advisory_deny], [
        1,
        2,
        0,
        0
      ])
    }).pipe(Effect.provide(layer)))

  it.effect("a second end is refused, and a decision after the end denies and records nothing", () =>
    Effect.gen(function*() {
      const { boundary, plan_digest, report_digest, snapshot } = yield* setup
      const run = yield* GovernedRun.start({
        boundary,
        snapshot,
        plan,
        plan_digest,
        report,
        report_digest,
        prompt: "go",
        principal: "harness"
      })
      yield* run.end({ _tag: "exited", code: 3, signal: null, killed: false })
      const again = yield* Effect.flip(run.end({ _tag: "exited", code: 0, signal: null, killed: false }))
      assert.strictEqual(again._tag, "GovernanceEvidenceError")
      const late = yield* run.decide(call("t9", "touch z"))
      assert.deepStrictEqual(late, { decision: "deny", reason: "the run has ended" })
      const records = yield* readChain(boundary.chain_id)
      assert.deepStrictEqual(records.map((r) => r.record_type), [
        "policy_bound",
        "operation_started",
        "callable_failed"
      ])
      assert.strictEqual(payloadOf(records[2]!).failure_code, "harness.exit_3")
    }).pipe(Effect.provide(layer)))

  it.effect("a boundary under another snapshot is refused before any record", () =>
    Effect.gen(function*() {
      const { boundary, plan_digest, report_digest } = yield* setup
      const other = yield* Effect.orDie(PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode({
        policy_id: "cli-harness",
        version: "2",
        mode: "allow_all"
      }))))
      const refused = yield* Effect.flip(GovernedRun.start({
        boundary,
        snapshot: other,
        plan,
        plan_digest,
        report,
        report_digest,
        prompt: "go",
        principal: "harness"
      }))
      assert.strictEqual(refused._tag, "GovernedRunError")
      assert.deepStrictEqual(yield* readChain(boundary.chain_id), [])
    }).pipe(Effect.provide(layer)))
})

describe("ProviderObservation is never authorization, a gate result, evidence or a certificate count", () => {
  it("has no type, and no wire form, that any of them accepts", () => {
    for (const observation of observations) {
      // @ts-expect-error an observation is not a callback decision: the hook allows only writ's `{decision: "allow"}`
      const asDecision: CallbackDecision = observation
      // @ts-expect-error an observation is not a gate result
      const asGate: GateOutcome = observation
      // @ts-expect-error an observation is not an evidence record
      const asRecord: Evidence.EvidenceRecord = observation
      assert.notStrictEqual((asDecision as { decision?: unknown }).decision, "allow")
      assert.isUndefined((asGate as { gate_id?: unknown }).gate_id)
      const encoded = Schema.encodeSync(Observation.ProviderObservation)(observation)
      assert.isFalse(Evidence.isEvidenceRecord(asRecord))
      assert.isFalse(Evidence.isEvidenceRecord(encoded))
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(TaskCertificate.GateSummary)(encoded)))
      assert.strictEqual(encoded.plane, "observation")
    }
  })

  it.effect("the evidence writer refuses one as an operation record, and a certificate counts none", () =>
    Effect.gen(function*() {
      const { boundary } = yield* setup
      const writer = yield* Governance.EvidenceWriter
      for (const observation of observations) {
        const encoded = Schema.encodeSync(Observation.ProviderObservation)(observation)
        // As a gate result, through the public writer: an operation record without the capability.
        const refused = yield* Effect.flip(writer.append(boundary.chain_id, {
          record_type: "gate_evaluated",
          operation_id: null,
          policy_id: boundary.policy.policy_id,
          policy_version: boundary.policy.version,
          payload: { ...encoded }
        }))
        assert.strictEqual(refused._tag, "EvidenceForbiddenError")
      }
      const certified = yield* Ingress.closeAndCertify(boundary, true)
      assert.isTrue(certified.certificate?.minted === true)
      if (certified.certificate?.minted !== true) return
      const summary = certified.certificate.certificate.gate_summary
      const counted = [summary.hard_allow, summary.hard_deny, summary.soft_allow, summary.soft_deny]
        .concat([summary.advisory_allow, summary.advisory_deny, summary.exceptions])
      assert.deepStrictEqual(counted, [0, 0, 0, 0, 0, 0, 0])
      assert.deepStrictEqual((yield* readChain(boundary.chain_id)).map((r) => r.record_type), ["task_closed"])
    }).pipe(Effect.provide(layer)))
})
