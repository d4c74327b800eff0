import { assert, describe, it } from "@effect/vitest"
import { Equal, Schema } from "effect"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import { trustedMake } from "../../core/base/internal/trusted.ts"
import { ActionRef } from "../../core/base/Refs.ts"
import { Timestamp } from "../../core/base/Time.ts"
import { EvidenceRecord } from "../../core/evidence/Evidence.ts"
import { AppendReceipt } from "../../core/evidence/EvidenceStore.ts"
import { OperationContext } from "../../core/evidence/Governance.ts"
import { ActionAdmissionDecision, DecisionReason } from "../../core/execution/AdmissionDecision.ts"
import {
  Cancelled,
  Deferred,
  Denied,
  Escalated,
  Failed,
  FailureSummary,
  Recheck,
  Succeeded,
  TimedOut
} from "../../core/execution/ExecutionOutcome.ts"
import { IntentDraft, OperationAttempt } from "../../core/state/StateStore.ts"

const hash = Sha256Hex.make("a".repeat(64))
const id = Uuid.make("11111111-1111-4111-8111-111111111111")
const at = Timestamp.make("2026-11-30T04:30:00.000000Z")
const reason = new DecisionReason({ code: "policy.denied", detail: "no" })
const common = {
  request_id: "request-1",
  attempt_id: id,
  action: ActionRef.make({ name: "add", version: "1" }),
  profile: "governed" as const,
  stage: "policy" as const,
  decisions: [],
  recheck: new Recheck({ ran: false, reason: "no_transformation", evaluators: [] })
}

// Every class the executor builds with trustedMake, with fields as it gives them.
const samples: ReadonlyArray<readonly [new(props: any, options?: any) => object, object]> = [
  [Succeeded, { ...common, result: { sum: 3 } }],
  [Denied, { ...common, reason }],
  [Deferred, { ...common, reason, retry_at: at }],
  [Escalated, { ...common, reason }],
  [Failed, { ...common, failure: new FailureSummary({ code: "callable.failed" }) }],
  [Cancelled, { ...common, call_executed: true }],
  [TimedOut, { ...common, call_executed: false }],
  [FailureSummary, { code: "output.invalid", message: "result: expected a number" }],
  [Recheck, { ran: true, reason: "arguments_changed", evaluators: ["policy.rules"], digest_before: hash }],
  [DecisionReason, { code: "policy.allowed" }],
  [ActionAdmissionDecision, {
    disposition: "allow",
    reason,
    evaluator: "policy.rules",
    stage: "policy",
    arguments_digest: hash,
    evidence: []
  }],
  [EvidenceRecord, {
    record_id: id,
    record_type: "gate_evaluated",
    chain_id: id,
    operation_id: null,
    sequence: 0,
    policy_id: "p",
    policy_version: "1",
    payload_json: "{}",
    payload_digest: hash,
    previous_chain_hash: null,
    chain_hash: hash,
    supersedes_record_id: null,
    created_at: at,
    hash_algorithm: "sha256-v1"
  }],
  [AppendReceipt, { chain_id: id, record_id: id, sequence: 0, head_hash: hash }],
  [OperationContext, {
    operation_id: id,
    task_boundary_id: id,
    chain_id: id,
    attempt_id: id,
    request_id: "request-1",
    request_digest: hash,
    actor: "alice",
    tenant: null,
    session_id: null,
    scope: { kind: "ephemeral_operation", run_id: null, owner_attempt_id: null },
    action: { name: "add", version: "1", digest: hash },
    policy: { policy_id: "p", version: "1", digest: hash },
    backend: { id: "in-process", version: "1", capability_digest: hash },
    arguments_digest: hash
  }],
  [OperationAttempt, {
    attempt_id: id,
    run_id: "run-1",
    request_id: "request-1",
    action_name: "add",
    action_version: null,
    arguments_digest: null,
    outcome: { _tag: "succeeded", stage: "outcome", call_executed: true },
    created_at: at
  }],
  [IntentDraft, { topic: "writ.outcome", payload_json: "{}" }]
]

/** The fields a class fills in by default when its constructor is not given them. */
const defaulted = (Class: object) =>
  Object.entries((Class as { readonly fields: Record<string, unknown> }).fields).flatMap(([name, field]) => {
    if (!Schema.isPropertySignature(field)) return []
    const ast = field.ast as {
      readonly _tag: string
      readonly defaultValue?: unknown
      readonly to?: { defaultValue?: unknown }
    }
    const value = ast._tag === "PropertySignatureDeclaration" ? ast.defaultValue : ast.to?.defaultValue
    return value === undefined ? [] : [name]
  })

describe("trustedMake", () => {
  it("builds what Schema's unvalidated constructor builds: prototype, own fields and their order, equality", () => {
    for (const [Class, fields] of samples) {
      const made = trustedMake(Class, fields)
      const constructed = new Class(fields, { disableValidation: true })
      assert.strictEqual(Object.getPrototypeOf(made), Class.prototype, Class.name)
      assert.deepStrictEqual(Object.keys(made), Object.keys(constructed), Class.name)
      assert.deepStrictEqual({ ...made }, { ...constructed }, Class.name)
      assert.isTrue(Equal.equals(made, constructed), Class.name)
      assert.isTrue(Schema.is(Class as unknown as Schema.Schema<object>)(made), Class.name)
    }
  })

  it("is used only with classes whose defaults its callers supply (a new default would be silently skipped)", () => {
    const defaults = samples.flatMap(([Class]) => defaulted(Class).map((field) => `${Class.name}.${field}`))
    // `_tag` is set by trustedMake; the executor gives every decision its `evidence`.
    assert.deepStrictEqual(
      defaults.filter((name) => !name.endsWith("._tag")),
      ["ActionAdmissionDecision.evidence"]
    )
  })
})
