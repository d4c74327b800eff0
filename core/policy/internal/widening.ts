/** Deciding over every gate of a snapshot, and finding where a child's snapshot allows what its parent's refuses. */

import * as Time from "../../base/Time.ts"
import type * as Interceptor from "../../execution/Interceptor.ts"
import * as PermissionPolicy from "../PermissionPolicy.ts"
import type { PolicyInput } from "../PolicyEvaluator.ts"
import * as PolicyEvaluator from "../PolicyEvaluator.ts"
import * as PolicyGate from "../PolicyGate.ts"
import * as PolicySnapshot from "../PolicySnapshot.ts"
import { witnesses } from "./witnesses.ts"

/** The executor's verdict on one input over every gate of a snapshot, with the gate and rules behind it. */
export interface Verdict {
  readonly disposition: Interceptor.Verdict["disposition"]
  readonly code: string
  /** The stage that decided: the intrinsic guards or the action policy. */
  readonly stage: "guard" | "policy"
  /** The enforcing gate that refused, if any. */
  readonly gate_id?: string
  /** The rules behind the verdict (for an allow: the allow rules of every enforcing gate). */
  readonly matched_rules: ReadonlyArray<string>
}

/**
 * A decision function over a snapshot: PolicyGate's own reduction (intrinsic refusals, guards, then
 * policy; gate levels and tool scopes; a hard deny anywhere outranks an escalation), annotated with the
 * deciding gate and rules. Pin-time checks (digest, activation, unenforceable rules), approvals and
 * budgets are the executor's and are not applied here.
 */
export const decider = (snapshot: PolicySnapshot.PolicySnapshot): (input: PolicyInput) => Verdict => {
  const compiled = PolicyGate.pinned(snapshot)
  const enforcing = compiled.gates.filter((gate) => gate.gate.level !== "advisory")
  return (input) => {
    const { code, disposition, stage } = PolicyGate.explain(compiled, input)
    const applicable = enforcing.filter((gate) => gate.tools.some((tool) => tool.test(input.action)))
    if (disposition === "allow") {
      const matched_rules = applicable.flatMap((gate) => PolicyEvaluator.evaluate(gate, "policy", input).matched_rules)
      return { disposition, code, stage, matched_rules }
    }
    if (stage === "guard" && PolicyEvaluator.intrinsicRefusal(input) !== undefined) {
      return { disposition, code, stage, matched_rules: [] }
    }
    // Name the gate PolicyGate's verdict came from: the first hard deny, else the first escalation.
    for (const gate of applicable) {
      const decision = PolicyEvaluator.evaluate(gate, stage, input)
      if (decision.disposition === "allow") continue
      const escalates = decision.disposition === "escalate" ||
        (gate.gate.level === "soft" && stage === "policy" && compiled.approver !== undefined)
      if (escalates === (disposition === "escalate")) {
        return { disposition, code, stage, gate_id: gate.gate.gate_id, matched_rules: decision.matched_rules }
      }
    }
    return { disposition, code, stage, matched_rules: [] }
  }
}

// ---------------------------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------------------------

/**
 * Whether every value `inner` matches is also matched by `outer` (`*` globs). Sound: when it says
 * yes, inclusion holds; only a `*` of `outer` can absorb a `*` of `inner`.
 */
export const patternCovers = (outer: string, inner: string): boolean => {
  let reachable: Array<boolean> = Array.from({ length: inner.length + 1 }, (_, j) => j === 0)
  for (let i = 0; i < outer.length; i++) {
    const next: Array<boolean> = Array.from({ length: inner.length + 1 }, () => false)
    if (outer[i] === "*") {
      let on = false
      for (let j = 0; j <= inner.length; j++) {
        on = on || reachable[j]!
        next[j] = on
      }
    } else {
      for (let j = 0; j < inner.length; j++) {
        if (reachable[j] && inner[j] === outer[i] && inner[j] !== "*") next[j + 1] = true
      }
    }
    reachable = next
  }
  return reachable[inner.length]!
}

/** The index of the first pattern of `inner` that no pattern of `outer` covers, or -1 when `inner` is narrower or equal. */
export const uncoveredPattern = (outer: ReadonlyArray<string>, inner: ReadonlyArray<string>): number =>
  inner.findIndex((pattern) => !outer.some((candidate) => patternCovers(candidate, pattern)))

