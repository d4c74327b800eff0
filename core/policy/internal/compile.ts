import { normalise } from "../PolicyPath.ts"
import type { CompiledRule, GateBinding } from "../PolicyRule.ts"
import type { PolicySnapshot } from "../PolicySnapshot.ts"
import type { ActionView, Candidate, CompiledGate, Matcher, RuleOf } from "./evaluation.ts"
import { glob } from "./glob.ts"
import { hostOf } from "./guards.ts"

const matcher = <R extends { readonly action_patterns: ReadonlyArray<string> }>(
  rule: R,
  operations: ReadonlyArray<string>
): Matcher<R> => {
  return { rule, actions: rule.action_patterns.map(glob), operations: operations.map(glob) }
}

/** Compile one gate of a snapshot: rules bucketed by kind, action rules indexed by exact name. */
export const compileGate = (snapshot: PolicySnapshot, gate: GateBinding): CompiledGate => {
  const bound = new Set(gate.rule_ids)
  const rules = snapshot.compiled_rules.filter((rule) => bound.has(rule.rule_id))
  const of = <K extends CompiledRule["kind"]>(kind: K) => rules.filter((rule): rule is RuleOf<K> => rule.kind === kind)
  const actionMatchers = of("action").map((rule) => matcher(rule, rule.operations))
  const approvalMatchers = of("approval").map((rule) => matcher(rule, rule.operations))
  const origins = of("origin").map((rule) => ({ rule, actions: rule.action_patterns.map(glob) }))
  const exact = new Map<string, Array<Matcher<RuleOf<"action">> | Matcher<RuleOf<"approval">>>>()
  const wildcard: Array<Matcher<RuleOf<"action">> | Matcher<RuleOf<"approval">>> = []
  for (const m of [...actionMatchers, ...approvalMatchers]) {
    if (m.actions.some((a) => a.wildcard)) wildcard.push(m)
    for (const a of m.actions) if (!a.wildcard) exact.set(a.source, [...(exact.get(a.source) ?? []), m])
  }
  const views = new Map<string, ActionView>()
  const view = (action: string): ActionView => {
    const cached = views.get(action)
    if (cached !== undefined) return cached
    const candidates = [
      ...new Set([...(exact.get(action) ?? []), ...wildcard.filter((m) => m.actions.some((a) => a.test(action)))])
    ]
      .map((m) => (Object.assign({}, m, { specific: m.actions.some((a) => a.source !== "*" && a.test(action)) })))
      .sort((a, b) => Number(b.specific) - Number(a.specific) || a.rule.order - b.rule.order)
    const actionRules = candidates.filter((m): m is Candidate<RuleOf<"action">> => m.rule.kind === "action")
    const created: ActionView = {
      deny: actionRules.filter((m) => m.rule.effect === "deny"),
      allow: actionRules.filter((m) => m.rule.effect === "allow"),
      escalate: candidates.filter((m): m is Candidate<RuleOf<"approval">> => m.rule.kind === "approval"),
      origins: origins.filter((o) => o.actions.some((a) => a.test(action))).map((o) => o.rule)
    }
    views.set(action, created)
    return created
  }
  return {
    gate,
    tools: gate.tool_ids.map(glob),
    scope: { principals: snapshot.principal_scope.map(glob), tenants: snapshot.tenant_scope.map(glob) },
    expiry: of("expiry"),
    filesystem: of("filesystem").map((rule) => ({
      rule,
      roots: rule.roots.map((root) => normalise(root) ?? root)
    })),
    subprocess: of("subprocess").map((rule) => ({ rule, executables: rule.executable_patterns.map(glob) })),
    network: of("network").map((rule) => ({
      rule,
      // Hosts are matched as URLs normalise them: lowercase.
      destinations: rule.destinations.map((d) => glob(d.toLowerCase())),
      hosts: rule.destinations.map((d) => glob(hostOf(d.toLowerCase())))
    })),
    mcp: of("mcp").map((rule) => ({
      rule,
      servers: rule.server_patterns.map(glob),
      tools: rule.tool_patterns.map(glob),
      resources: rule.resource_patterns.map(glob),
      whole: rule.tool_patterns.length === 0 && rule.resource_patterns.length === 0
    })),
    secrets: of("secret_exposure").map((rule) => ({ rule, names: rule.secret_namespaces.map(glob) })),
    environment: of("environment").map((rule) => ({ rule, names: rule.variable_patterns.map(glob) })),
    view
  }
}

/** Compile every gate of a snapshot, in its gates' `order` (whatever order a stored snapshot lists them in). */
export const compile = (snapshot: PolicySnapshot): ReadonlyArray<CompiledGate> =>
  [...snapshot.gate_bindings].sort((a, b) => a.order - b.order).map((gate) => compileGate(snapshot, gate))
