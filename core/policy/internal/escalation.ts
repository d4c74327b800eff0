import { Effect, Either, Option } from "effect"
import * as Approval from "../../approval/Approval.ts"
import { Digest } from "../../base/Digest.ts"
import type { IdGenerator } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import type { Evaluation, Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import type { PolicyInput } from "../PolicyEvaluator.ts"
import type { PolicySnapshot } from "../PolicySnapshot.ts"
import type { Pinned, Reduced } from "./reduce.ts"

const withDetail = (detail: string | undefined) => detail === undefined ? {} : { detail }

const policyOf = (snapshot: PolicySnapshot) => ({
  policy_id: snapshot.policy_id,
  version: snapshot.version,
  digest: snapshot.digest
})

/** What an approval for this call is bound to, as a digest. */
const bindingOf = (digest: Digest.Service, pinned: Pinned, evaluation: Evaluation, input: PolicyInput) =>
  Approval.bindingDigest({
    action: input.action,
    action_digest: evaluation.descriptor.digest,
    arguments_digest: evaluation.arguments_digest,
    principal: input.principal,
    tenant: input.tenant ?? null,
    origin: input.invocation === undefined || input.invocation._tag === "unknown"
      ? null
      : {
        executing_agent: input.invocation.executing_agent.id,
        human: input.invocation.human?.id ?? null,
        calling_agent: input.invocation.calling_agent?.id ?? null,
        origins: input.invocation.origins
      },
    policy: policyOf(pinned.snapshot)
  }).pipe(Effect.provideService(Digest, digest), Effect.orDie)

// A required approval, presented, satisfies its gates; a soft deny stays a deny, passed by a recorded exception.
const granted = (result: Reduced, approval_id: string, used: Approval.ApprovalRequest): Verdict => {
  const gates = (result.gates ?? []).map((gate) =>
    gate.decision === "deny" && result.approval_gates?.includes(gate.gate_id) === true
      ? Object.assign({}, gate, { decision: "allow" as const, reason_code: "approval.granted" })
      : gate
  )
  const allowed = Interceptor.withGates(
    Interceptor.allow("approval.granted", `approval ${approval_id} by ${used.approver_class}`),
    gates
  )
  return result.soft_deny === true
    ? Object.assign({}, allowed, {
      exception: { approval_id, approver_class: used.approver_class, reason_code: result.code }
    })
    : allowed
}

/** Escalation without blocking: use a presented approval (once per attempt), or file a new request and return at once. */
export const makeEscalation = (
  queue: Option.Option<Approval.ApprovalQueue.Service>,
  digest: Digest.Service,
  ids: IdGenerator.Service
): (pinned: Pinned, evaluation: Evaluation, input: PolicyInput, result: Reduced) => Effect.Effect<Verdict> =>
  Effect.fnUntraced(function*(
    pinned: Pinned,
    evaluation: Evaluation,
    input: PolicyInput,
    result: Reduced
  ) {
    if (Option.isNone(queue)) {
      return Interceptor.withGates(
        Interceptor.deny("approval.no_authority", "approval is required but no approval queue is configured"),
        result.gates ?? []
      )
    }
    const binding = yield* bindingOf(digest, pinned, evaluation, input)
    const presented = evaluation.request.approval_id
    if (presented !== undefined) {
      const { attempt_id, request } = evaluation
      const now = Time.fromMicros(input.now)
      const used = yield* Effect.either(queue.value.consume(presented, binding, now, request.request_id, attempt_id))
      if (Either.isLeft(used)) {
        return Interceptor.withGates(
          Interceptor.deny(`approval.${used.left.reason}`, used.left.message),
          result.gates ?? []
        )
      }
      return granted(result, presented, used.right)
    }
    const filed = Approval.ApprovalRequest.make({
      approval_id: yield* ids.uuid,
      binding_digest: binding,
      action: input.action,
      principal: input.principal,
      approver_class: result.approver_class!,
      policy: policyOf(pinned.snapshot),
      requested_at: Time.fromMicros(input.now),
      expires_at: Time.fromMicros(input.now + result.expires_after!),
      request_id: evaluation.request.request_id
    })
    yield* queue.value.submit(filed)
    return Object.assign({}, Interceptor.escalate(result.code, withDetail(result.detail)), {
      approval: filed,
      gates: result.gates ?? []
    })
  })
