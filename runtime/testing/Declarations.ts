/** fast-check arbitraries of policy declarations in their wire form: rules of every kind, gates, presets, children. */
import { Either } from "effect"
import fc from "fast-check"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import type { PermissionPolicyEncoded } from "../../core/policy/PermissionPolicy.ts"
import type { ChildPolicyEncoded } from "../../core/policy/PolicyComposition.ts"
import {
  actionPattern,
  callers,
  destinations,
  executables,
  identifier,
  nonEmpty,
  nonEmptyUnique,
  operationPattern,
  principalPatterns,
  record,
  roots,
  tenantPatterns,
  text,
  timestamp
} from "./internal/pools.ts"
import type { WireRule } from "./internal/pools.ts"

// ---------------------------------------------------------------------------------------------
// Declarations
// ---------------------------------------------------------------------------------------------

/** What the declaration arbitraries draw action names from. */
export interface PolicyOptions {
  readonly actions?: ReadonlyArray<string>
}

const allowOrDeny = fc.constantFrom("allow" as const, "deny" as const)
const approverClass = fc.constantFrom("maintainer", "ops", "security")

/** A typed rule in its wire form, of any kind of core/policy/PolicyRule.ts (ids, order and provenance left to the compiler). */
export const declaredRule = (options: PolicyOptions = {}): fc.Arbitrary<WireRule> => {
  const actions = nonEmpty(actionPattern(options.actions))
  const operations = nonEmpty(operationPattern)
  const rules: ReadonlyArray<fc.WeightedArbitrary<WireRule>> = [
    {
      weight: 6,
      arbitrary: fc.record({ kind: fc.constant("action"), effect: allowOrDeny, action_patterns: actions, operations }, {
        ...record,
        requiredKeys: ["kind", "effect", "action_patterns"]
      })
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant("approval"),
        effect: fc.constant("require_approval"),
        action_patterns: actions,
        operations,
        approver_class: fc.option(approverClass, { nil: null }),
        expires_after_microseconds: fc.integer({ min: 1, max: 86_400_000_000 })
      }, { ...record, requiredKeys: ["kind", "effect", "action_patterns"] })
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("filesystem"),
        effect: allowOrDeny,
        roots: nonEmpty(fc.constantFrom(...roots)),
        modes: nonEmptyUnique(["read", "write", "execute"] as const)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("network"),
        effect: allowOrDeny,
        destinations: nonEmpty(fc.constantFrom(...destinations)),
        modes: nonEmptyUnique(["connect", "listen", "resolve"] as const)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("subprocess"),
        effect: allowOrDeny,
        executable_patterns: nonEmpty(fc.constantFrom(...executables)),
        shell: fc.constantFrom("forbid" as const, "allow" as const)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("mcp"),
        effect: allowOrDeny,
        server_patterns: nonEmpty(fc.constantFrom("github", "jira", "*")),
        tool_patterns: fc.array(fc.constantFrom("search", "create_*", "*"), { maxLength: 2 }),
        resource_patterns: fc.array(fc.constantFrom("repo://*", "issue://*"), { maxLength: 2 })
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("secret_exposure"),
        effect: allowOrDeny,
        secret_namespaces: nonEmpty(fc.constantFrom("github/*", "aws/*", "*")),
        exposure: fc.constantFrom("forbid" as const, "reference_only" as const, "inject" as const)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("environment"),
        effect: allowOrDeny,
        variable_patterns: nonEmpty(fc.constantFrom("PATH", "HOME", "AWS_*", "*")),
        exposure: fc.constantFrom("forbid" as const, "read" as const, "inject" as const)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("origin"),
        effect: fc.constant("allow"),
        action_patterns: actions,
        callers: fc.subarray(callers)
      }, record)
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("budget"),
        effect: fc.constant("limit"),
        action_patterns: actions,
        budget_kind: fc.constantFrom(
          "calls" as const,
          "tokens" as const,
          "cost_microunits" as const,
          "wall_microseconds" as const
        ),
        limit: fc.nat({ max: 1000 }),
        window_microseconds: fc.integer({ min: 1, max: 3_600_000_000 })
      }, { ...record, requiredKeys: ["kind", "effect", "budget_kind", "limit"] })
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant("expiry"),
        effect: allowOrDeny,
        not_before: timestamp,
        expires_at: timestamp
      }, {
        ...record,
        requiredKeys: ["kind", "effect"]
      })
    }
  ]
  return fc.oneof(...rules)
}

const patternMap = (options: PolicyOptions) =>
  fc.dictionary(actionPattern(options.actions), nonEmpty(operationPattern), { ...record, minKeys: 1, maxKeys: 3 })

const levels = fc.oneof(
  { arbitrary: fc.constant("hard" as const), weight: 4 },
  { arbitrary: fc.constant("soft" as const), weight: 1 },
  { arbitrary: fc.constant("advisory" as const), weight: 1 }
)

/**
 * Gates for a declaration whose explicitly named rules are `ids`: unique ids and orders, one hard gate binding every
 * rule, and no origin rule (of `origins`) in a soft or advisory gate.
 */
