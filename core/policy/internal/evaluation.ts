import type { EnvironmentNeed, McpTool, SecretNeed } from "../../action/Action.ts"
import type { AgentSubject, InvocationContext } from "../InvocationContext.ts"
import type { CompiledRule, GateBinding } from "../PolicyRule.ts"
import type { Glob } from "./glob.ts"

/** What a decision is asked about: the action, its normalised arguments, who asks, and when. */
export interface PolicyInput {
  readonly action: string
  /** The action's aliases: a deny written against an alias holds for the action whatever name the call used. */
  readonly aliases?: ReadonlyArray<string>
  readonly effects: ReadonlyArray<string>
  readonly arguments: Readonly<Record<string, unknown>>
  readonly principal: string
  readonly tenant?: string
  /** The invocation context the host established for this call, if any. */
  readonly invocation?: InvocationContext
  /** The `path` argument after the host resolved its symbolic links (see PolicyPath.PathResolver), when it did. */
  readonly resolved_path?: string
  /** The executing agent the executor is bound to. */
  readonly bound_agent?: AgentSubject
  /** The MCP tool the action declares it calls. */
  readonly mcp?: McpTool
  /** The secrets the action declares it needs. */
  readonly secrets?: ReadonlyArray<SecretNeed>
  /** The environment variables the action declares it needs. */
  readonly environment?: ReadonlyArray<EnvironmentNeed>
  readonly now: number
}

/** One gate's decision with its stable reason code and the rules that produced it. */
export interface PolicyDecision {
  readonly disposition: "allow" | "deny" | "escalate"
  readonly code: string
  readonly detail?: string
  readonly matched_rules: ReadonlyArray<string>
  readonly approver_class?: string
  readonly approval_expires_after_microseconds?: number
  /** An origin rule refused the call: authorization, which denies in a gate of any level and no approval lifts. */
  readonly origin?: true
}

/** Which part of a gate to evaluate: intrinsic guards (stage 6) or the action policy (stage 7). */
export type Part = "guard" | "policy"

export interface Matcher<R> {
  readonly rule: R
  readonly actions: ReadonlyArray<Glob>
  readonly operations: ReadonlyArray<Glob>
}

/** A matcher as seen from one action: specific when a pattern other than `*` names it. */
export interface Candidate<R> extends Matcher<R> {
  readonly specific: boolean
}

export type RuleOf<K extends CompiledRule["kind"]> = Extract<CompiledRule, { kind: K }>

export interface ActionView {
  readonly deny: ReadonlyArray<Candidate<RuleOf<"action">>>
  readonly allow: ReadonlyArray<Candidate<RuleOf<"action">>>
  readonly escalate: ReadonlyArray<Candidate<RuleOf<"approval">>>
  readonly origins: ReadonlyArray<RuleOf<"origin">>
}

/** A gate compiled for evaluation. */
export interface CompiledGate {
  readonly gate: GateBinding
  readonly tools: ReadonlyArray<Glob>
  readonly scope: { readonly principals: ReadonlyArray<Glob>; readonly tenants: ReadonlyArray<Glob> }
  readonly expiry: ReadonlyArray<RuleOf<"expiry">>
  readonly filesystem: ReadonlyArray<{ readonly rule: RuleOf<"filesystem">; readonly roots: ReadonlyArray<string> }>
  readonly subprocess: ReadonlyArray<{ readonly rule: RuleOf<"subprocess">; readonly executables: ReadonlyArray<Glob> }>
  readonly network: ReadonlyArray<
    {
      readonly rule: RuleOf<"network">
      readonly destinations: ReadonlyArray<Glob>
      readonly hosts: ReadonlyArray<Glob>
    }
  >
  readonly mcp: ReadonlyArray<McpGrant>
  readonly secrets: ReadonlyArray<{ readonly rule: RuleOf<"secret_exposure">; readonly names: ReadonlyArray<Glob> }>
  readonly environment: ReadonlyArray<{ readonly rule: RuleOf<"environment">; readonly names: ReadonlyArray<Glob> }>
  readonly view: (action: string) => ActionView
}

/** An mcp rule compiled: a rule naming neither tools nor resources covers its whole server. */
export interface McpGrant {
  readonly rule: RuleOf<"mcp">
  readonly servers: ReadonlyArray<Glob>
  readonly tools: ReadonlyArray<Glob>
  readonly resources: ReadonlyArray<Glob>
  readonly whole: boolean
}

export const decision = (
  disposition: PolicyDecision["disposition"],
  code: string,
  matched: ReadonlyArray<{ readonly rule_id: string }>,
  detail?: string
): PolicyDecision => ({
  disposition,
  code,
  matched_rules: matched.map((rule) => rule.rule_id),
  ...(detail === undefined ? {} : { detail })
})

export const stringArgument = (input: PolicyInput, name: string) => {
  const value = input.arguments[name]
  return typeof value === "string" ? value : undefined
}
