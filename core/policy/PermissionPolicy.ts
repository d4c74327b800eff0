/**
 * The declared permission policy: an immutable, validated declaration (YAML or JSON) and the
 * compiler's only input. Presets and rules-mode maps expand into the same typed rules.
 */
import { Either, ParseResult, Schema } from "effect"
import { ContainmentKind } from "../action/Action.ts"
import { Identifier } from "../base/Refs.ts"
import {
  ActionRule,
  ApprovalRule,
  BudgetRule,
  EnvironmentRule,
  ExpiryRule,
  FilesystemRule,
  GateBinding,
  InterceptorBinding,
  McpRule,
  NetworkRule,
  OnError,
  OriginRule,
  Pattern,
  SecretExposureRule,
  SubprocessRule
} from "./PolicyRule.ts"

const declared = <F extends Schema.Struct.Fields>(rule: Schema.Struct<F>) =>
  Schema.Struct({
    ...rule.fields,
    rule_id: Schema.optional(Identifier),
    order: Schema.optional(Schema.NonNegativeInt),
    provenance: Schema.optional(Schema.String)
  })

const anyOperation = { default: () => ["*"] as const }

/** How long an approval request stays open when its rule names no lifetime: one hour, in microseconds. */
export const defaultApprovalLifetime = 3_600_000_000

/** A rule as declared: ids, order and provenance may be left to the compiler. */
export const DeclaredRule = Schema.Union(
  Schema.Struct({
    ...declared(ActionRule).fields,
    operations: Schema.optionalWith(ActionRule.fields.operations, anyOperation)
  }),
  declared(FilesystemRule),
  declared(NetworkRule),
  declared(SubprocessRule),
  declared(McpRule),
  declared(SecretExposureRule),
  declared(EnvironmentRule),
  declared(OriginRule),
  Schema.Struct({
    ...declared(ApprovalRule).fields,
    operations: Schema.optionalWith(ApprovalRule.fields.operations, anyOperation),
    approver_class: Schema.optional(ApprovalRule.fields.approver_class),
    expires_after_microseconds: Schema.optionalWith(ApprovalRule.fields.expires_after_microseconds, {
      default: () => defaultApprovalLifetime
    })
  }),
  Schema.Struct({
    ...declared(BudgetRule).fields,
    action_patterns: Schema.optionalWith(BudgetRule.fields.action_patterns, anyOperation)
  }),
  declared(ExpiryRule)
)

/** A declared rule. */
export type DeclaredRule = typeof DeclaredRule.Type

/** The presets, and `rules` (only what is declared). */
export const Mode = Schema.Literal("rules", "deny_all", "allow_all", "read_only", "safe")

/** Rules-mode shorthand: action name (or `*`) to salient-argument patterns. */
export const PatternMap = Schema.Record({
  key: Pattern.pipe(Schema.filter((key) => key !== "__proto__" || "__proto__ is not an action name")),
  value: Schema.NonEmptyArray(Pattern)
})

/**
 * A gate as declared; `rule_ids` omitted binds every rule, and may name a generated `rule-N` (N the rule's position);
 * `on_error` omitted is `deny`.
 */
export const DeclaredGate = Schema.Struct({
  ...GateBinding.fields,
  on_error: Schema.optional(OnError),
  adapter_id: Schema.optionalWith(GateBinding.fields.adapter_id, { default: () => "writ.policy" }),
  tool_ids: Schema.optionalWith(GateBinding.fields.tool_ids, { default: () => ["*"] }),
  rule_ids: Schema.optional(GateBinding.fields.rule_ids)
})

/**
 * The containment a policy lets a call go without, by kind (`filesystem`, `network`, `subprocess`, `environment`,
 * `secrets`). `degrade`: kinds that are optional under this policy: an action requiring one its backend cannot
 * enforce runs degraded (its outcome and its `operation_started` record list them, and its task's certificate is
 * DEGRADED) instead of being denied. `remote_claims`: kinds a backend's `remote` claim (a platform's word, not
 * verified here) satisfies. A kind not listed stays required: `containment.unsupported` before `operation_started`.
 */
export const ContainmentOptIns = Schema.Struct({
  degrade: Schema.optional(Schema.Array(ContainmentKind)),
  remote_claims: Schema.optional(Schema.Array(ContainmentKind))
})

/** The containment opt-ins of a policy. */
export type ContainmentOptIns = typeof ContainmentOptIns.Type

/** Who declared the policy, and from where. */
export const PolicyProvenance = Schema.Struct({
  source: Schema.optional(Schema.String),
  author: Schema.optional(Schema.String)
})