const gates = (ids: ReadonlyArray<string>, origins: ReadonlySet<string>) =>
  fc.integer({ min: 1, max: 3 }).chain((count) =>
    fc.tuple(
      fc.shuffledSubarray(Array.from({ length: count }, (_, i) => i * 10), { minLength: count, maxLength: count }),
      fc.array(levels, { minLength: count, maxLength: count }),
      fc.array(fc.subarray([...ids]), { minLength: count, maxLength: count }),
      fc.nat({ max: count - 1 }),
      fc.array(fc.option(fc.constantFrom(["*"], ["shell.*"], ["notes.read", "notes.write"]), { nil: undefined }), {
        minLength: count,
        maxLength: count
      })
    ).map(([orders, gateLevels, bound, all, tools]) =>
      orders.map((order, i) => {
        const level = i === all ? "hard" as const : gateLevels[i]!
        return {
          gate_id: `g${i}`,
          level,
          order,
          ...(tools[i] === undefined ? {} : { tool_ids: tools[i] }),
          ...(i === all ? {} : { rule_ids: bound[i]!.filter((id) => level === "hard" || !origins.has(id)) })
        }
      })
    )
  )

const mode = fc.constantFrom(
  "rules" as const,
  "deny_all" as const,
  "allow_all" as const,
  "read_only" as const,
  "safe" as const
)

/**
 * A valid PermissionPolicy in its wire form: every mode, rules-mode maps, typed rules of every kind, and gates.
 * A declaration with gates names every rule explicitly (a generated `rule-N` moves with its position), so it is in
 * rules mode, without rules-mode maps, and declares its rules (possibly none) rather than inheriting them.
 */
export const permissionPolicy = (options: PolicyOptions = {}): fc.Arbitrary<PermissionPolicyEncoded> =>
  fc.record({
    policy_id: identifier,
    version: identifier,
    principal_scope: nonEmpty(fc.constantFrom(...principalPatterns)),
    tenant_scope: nonEmpty(fc.constantFrom(...tenantPatterns)),
    mode,
    approver_class: approverClass,
    deny: patternMap(options),
    allow: patternMap(options),
    escalate: patternMap(options),
    rules: fc.array(fc.tuple(declaredRule(options), fc.boolean(), fc.boolean()), { maxLength: 6 }),
    gated: fc.boolean(),
    provenance: fc.record({ source: text(20), author: identifier }, { ...record, requiredKeys: [] })
  }, { ...record, requiredKeys: ["policy_id", "version", "gated"] }).chain((
    { allow, deny, escalate, gated, mode, rules, ...policy }
  ) => {
    // Explicit ids never collide with the compiler's positional `rule-N`; explicit orders sit above every positional one.
    const named = (rules ?? []).map(([rule, id, order], i): WireRule => ({
      ...rule,
      ...(id || gated ? { rule_id: `r-${i}` } : {}),
      ...(order ? { order: 1000 + i } : {})
    }))
    if (gated) {
      const ids = named.map((rule) => rule.rule_id!)
      const origins = new Set(named.flatMap((rule) => rule.kind === "origin" ? [rule.rule_id!] : []))
      return gates(ids, origins).map((gates): PermissionPolicyEncoded => ({
        ...policy,
        ...(mode === undefined ? {} : { mode: "rules" }),
        rules: named,
        gates
      }))
    }
    return fc.constant<PermissionPolicyEncoded>({
      ...policy,
      ...(mode === undefined ? {} : { mode }),
      ...(deny === undefined ? {} : { deny }),
      ...(allow === undefined ? {} : { allow }),
      ...(escalate === undefined ? {} : { escalate }),
      ...(rules === undefined ? {} : { rules: named })
    })
  })

/** A valid PermissionPolicy, decoded (defaults filled in). */
export const policy = (options: PolicyOptions = {}): fc.Arbitrary<PermissionPolicy.PermissionPolicy> =>
  permissionPolicy(options).map((wire) => Either.getOrThrow(PermissionPolicy.decode(wire)))

/** A child declaration in its wire form: an omitted scope, approver class or rules list inherits; `null` drops the approver. */
export const childPolicy = (options: PolicyOptions = {}): fc.Arbitrary<ChildPolicyEncoded> =>
  fc.tuple(permissionPolicy(options), fc.boolean()).map(([wire, dropApprover]): ChildPolicyEncoded => {
    const { approver_class, ...rest } = wire
    return dropApprover
      ? { ...rest, approver_class: null }
      : approver_class === undefined
      ? rest
      : { ...rest, approver_class }
  })

export {
  /** A glob over the given action names: exact names, `*`, `prefix.*` and `*.suffix`. */
  actionPattern,
  /** The action names arbitraries use when none are given. */
  defaultActions,
  /** An Identifier in its decoded (trimmed) form: mostly short ASCII ids, sometimes any text. */
  identifier,
  /** A salient-argument pattern: shell commands, paths, `*`, and occasionally free or awkward text. */
  operationPattern,
  /** The principals (and executor ids) arbitraries draw from. */
  principals,
  /** A UTC timestamp with microseconds between 2024 and 2030. */
  timestamp
} from "./internal/pools.ts"
