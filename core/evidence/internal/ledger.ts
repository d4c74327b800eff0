import { Either, Schema } from "effect"
import type { JsonValue } from "../../base/Canonical.ts"
import { Sha256Hex } from "../../base/Digest.ts"
import type { Timestamp } from "../../base/Time.ts"
import type { ContainmentWaiver, ExecutionOutcome, PolicyInputs, Recheck } from "../../execution/ExecutionOutcome.ts"
import type { GateOutcome, GrantedException } from "../../execution/Interceptor.ts"
import type { Stage } from "../../execution/Stage.ts"
import type { InterceptorBinding } from "../../policy/PolicyRule.ts"
import type { PolicySnapshot } from "../../policy/PolicySnapshot.ts"
import { OutcomeSummary } from "../../state/StateStore.ts"
import type { Draft, RecordType, StoredRecord } from "../Evidence.ts"
import type { OperationContext } from "../Governance.ts"

type Payload = { readonly [key: string]: JsonValue }

const draft = (operation: OperationContext, record_type: RecordType, payload: Payload): Draft => ({
  record_type,
  operation_id: operation.operation_id,
  policy_id: operation.policy.policy_id,
  policy_version: operation.policy.version,
  payload
})

/** `policy_bound`: the exact snapshot this operation is pinned to. */
export const policyBound = (operation: OperationContext, snapshot: PolicySnapshot): Draft =>
  draft(operation, "policy_bound", {
    task_boundary_id: operation.task_boundary_id,
    policy_digest: snapshot.digest,
    release_state: snapshot.release_state,
    rule_count: snapshot.compiled_rules.length,
    gate_count: snapshot.gate_bindings.length
  })

/**
 * `operation_started`: the frozen operation context, with the count of argument keys and the names of those its input
 * schema declares, never their values (keys a schema does not declare, a record's, are values too); and, when it was
 * admitted without some required containment, which (`containment`: degraded, or on a remote claim).
 */
export const operationStarted = (
  operation: OperationContext,
  declared: ReadonlySet<string>,
  args: { readonly [key: string]: unknown },
  containment?: ContainmentWaiver
): Draft =>
  draft(operation, "operation_started", {
    task_boundary_id: operation.task_boundary_id,
    attempt_id: operation.attempt_id,
    request_id: operation.request_id,
    request_digest: operation.request_digest,
    actor: operation.actor,
    tenant: operation.tenant,
    session_id: operation.session_id,
    scope: { ...operation.scope },
    action: { ...operation.action },
    policy_digest: operation.policy.digest,
    backend: { ...operation.backend },
    preflight: Object.assign({}, operation.preflight, {
      admission_leases: operation.preflight.admission_leases.map((lease) => ({ ...lease }))
    }),
    arguments_digest: operation.arguments_digest,
    argument_fields: Object.keys(args).filter((key) => declared.has(key)).sort(),
    argument_count: Object.keys(args).length,
    ...(containment === undefined ? {} : { containment: waiverPayload(containment) })
  })

// The fields of `fields` that are defined, in a literal-born object (a spread-born one is slow to extend on Node 20).
const defined = (fields: { readonly [key: string]: JsonValue | undefined }): Payload => {
  const payload: { [key: string]: JsonValue } = {}
  for (const key in fields) {
    const value = fields[key]
    if (value !== undefined) payload[key] = value
  }
  return payload
}

const waiverPayload = (containment: ContainmentWaiver): Payload =>
  defined({
    degraded: containment.degraded && [...containment.degraded],
    remote_claims: containment.remote_claims && [...containment.remote_claims]
  })

const inputsPayload = (inputs: PolicyInputs): Payload =>
  defined({
    snapshot: inputs.snapshot,
    resolved_path: inputs.resolved_path,
    approval_state: inputs.approval_state,
    time_or_budget: inputs.time_or_budget
  })

/** Stage 10's decision as a gate record states it: whether it ran, why, the digests and every input it compared. */
const recheckPayload = (recheck: Recheck): Payload => ({
  ran: recheck.ran,
  reason: recheck.reason,
  evaluators: [...recheck.evaluators],
  ...(recheck.digest_before === undefined ? {} : { digest_before: recheck.digest_before }),
  ...(recheck.digest_after === undefined ? {} : { digest_after: recheck.digest_after }),
  ...(recheck.compared === undefined ? {} : {
    compared: recheck.compared.map(({ current, decided, evaluator }) => ({
      evaluator,
      decided: inputsPayload(decided),
      ...(current === undefined ? {} : { current: inputsPayload(current) })
    }))
  })
})

/**
 * `gate_evaluated`: one gate's result, bound to the argument digest it evaluated; once stage 10 has decided, with its
 * recheck decision and the inputs it compared (records from before stage 10 existed carry none).
 */
export const gateEvaluated = (
  operation: OperationContext,
  gate: GateOutcome,
  result: {
    readonly result_id: string
    readonly evaluator: string
    readonly identity?: InterceptorBinding | undefined
    readonly stage: Stage
    readonly arguments_digest: Sha256Hex
    readonly evaluated_at: Timestamp
    readonly recheck?: Recheck | undefined
  }
): Draft =>
  draft(operation, "gate_evaluated", {
    result_id: result.result_id,
    ...(result.recheck === undefined ? {} : { recheck: recheckPayload(result.recheck) }),
    gate_id: gate.gate_id,
    level: gate.level,
    decision: gate.decision,
    reason_code: gate.reason_code,
    matched_rules: [...gate.matched_rules],
    ...(gate.evaluator_error === true ? { evaluator_error: true } : {}),
    evaluator: result.evaluator,
    ...(result.identity === undefined ? {} : { evaluator_identity: { ...result.identity } }),
    stage: result.stage,
    operation_id: operation.operation_id,
    policy_version: operation.policy.version,
    arguments_digest: result.arguments_digest,
    evaluated_at: result.evaluated_at
  })

