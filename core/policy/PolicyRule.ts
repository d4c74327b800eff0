/**
 * The closed union of compiled policy rules (tagged by `kind`) and the gate bindings that route
 * them: every executable rule of a snapshot lives here, and all of it is digested.
 */
import { Schema } from "effect"
import { Sha256Hex } from "../base/Digest.ts"
import { Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import { ExecutionCaller } from "./InvocationContext.ts"

/** A glob pattern: `*` matches any run of characters. */
export const Pattern = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(512))

const Patterns = Schema.NonEmptyArray(Pattern)
const AllowOrDeny = Schema.Literal("allow", "deny")

const ruleFields = {
  rule_id: Identifier,
  order: Schema.NonNegativeInt,
  provenance: Schema.String
}

/** Allow or deny actions by name, and optionally by their salient argument (`operations`). */
export const ActionRule = Schema.Struct({
  kind: Schema.Literal("action"),
  ...ruleFields,
  effect: AllowOrDeny,
  action_patterns: Patterns,
  operations: Patterns
})

/** Allow or deny filesystem access under roots, per mode. */
export const FilesystemRule = Schema.Struct({
  kind: Schema.Literal("filesystem"),
  ...ruleFields,
  effect: AllowOrDeny,
  roots: Patterns,
  modes: Schema.NonEmptyArray(Schema.Literal("read", "write", "execute"))
})

/** Allow or deny network destinations (`host:port` patterns; a resolve matches their host part), per mode. */
export const NetworkRule = Schema.Struct({
  kind: Schema.Literal("network"),
  ...ruleFields,
  effect: AllowOrDeny,
  destinations: Patterns,
  modes: Schema.NonEmptyArray(Schema.Literal("connect", "listen", "resolve"))
})

/** Allow or deny executables; `shell: forbid` refuses shell interpretation. */
export const SubprocessRule = Schema.Struct({
  kind: Schema.Literal("subprocess"),
  ...ruleFields,
  effect: AllowOrDeny,
  executable_patterns: Patterns,
  shell: Schema.Literal("forbid", "allow")
})

/** Allow or deny MCP servers, tools and resources; a rule naming no tool and no resource covers its whole server. */
export const McpRule = Schema.Struct({
  kind: Schema.Literal("mcp"),
  ...ruleFields,
  effect: AllowOrDeny,
  server_patterns: Patterns,
  tool_patterns: Schema.Array(Pattern),
  resource_patterns: Schema.Array(Pattern)
})

/** Secret exposure (forbid < reference_only < inject): allow grants up to its level; deny or `forbid` refuses it and above. */
export const SecretExposureRule = Schema.Struct({
  kind: Schema.Literal("secret_exposure"),
  ...ruleFields,
  effect: AllowOrDeny,
  secret_namespaces: Patterns,
  exposure: Schema.Literal("forbid", "reference_only", "inject")
})

/** Environment exposure (forbid < read < inject): allow grants up to its level; deny or `forbid` refuses it and above. */
export const EnvironmentRule = Schema.Struct({
  kind: Schema.Literal("environment"),
  ...ruleFields,
  effect: AllowOrDeny,
  variable_patterns: Patterns,
  exposure: Schema.Literal("forbid", "read", "inject")
})

/** The origins allowed to run matching actions; an empty list allows none. */
export const OriginRule = Schema.Struct({
  kind: Schema.Literal("origin"),
  ...ruleFields,
  effect: Schema.Literal("allow"),
  action_patterns: Patterns,
  callers: Schema.Array(ExecutionCaller)
})

/** Matching calls need an approval from the named approver class (null: no authority, so they are denied). */
export const ApprovalRule = Schema.Struct({
  kind: Schema.Literal("approval"),
  ...ruleFields,
  effect: Schema.Literal("require_approval"),
  // Empty: the rule requires approval of nothing and only names the authority a soft deny escalates to.
  action_patterns: Schema.Array(Pattern),
  operations: Patterns,
  approver_class: Schema.NullOr(Identifier),
  expires_after_microseconds: Schema.Int.pipe(Schema.positive())
})

/** A budget per window for matching actions (per the policy's lifetime when it has no window). */
export const BudgetRule = Schema.Struct({
  kind: Schema.Literal("budget"),
  ...ruleFields,
  effect: Schema.Literal("limit"),
  action_patterns: Patterns,
  budget_kind: Schema.Literal("calls", "tokens", "cost_microunits", "wall_microseconds"),
  limit: Schema.NonNegativeInt,
  window_microseconds: Schema.optional(Schema.Int.pipe(Schema.positive()))
})

/** The validity window of the policy (allow inside it) or a blackout window (deny inside it). */
export const ExpiryRule = Schema.Struct({
  kind: Schema.Literal("expiry"),
  ...ruleFields,
  effect: AllowOrDeny,
  not_before: Schema.optional(Timestamp),
  expires_at: Schema.optional(Timestamp)
})

/** The closed union of compiled rules. */
export const CompiledRule = Schema.Union(
  ActionRule,
  FilesystemRule,
  NetworkRule,
  SubprocessRule,
  McpRule,
  SecretExposureRule,
  EnvironmentRule,
  OriginRule,
  ApprovalRule,
  BudgetRule,
  ExpiryRule
)

/** A compiled rule. */
export type CompiledRule = typeof CompiledRule.Type

/** What a gate whose evaluation fails or throws decides: deny (fail-closed, the default) or escalate to its approver. */
export const OnError = Schema.Literal("deny", "escalate")

/**
 * A gate: which rules it evaluates, at which level, in which order, and what its evaluator's failure decides
 * (`on_error` is present only when it is `escalate`, so a gate with the default digests as before).
 */
export const GateBinding = Schema.Struct({
  gate_id: Identifier,
  adapter_id: Identifier,
  level: Schema.Literal("hard", "soft", "advisory"),
  order: Schema.NonNegativeInt,
  tool_ids: Schema.Array(Pattern),
  rule_ids: Schema.Array(Identifier),
  on_error: Schema.optional(Schema.Literal("escalate"))
})

/** A gate binding. */
export type GateBinding = typeof GateBinding.Type

/**
 * An interceptor a snapshot binds, by identity: its id, its version and the `sha256-v1` digest of the configuration it
 * was built with. In the governed profiles every configured interceptor must be bound so (out-of-band rules are refused).
 */
export const InterceptorBinding = Schema.Struct({
  id: Identifier,
  version: Identifier,
  config_digest: Sha256Hex
})

/** An interceptor binding. */
export type InterceptorBinding = typeof InterceptorBinding.Type