// ---------------------------------------------------------------------------------------------
// Widening
// ---------------------------------------------------------------------------------------------

/** One way a child widens its parent: where, and a witness. */
export interface Widening {
  readonly path: string
  readonly detail: string
}

/** The declaration path of every compiled rule id, in the compiler's own source order. */
const rulePaths = (policy: PermissionPolicy.PermissionPolicy): ReadonlyMap<string, string> => {
  const paths = new Map<string, string>()
  const sources: Array<[string | undefined, string]> = [
    ...PermissionPolicy.presetRules(policy.mode, policy.approver_class ?? null).map((
      rule
    ): [string | undefined, string] => [rule.rule_id, "$.mode"]),
    ...(["deny", "allow", "escalate"] as const).flatMap((map) =>
      Object.keys(policy[map] ?? {}).map((action): [string | undefined, string] => [undefined, `$.${map}.${action}`])
    ),
    ...policy.rules.map((rule, i): [string | undefined, string] => [rule.rule_id, `$.rules.${i}`])
  ]
  sources.forEach(([id, path], position) => paths.set(id ?? `rule-${position}`, path))
  return paths
}

// Canonical.ts owns JSON; this is only a human-readable witness.
const argumentsText = (args: Readonly<Record<string, unknown>>) =>
  `{${Object.entries(args).map(([k, v]) => `${k}: ${typeof v === "string" ? `"${v}"` : String(v)}`).join(", ")}}`

const needsText = ({ environment, mcp, secrets }: PolicyInput) =>
  [
    ...(mcp === undefined ? [] : [`mcp ${mcp.server} tool ${mcp.tool}`, ...mcp.resources.map((r) => `resource ${r}`)]),
    ...(secrets ?? []).map((need) => `secret ${need.namespace} (${need.exposure})`),
    ...(environment ?? []).map((need) => `environment ${need.variable} (${need.exposure})`)
  ].map((need) => ` needing ${need}`).join("")

const describeInput = (input: PolicyInput) =>
  `${input.action} ${argumentsText(input.arguments)}${input.effects.length > 0 ? ` [${input.effects.join(",")}]` : ""}${
    needsText(input)
  }${input.now === 0 ? "" : ` at ${Time.fromMicros(input.now)}`}`

const unscoped = (snapshot: PolicySnapshot.PolicySnapshot) =>
  PolicySnapshot.PolicySnapshot.make(Object.assign({}, snapshot, { principal_scope: ["*"], tenant_scope: ["*"] }))

const MAX_WIDENINGS = 16

/**
 * The ways a (resolved) child widens its parent: scope patterns the parent's scope does not cover,
 * then sampled calls the child alone allows and the parent alone does not (sampling can miss a
 * widening, never invent one).
 */
export const widenings = (
  parent: PolicySnapshot.PolicySnapshot,
  child: PolicySnapshot.PolicySnapshot,
  childDeclaration: PermissionPolicy.PermissionPolicy
): ReadonlyArray<Widening> => {
  const found: Array<Widening> = []
  for (const field of ["principal_scope", "tenant_scope"] as const) {
    const index = uncoveredPattern(parent[field], child[field])
    if (index >= 0) {
      found.push({
        path: `$.${field}.${index}`,
        detail: `"${child[field][index]}" is not within the parent's ${field} [${parent[field].join(", ")}]`
      })
    }
  }
  const parentDecides = decider(unscoped(parent))
  const childDecides = decider(unscoped(child))
  const paths = rulePaths(childDeclaration)
  for (const input of witnesses([...parent.compiled_rules, ...child.compiled_rules])) {
    if (found.length >= MAX_WIDENINGS) break
    const byChild = childDecides(input)
    if (byChild.disposition !== "allow") continue
    const byParent = parentDecides(input)
    if (byParent.disposition === "allow") continue
    const rule = byChild.matched_rules[0]
    found.push({
      path: (rule === undefined ? undefined : paths.get(rule)) ?? "$",
      detail: `the child allows ${describeInput(input)}${
        rule === undefined ? "" : ` (rule ${rule})`
      }, which the parent refuses: ${byParent.disposition} ${byParent.code}`
    })
  }
  return found
}
