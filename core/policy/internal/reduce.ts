import type { Allowed, GateOutcome, Referred, Refused } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import { defaultApprovalLifetime } from "../PermissionPolicy.ts"
import type { CompiledGate, Part, PolicyDecision, PolicyInput } from "../PolicyEvaluator.ts"
import * as PolicyEvaluator from "../PolicyEvaluator.ts"
import type { PolicySnapshot } from "../PolicySnapshot.ts"

/** A snapshot compiled for evaluation, with the approver its soft gates escalate to. */
export interface Pinned {
  readonly snapshot: PolicySnapshot
  readonly gates: ReadonlyArray<CompiledGate>
  readonly approver: string | undefined
  /** Whether a gate's guard deny can let the call go on to the policy stage: an advisory one, or a soft one an approval resolves. */
  readonly guardsPass: boolean
}

/** A reduced verdict (the policy never defers); an escalation names the approver class, how long its approval may live, and whether it resolves a soft deny. */
export type Reduced = (Allowed | Refused | Referred) & {
  readonly approver_class?: string
  readonly expires_after?: number
  readonly soft_deny?: boolean
  /** The gates whose own rules required the approval; a presented approval satisfies them. */
  readonly approval_gates?: ReadonlyArray<string>
}

// The approver class the snapshot's soft gates escalate to: its first approval rule's.
const approverOf = (snapshot: PolicySnapshot) =>
  snapshot.compiled_rules.flatMap((rule) =>
    rule.kind === "approval" && rule.approver_class !== null ? [rule.approver_class] : []
  )[0]

/** Compile a snapshot for evaluation. */
export const pinned = (snapshot: PolicySnapshot): Pinned => {
  const approver = approverOf(snapshot)
  return {
    snapshot,
    gates: PolicyEvaluator.compile(snapshot),
    approver,
    guardsPass: snapshot.gate_bindings.some((gate) =>
      gate.level === "advisory" || (gate.level === "soft" && approver !== undefined)
    )
  }
}

const describe = (gate: CompiledGate, decision: PolicyDecision) =>
  [
    `gate ${gate.gate.gate_id} (${gate.gate.level})`,
    decision.matched_rules.length > 0 ? `rules ${decision.matched_rules.join(",")}` : undefined,
    decision.detail
  ]
    .filter((part) => part !== undefined)
    .join("; ")

/** A hard deny recorded under one of writ's own gates. */
export const refusal = (gate_id: string, code: string): GateOutcome => ({
  gate_id,
  level: "hard",
  decision: "deny",
  reason_code: code,
  matched_rules: []
})

// Writ's own refusals before any gate: the intrinsic guards, or the scope and invocation checks.
const intrinsic = (pinned: Pinned, part: Part, input: PolicyInput): Reduced | undefined => {
  const refused = part === "guard"
    ? PolicyEvaluator.intrinsicRefusal(input)
    : PolicyEvaluator.scopeRefusal(pinned.gates[0]!, input) ?? PolicyEvaluator.invocationRefusal(input)
  if (refused === undefined) return undefined
  const gate_id = part === "guard" ? "writ.intrinsic" : "writ.scope"
  return Interceptor.withGates(Interceptor.deny(refused.code, refused.detail), [refusal(gate_id, refused.code)])
}

/** Reduce gate results in gate order: hard deny denies; soft deny escalates when an approver is named; advisory deny is recorded. */
export const reduce = (pinned: Pinned, part: Part, input: PolicyInput): Reduced => {
  const refused = intrinsic(pinned, part, input)
  if (refused !== undefined) return refused
  const advisories: Array<string> = []
  const gates: Array<GateOutcome> = []
  const approvalGates: Array<string> = []
  let softDenied = false
  let escalation: Reduced | undefined
  const applicable = pinned.gates.filter((gate) => gate.tools.some((tool) => tool.test(input.action)))
  if (applicable.length === 0) {
    return Interceptor.withGates(
      Interceptor.deny("policy.no_gate_binding", `no gate binds ${input.action}`),
      [refusal("writ.binding", "policy.no_gate_binding")]
    )
  }
  for (const gate of applicable) {
    const decision = PolicyEvaluator.evaluate(gate, part, input)
    gates.push({
      gate_id: gate.gate.gate_id,
      level: gate.gate.level,
      decision: decision.disposition === "allow" ? "allow" : "deny",
      reason_code: decision.code,
      matched_rules: decision.matched_rules
    })
    if (decision.disposition === "allow") continue
    if (decision.disposition === "escalate") approvalGates.push(gate.gate.gate_id)
    const why = describe(gate, decision)
    // An origin refusal is authorization: it denies whatever the gate's level, before any escalation is considered.
    if (decision.origin === true) return Interceptor.withGates(Interceptor.deny(decision.code, why), gates)
    if (gate.gate.level === "advisory") {
      advisories.push(`${decision.code} (${why})`)
      continue
    }
    // Hard gates deny outright (as do writ's intrinsic guards, above); a hard deny in any gate outranks an escalation
    // from another.
    if (decision.disposition === "deny" && !(gate.gate.level === "soft" && pinned.approver !== undefined)) {
      return Interceptor.withGates(Interceptor.deny(decision.code, why), gates)
    }
    if (decision.disposition === "deny") softDenied = true
    escalation ??= decision.disposition === "escalate"
      ? Object.assign({}, Interceptor.escalate(decision.code, { detail: why }), {
        approver_class: decision.approver_class!,
        expires_after: decision.approval_expires_after_microseconds ?? defaultApprovalLifetime
      })
      : Object.assign({}, Interceptor.escalate("approval.required", { detail: `${decision.code}: ${why}` }), {
        approver_class: pinned.approver!,
        expires_after: defaultApprovalLifetime
      })
  }
  if (escalation !== undefined) {
    return Object.assign({}, escalation, { soft_deny: softDenied, approval_gates: approvalGates, gates })
  }
  return Interceptor.withGates(
    Interceptor.allow(
      part === "guard" ? "guard.passed" : "policy.allowed",
      advisories.length > 0 ? `advisory: ${advisories.join(", ")}` : undefined
    ),
    gates
  )
}

/** Stage by stage: the guards, then the action policy; the first refusal stands. */
export const explain = (snapshot: Pinned, input: PolicyInput): Reduced & { readonly stage: Part } => {
  const guards = reduce(snapshot, "guard", input)
  return guards.disposition !== "allow"
    ? Object.assign({}, guards, { stage: "guard" as const })
    : Object.assign({}, reduce(snapshot, "policy", input), { stage: "policy" as const })
}