/** The declared permission policy. */
export const PermissionPolicy = Schema.Struct({
  policy_id: Identifier,
  version: Identifier,
  principal_scope: Schema.optionalWith(Schema.NonEmptyArray(Pattern), { default: () => ["*"] }),
  tenant_scope: Schema.optionalWith(Schema.NonEmptyArray(Pattern), { default: () => ["*"] }),
  mode: Schema.optionalWith(Mode, { default: () => "rules" }),
  approver_class: Schema.optional(Identifier),
  deny: Schema.optional(PatternMap),
  allow: Schema.optional(PatternMap),
  escalate: Schema.optional(PatternMap),
  rules: Schema.optionalWith(Schema.Array(DeclaredRule), { default: () => [] }),
  gates: Schema.optional(Schema.Array(DeclaredGate)),
  /** The executor-configured interceptors this policy binds (governed profiles run no other); omitted binds none. */
  interceptors: Schema.optional(Schema.Array(InterceptorBinding)),
  /** Containment a call may go without (`degrade`) or take a remote claim for (`remote_claims`); omitted: none. */
  containment: Schema.optional(ContainmentOptIns),
  provenance: Schema.optionalWith(PolicyProvenance, { default: () => ({}) })
})

/** The declared permission policy. */
export type PermissionPolicy = typeof PermissionPolicy.Type

/** The declaration's wire form (what YAML and JSON hold). */
export type PermissionPolicyEncoded = typeof PermissionPolicy.Encoded

/** A declaration or compilation that cannot stand, with the path of the offending field. */
export class PolicyValidationError extends Schema.TaggedError<PolicyValidationError>()("PolicyValidationError", {
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

const strict = { onExcessProperty: "error", errors: "first" } as const
const decodeEither = Schema.decodeUnknownEither(PermissionPolicy, strict)

// A message names a place and a problem; it never carries a hostile key or value whole (a 1 MB key, a deep value).
const cut = (text: string, most: number) => (text.length > most ? `${text.slice(0, most)}…` : text)

/** The first issue of a parse error as a PolicyValidationError naming its path. */
export const validationError = (error: ParseResult.ParseError): PolicyValidationError => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  const path = ["$", ...(issue?.path ?? [])].map((segment) => cut(String(segment), 64)).join(".")
  const detail = issue === undefined
    ? "invalid"
    : issue._tag === "Unexpected"
    ? "is not a field of this declaration (nothing is silently ignored)"
    : issue._tag === "Missing"
    ? "is missing"
    : cut(issue.message, 400)
  return new PolicyValidationError({ path, detail })
}

/** Validate a parsed mapping into a declaration; the error names the first offending field. */
export const decode = (input: unknown): Either.Either<PermissionPolicy, PolicyValidationError> =>
  Either.mapLeft(decodeEither(input), validationError)

/** The declaration's wire form, for YAML and JSON writers. */
export const encode: (policy: PermissionPolicy) => PermissionPolicyEncoded = Schema.encodeSync(PermissionPolicy)

const shell = ["shell.*"] as const
const dangerous = ["rm", "sudo", "chmod", "kill", "mkfs"] as const
const readers = ["*.read", "*.list", "*.search", "*.get"] as const
const editors = ["*.write", "*.edit", "*.delete", "*.create", "*.move"] as const

/** The rules a preset stands for. */
export const presetRules = (mode: typeof Mode.Type, approver: string | null): ReadonlyArray<DeclaredRule> => {
  switch (mode) {
    case "rules":
      return []
    case "deny_all":
      return [{ kind: "action", effect: "deny", action_patterns: ["*"], operations: ["*"] }]
    case "allow_all":
      return [{ kind: "action", effect: "allow", action_patterns: ["*"], operations: ["*"] }]
    case "read_only":
      return [
        { kind: "action", effect: "deny", action_patterns: [...editors, ...shell], operations: ["*"] },
        { kind: "action", effect: "allow", action_patterns: readers, operations: ["*"] }
      ]
    case "safe":
      return [
        { kind: "action", effect: "deny", action_patterns: shell, operations: dangerous },
        {
          kind: "approval",
          effect: "require_approval",
          action_patterns: shell,
          operations: ["*"],
          approver_class: approver,
          expires_after_microseconds: defaultApprovalLifetime
        },
        { kind: "action", effect: "allow", action_patterns: ["*"], operations: ["*"] }
      ]
  }
}

/** The rules that rules-mode maps (`deny`, `allow`, `escalate`) stand for. */
export const mapRules = (policy: PermissionPolicy): ReadonlyArray<DeclaredRule> => {
  const entries = (map: typeof PatternMap.Type | undefined) => Object.entries(map ?? {})
  return [
    ...entries(policy.deny).map(([action, operations]): DeclaredRule => ({
      kind: "action",
      effect: "deny",
      action_patterns: [action],
      operations
    })),
    ...entries(policy.allow).map(([action, operations]): DeclaredRule => ({
      kind: "action",
      effect: "allow",
      action_patterns: [action],
      operations
    })),
    ...entries(policy.escalate).map(([action, operations]): DeclaredRule => ({
      kind: "approval",
      effect: "require_approval",
      action_patterns: [action],
      operations,
      approver_class: policy.approver_class ?? null,
      expires_after_microseconds: defaultApprovalLifetime
    }))
  ]
}
