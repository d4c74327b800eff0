import * as Time from "../../base/Time.ts"
import { checkOrigin, intersectRestrictions } from "../Origin.ts"
import {
  type CompiledGate,
  decision,
  type Part,
  type PolicyDecision,
  type PolicyInput,
  type RuleOf
} from "./evaluation.ts"
import { guard, operationMatches, salient } from "./guards.ts"

const inWindow = (rule: RuleOf<"expiry">, now: number) =>
  (rule.not_before === undefined || now >= Time.toMicros(rule.not_before)) &&
  (rule.expires_at === undefined || now < Time.toMicros(rule.expires_at))

/** Whatever the gates: a principal or tenant outside the snapshot's scope (every gate carries the same scope). */
export const scopeRefusal = (gate: CompiledGate, input: PolicyInput): PolicyDecision | undefined => {
  if (!gate.scope.principals.some((p) => p.test(input.principal))) {
    return decision("deny", "policy.out_of_scope", [], "the principal is outside the policy's scope")
  }
  if (input.tenant !== undefined && !gate.scope.tenants.some((t) => t.test(input.tenant!))) {
    return decision("deny", "policy.out_of_scope", [], "the tenant is outside the policy's scope")
  }
  return undefined
}

/** Whatever the rules: an established invocation must belong to the current principal and be within its authority scope. */
export const invocationRefusal = (input: PolicyInput): PolicyDecision | undefined => {
  const invocation = input.invocation
  if (invocation === undefined || invocation._tag !== "established") return undefined
  const origin = checkOrigin(invocation, {
    restriction: ["USER", "SELF", "OTHER_AGENT"],
    boundAgent: invocation.executing_agent,
    principal: { id: input.principal },
    now: Time.fromMicros(input.now),
    action_type: input.action
  })
  return origin._tag === "origin_denied" ? decision("deny", origin.code, [], origin.detail) : undefined
}

const policy = (gate: CompiledGate, input: PolicyInput): PolicyDecision => {
  // Origin rules are authorization: they refuse before anything a soft gate could escalate (expiry, rules).
  const view = gate.view(input.action)
  const restriction = view.origins.length > 0
    ? intersectRestrictions(...view.origins.map((rule) => rule.callers))
    : undefined
  if (restriction !== undefined) {
    const origin = checkOrigin(input.invocation, {
      restriction,
      boundAgent: input.bound_agent,
      principal: { id: input.principal },
      now: Time.fromMicros(input.now),
      action_type: input.action
    })
    if (origin._tag === "origin_denied") {
      return Object.assign({}, decision("deny", origin.code, view.origins, origin.detail), { origin: true })
    }
  }
  for (const rule of gate.expiry) {
    const inside = inWindow(rule, input.now)
    if (rule.effect === "allow" ? !inside : inside) return decision("deny", "policy.expired", [rule])
  }
  const outOfScope = scopeRefusal(gate, input)
  if (outOfScope !== undefined) return outOfScope
  const target = salient(input)
  const denied = [view, ...(input.aliases ?? []).map(gate.view)].flatMap((v) => v.deny)
    .find((m) => operationMatches(m.operations, target))
  if (denied !== undefined) return decision("deny", "policy.denied", [denied.rule])
  const specificAllow = view.allow.find((m) => m.specific && operationMatches(m.operations, target))
  if (specificAllow !== undefined) return decision("allow", "policy.allowed", [specificAllow.rule])
  const escalation = view.escalate.find((m) => operationMatches(m.operations, target))
  const allowed = view.allow.find((m) => operationMatches(m.operations, target))
  if (escalation !== undefined && (allowed === undefined || escalation.specific)) {
    const rule = escalation.rule
    if (rule.approver_class === null) {
      return decision("deny", "approval.no_authority", [rule], "approval is required but no approver is configured")
    }
    return Object.assign({}, decision("escalate", "approval.required", [rule]), {
      approver_class: rule.approver_class,
      approval_expires_after_microseconds: rule.expires_after_microseconds
    })
  }
  if (allowed !== undefined) return decision("allow", "policy.allowed", [allowed.rule])
  return decision("deny", "policy.no_match", [], "no rule allows this action (default deny)")
}

/** Evaluate one part of one compiled gate. */
export const evaluate = (gate: CompiledGate, part: Part, input: PolicyInput): PolicyDecision =>
  part === "guard" ? guard(gate, input) : policy(gate, input)