/**
 * `exception_granted`: an attributable approval let a soft deny pass; the certificate is degraded for good. It names
 * the evaluator whose verdict carried it, by the identity its snapshot bound when it is a configured one.
 */
export const exceptionGranted = (
  operation: OperationContext,
  exception: GrantedException,
  evaluator: { readonly id: string; readonly identity?: InterceptorBinding | undefined }
): Draft =>
  draft(operation, "exception_granted", {
    approval_id: exception.approval_id,
    approver_class: exception.approver_class,
    reason_code: exception.reason_code,
    evaluator: evaluator.id,
    ...(evaluator.identity === undefined ? {} : { evaluator_identity: { ...evaluator.identity } })
  })

/** The terminal record type an outcome closes its operation with. */
export const terminalType = (outcome: ExecutionOutcome): RecordType => {
  switch (outcome._tag) {
    case "succeeded":
      return "callable_completed"
    case "failed":
      return "callable_failed"
    case "cancelled":
      return "operation_cancelled"
    case "timed_out":
      return "operation_timed_out"
    case "ambiguous":
      return "external_result_ambiguous"
    case "denied":
    case "deferred":
    case "escalated":
      return "operation_denied"
  }
}

/**
 * The terminal record for an outcome: codes, digests and flags only, with the digest of the arguments the attempt
 * last had (a transformation may have changed them since `operation_started`).
 */
export const terminal = (
  operation: OperationContext,
  outcome: ExecutionOutcome,
  result_digest: Sha256Hex | null,
  arguments_digest: Sha256Hex
): Draft => {
  const base = { stage: outcome.stage, attempt_id: outcome.attempt_id, arguments_digest }
  switch (outcome._tag) {
    case "succeeded":
      return draft(
        operation,
        "callable_completed",
        Object.assign({}, base, { result_digest, replay_of: outcome.replay_of ?? null })
      )
    case "failed":
      return draft(operation, "callable_failed", Object.assign({}, base, { failure_code: outcome.failure.code }))
    case "cancelled":
    case "timed_out":
      return draft(
        operation,
        terminalType(outcome),
        Object.assign({}, base, { call_executed: outcome.call_executed, teardown: outcome.teardown ?? null })
      )
    case "ambiguous":
      return draft(
        operation,
        "external_result_ambiguous",
        Object.assign({}, base, { reason_code: outcome.reason.code })
      )
    case "denied":
    case "deferred":
    case "escalated":
      return draft(
        operation,
        "operation_denied",
        Object.assign({}, base, {
          disposition: outcome._tag === "denied" ? "deny" : outcome._tag === "deferred" ? "defer" : "escalate",
          reason_code: outcome.reason.code,
          approval_id: outcome._tag === "escalated" ? outcome.approval?.approval_id ?? null : null
        })
      )
  }
}

const terminalPayload = Schema.decodeUnknownEither(Schema.parseJson(Schema.Struct({
  result_digest: Schema.optional(Schema.NullOr(Sha256Hex)),
  replay_of: Schema.optional(Schema.NullOr(Schema.String)),
  failure_code: Schema.optional(Schema.String),
  reason_code: Schema.optional(Schema.String),
  disposition: Schema.optional(Schema.Literal("deny", "defer", "escalate")),
  call_executed: Schema.optional(Schema.NullOr(Schema.Boolean))
})))

const summary = (
  tag: OutcomeSummary["tag"],
  reason_code: string | undefined,
  call_executed: boolean | null | undefined,
  result_digest: Sha256Hex | null = null
) =>
  reason_code === undefined || typeof call_executed !== "boolean"
    ? undefined
    : OutcomeSummary.make({ tag, reason_code, call_executed, result_digest })

/**
 * The outcome summary a terminal record states, as `summarize` gives it for the outcome `terminal` recorded (a
 * recovery's ambiguous close may have run the call); undefined when its payload does not say.
 */
export const summaryOf = (record: Pick<StoredRecord, "record_type" | "payload_json">): OutcomeSummary | undefined => {
  const decoded = terminalPayload(record.payload_json)
  if (Either.isLeft(decoded)) return undefined
  const p = decoded.right
  switch (record.record_type) {
    case "callable_completed": {
      const replayed = p.replay_of !== undefined && p.replay_of !== null
      return summary("succeeded", replayed ? "idempotency.replayed" : "ok", !replayed, p.result_digest ?? null)
    }
    case "callable_failed":
      return summary("failed", p.failure_code, true)
    case "operation_denied": {
      const tag = p.disposition === "defer" ? "deferred" : p.disposition === "escalate" ? "escalated" : "denied"
      return p.disposition === undefined ? undefined : summary(tag, p.reason_code, false)
    }
    case "operation_cancelled":
      return summary("cancelled", "execution.cancelled", p.call_executed)
    case "operation_timed_out":
      return summary("timed_out", "execution.deadline_exceeded", p.call_executed)
    case "external_result_ambiguous":
      return summary("ambiguous", p.reason_code, true)
    default:
      return undefined
  }
}
