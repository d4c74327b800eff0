/**
 * The one runtime form of a policy: the immutable, digest-pinned snapshot compiled from a
 * declaration. There is no second resolved-policy object.
 */
import { Effect, Either, Hash, Schema } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import * as Digest from "../base/Digest.ts"
import { Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import type { DeclaredRule, PermissionPolicy } from "./PermissionPolicy.ts"
import {
  ContainmentOptIns,
  defaultApprovalLifetime,
  mapRules,
  PolicyProvenance,
  PolicyValidationError,
  presetRules
} from "./PermissionPolicy.ts"
import { CompiledRule, GateBinding, InterceptorBinding, Pattern } from "./PolicyRule.ts"

/** A snapshot's lifecycle: staged -> active -> retired, each step taken once; retiring is the only step after activation. */
export const ReleaseState = Schema.Literal("staged", "active", "retired")

/** A snapshot's lifecycle state. */
export type ReleaseState = typeof ReleaseState.Type

// Rules and gates each run in a unique `order`: a snapshot with two of one order is not a snapshot.
const uniqueOrders = <A extends { readonly order: number }>(items: ReadonlyArray<A>) =>
  new Set(items.map((item) => item.order)).size === items.length || "orders must be unique"

/** A compiled, digest-pinned policy snapshot: staged, active, or retired (readable still, never active again). */
export class PolicySnapshot extends Schema.Class<PolicySnapshot>("PolicySnapshot")({
  policy_id: Identifier,
  version: Identifier,
  digest: Digest.Sha256Hex,
  principal_scope: Schema.NonEmptyArray(Pattern),
  tenant_scope: Schema.NonEmptyArray(Pattern),
  compiled_rules: Schema.Array(CompiledRule).pipe(Schema.filter(uniqueOrders)),
  gate_bindings: Schema.Array(GateBinding).pipe(Schema.filter(uniqueOrders)),
  /** The configured interceptors it binds by identity; absent binds none (and digests as before the field existed). */
  interceptors: Schema.optional(Schema.Array(InterceptorBinding)),
  /** The containment opt-ins, each list sorted; absent opts in to nothing (and digests as before the field existed). */
  containment: Schema.optional(ContainmentOptIns),
  provenance: PolicyProvenance,
  release_state: ReleaseState,
  activated_at: Schema.optional(Timestamp),
  activated_by: Schema.optional(Identifier),
  retired_at: Schema.optional(Timestamp),
  retired_by: Schema.optional(Identifier)
}) {}

// Snapshots `immutable` built: frozen at every level, so handed out as they are.
const frozen = new WeakSet<PolicySnapshot>()

// A deep copy of plain data (a snapshot's fields are strings, numbers, arrays and structs), frozen at every level.
const frozenCopy = <A>(value: A): A => {
  if (typeof value !== "object" || value === null) return value
  const copy = Array.isArray(value)
    ? value.map(frozenCopy)
    : Object.fromEntries(Object.entries(value).map(([key, field]) => [key, frozenCopy(field)]))
  return Object.freeze(copy) as A
}

/**
 * A snapshot as an immutable value: a copy frozen at every level, sharing nothing with its argument, so no holder of
 * it (or of the argument) can change what is enforced under its digest. One `immutable` built is returned as it is.
 */
export const immutable = (snapshot: PolicySnapshot): PolicySnapshot => {
  if (frozen.has(snapshot)) return snapshot
  const copy = new PolicySnapshot(frozenCopy({ ...snapshot }), { disableValidation: true })
  // Effect caches a class instance's hash on the instance the first time it is hashed: done before it is frozen.
  Hash.hash(copy)
  frozen.add(Object.freeze(copy))
  return copy
}

/**
 * Exactly the fields the digest covers: id, version, scopes, ordered rules, ordered gates, bound interceptors and
 * containment opt-ins if any.
 */
export const digestInput = (
  snapshot: Pick<
    PolicySnapshot,
    | "policy_id"
    | "version"
    | "principal_scope"
    | "tenant_scope"
    | "compiled_rules"
    | "gate_bindings"
    | "interceptors"
    | "containment"
  >
) => ({
  policy_id: snapshot.policy_id,
  version: snapshot.version,
  principal_scope: snapshot.principal_scope,
  tenant_scope: snapshot.tenant_scope,
  compiled_rules: snapshot.compiled_rules,
  gate_bindings: snapshot.gate_bindings,
  ...(snapshot.interceptors === undefined ? {} : { interceptors: snapshot.interceptors }),
  ...(snapshot.containment === undefined ? {} : { containment: snapshot.containment })
})

const fail = (path: string, detail: string) => Either.left(new PolicyValidationError({ path, detail }))

/** The compiled rules, and where each rule id was declared (its declaration path). */
type Rules = ReadonlyArray<CompiledRule> & { readonly paths: ReadonlyMap<string, string> }

/** The path of each rules-mode map entry, in the order `mapRules` expands them. */
const mapPaths = (policy: PermissionPolicy) =>
  (["deny", "allow", "escalate"] as const).flatMap((map) =>
    Object.keys(policy[map] ?? {}).map((action) => `$.${map}.${action}`)
  )

const compileRules = (policy: PermissionPolicy): Either.Either<Rules, PolicyValidationError> => {
  const approver = policy.approver_class ?? null
  const paths = mapPaths(policy)
  const sources: Array<[DeclaredRule, string, string]> = [
    ...presetRules(policy.mode, approver).map((
      rule
    ): [DeclaredRule, string, string] => [rule, `preset:${policy.mode}`, "$.mode"]),
    ...mapRules(policy).map((rule, i): [DeclaredRule, string, string] => [rule, "rules-mode", paths[i]!]),
    ...policy.rules.map((rule, i): [DeclaredRule, string, string] => [rule, "declared", `$.rules.${i}`])
  ]
  // A policy-level approver with no approval rule still names the authority an unresolved soft deny escalates to: it
  // is compiled into a rule (matching no action), so it lives in the digested rules like every executable part.
  if (approver !== null && !sources.some(([rule]) => rule.kind === "approval")) {
    sources.push([
      {
        rule_id: "approver_class",
        kind: "approval",
        effect: "require_approval",
        action_patterns: [],
        operations: ["*"],
        approver_class: approver,
        expires_after_microseconds: defaultApprovalLifetime
      },
      "approver_class",
      "$.approver_class"
    ])
  }
  // Rule id -> where it was declared, and whether the declaration wrote it (else the compiler gave it).
  const seen = new Map<string, { readonly path: string; readonly written: boolean }>()
  const compiled: Array<CompiledRule> = []
  for (const [rule, provenance, path] of sources) {
    const order = compiled.length
    const rule_id = rule.rule_id ?? `rule-${order}`
    const written = provenance === "declared" && rule.rule_id !== undefined
    const earlier = seen.get(rule_id)
    if (earlier !== undefined) {
      // Blame the id someone wrote (two ids the compiler gives never collide).
      return written
        ? fail(
          `${path}.rule_id`,
          `duplicate rule id "${rule_id}" (first at ${earlier.path}${earlier.written ? "" : ", its generated id"})`
        )
        : fail(`${earlier.path}.rule_id`, `rule id "${rule_id}" is also the id the compiler gives ${path}`)
    }
    seen.set(rule_id, { path, written })
    const filled = rule.kind === "approval" ? { ...rule, approver_class: rule.approver_class ?? approver } : rule
    compiled.push(
      { ...filled, rule_id, order: rule.order ?? order, provenance: rule.provenance ?? provenance } as CompiledRule
    )
  }
  const orders = new Set(compiled.map((rule) => rule.order))
  if (orders.size !== compiled.length) return fail("$.rules", "rule orders must be unique")
  const declared = new Map([...seen].map(([id, { path }]) => [id, path]))
  return Either.right(Object.assign(compiled.sort((a, b) => a.order - b.order), { paths: declared }))
}

/** The rule ids a message lists: the first few, then how many more. */
const listed = (ids: ReadonlyArray<string>) =>
  ids.length === 0 ? "none" : ids.length <= 8 ? ids.join(", ") : `${ids.slice(0, 8).join(", ")}, ... (${ids.length})`

const compileGates = (
  policy: PermissionPolicy,
  rules: Rules
): Either.Either<ReadonlyArray<GateBinding>, PolicyValidationError> => {
  const all = rules.map((rule) => rule.rule_id)
  if (policy.gates === undefined) {
    return Either.right([{
      gate_id: "policy",
      adapter_id: "writ.policy",
      level: "hard",
      order: 0,
      tool_ids: ["*"],
      rule_ids: all
    }])
  }
  if (policy.gates.length === 0) {
    return fail("$.gates", "at least one gate must bind the rules (no gate would allow everything)")
  }
  const bound = new Set<string>()
  const ids = new Set<string>()
  const orders = new Set<number>()
  const gates: Array<GateBinding> = []
  for (const [i, gate] of policy.gates.entries()) {
    if (ids.has(gate.gate_id)) return fail(`$.gates.${i}.gate_id`, `duplicate gate id "${gate.gate_id}"`)
    if (orders.has(gate.order)) return fail(`$.gates.${i}.order`, `duplicate gate order ${gate.order}`)
    ids.add(gate.gate_id)
    orders.add(gate.order)
    const rule_ids = gate.rule_ids ?? all
    for (const [j, id] of rule_ids.entries()) {
      if (!rules.paths.has(id)) {
        return fail(
          `$.gates.${i}.rule_ids.${j}`,
          `gate "${gate.gate_id}" references rule "${id}", which does not exist (the rules are ${listed(all)}; ` +
            "a rule without a rule_id is rule-N, N its position)"
        )
      }
      bound.add(id)
    }
    // The default `on_error` is not written: a gate declaring `deny` digests as one that declares nothing.
    const { on_error, ...binding } = gate
    gates.push(on_error === "escalate" ? { ...binding, rule_ids, on_error } : { ...binding, rule_ids })
  }
  // A rule that can apply to no action (an approval of nothing, naming the authority) needs no gate.
  const unbound = rules.find((rule) =>
    !bound.has(rule.rule_id) && !(rule.kind === "approval" && rule.action_patterns.length === 0)
  )?.rule_id
  if (unbound !== undefined) {
    return fail("$.gates", `rule "${unbound}" (declared at ${rules.paths.get(unbound)}) is bound to no gate`)
  }
  return Either.right(gates.sort((a, b) => a.order - b.order))
}

/**
 * The first origin rule bound in a soft or advisory gate, refused at the path `pathOf` gives it: an origin rule is
 * authorization, evaluated before any gate escalates and never lifted by an approval, so only a hard gate holds one.
 */
const misplacedOrigin = (
  { compiled_rules, gate_bindings }: Pick<PolicySnapshot, "compiled_rules" | "gate_bindings">,
  pathOf: (rule_id: string) => string
): PolicyValidationError | undefined => {
  const origins = new Set(compiled_rules.flatMap((rule) => rule.kind === "origin" ? [rule.rule_id] : []))
  for (const gate of gate_bindings) {
    if (gate.level === "hard") continue
    const rule_id = gate.rule_ids.find((id) => origins.has(id))
    if (rule_id === undefined) continue
    return new PolicyValidationError({
      path: pathOf(rule_id),
      detail: `origin rule "${rule_id}" is bound to ${gate.level} gate "${gate.gate_id}": origin rules are ` +
        "authorization, which no approval lifts, and belong in hard gates"
    })
  }
  return undefined
}

/** Whether a stored snapshot may become active: one that binds an origin rule in a soft or advisory gate may not. */
export const activatable = (snapshot: PolicySnapshot): Either.Either<void, PolicyValidationError> => {
  const refused = misplacedOrigin(
    snapshot,
    (rule_id) => `$.compiled_rules.${snapshot.compiled_rules.findIndex((rule) => rule.rule_id === rule_id)}`
  )
  return refused === undefined ? Either.void : Either.left(refused)
}

/** The bound interceptors in id order (so their listing order digests nothing); one id bound twice is refused. */
const compileInterceptors = (
  policy: PermissionPolicy
): Either.Either<ReadonlyArray<InterceptorBinding> | undefined, PolicyValidationError> => {
  if (policy.interceptors === undefined) return Either.right(undefined)
  const seen = new Map<string, number>()
  for (const [i, binding] of policy.interceptors.entries()) {
    const first = seen.get(binding.id)
    if (first !== undefined) {
      return fail(
        `$.interceptors.${i}.id`,
        `interceptor "${binding.id}" is bound twice (first at $.interceptors.${first})`
      )
    }
    seen.set(binding.id, i)
  }
  return Either.right(
    [...policy.interceptors].sort((a, b) => (a.id < b.id ? -1 : 1)).map(({ config_digest, id, version }) => ({
      id,
      version,
      config_digest
    }))
  )
}

/** The opt-ins as compiled: each list sorted and unique, an empty one dropped, none at all undefined. */
export const compileContainment = (
  optIns: ContainmentOptIns | undefined
): ContainmentOptIns | undefined => {
  const sorted = (kinds: ContainmentOptIns["degrade"]) => kinds === undefined ? [] : [...new Set(kinds)].sort()
  const degrade = sorted(optIns?.degrade)
  const remote_claims = sorted(optIns?.remote_claims)
  if (degrade.length === 0 && remote_claims.length === 0) return undefined
  return { ...(degrade.length === 0 ? {} : { degrade }), ...(remote_claims.length === 0 ? {} : { remote_claims }) }
}

/** Compile a declaration into a staged, immutable snapshot with its `sha256-v1` digest. */
export const compile = (
  policy: PermissionPolicy
): Effect.Effect<PolicySnapshot, PolicyValidationError | CanonicalJsonError, Digest.Digest> =>
  Effect.gen(function*() {
    const compiled_rules = yield* compileRules(policy)
    const gate_bindings = yield* compileGates(policy, compiled_rules)
    const misplaced = misplacedOrigin({ compiled_rules, gate_bindings }, (id) => compiled_rules.paths.get(id) ?? "$")
    if (misplaced !== undefined) return yield* Effect.fail(misplaced)
    const interceptors = yield* compileInterceptors(policy)
    const containment = compileContainment(policy.containment)
    const fields = {
      policy_id: policy.policy_id,
      version: policy.version,
      principal_scope: policy.principal_scope,
      tenant_scope: policy.tenant_scope,
      compiled_rules,
      gate_bindings,
      ...(interceptors === undefined ? {} : { interceptors }),
      ...(containment === undefined ? {} : { containment })
    }
    const digest = yield* Digest.canonical(digestInput(fields))
    return immutable(
      PolicySnapshot.make({ ...fields, digest, provenance: policy.provenance, release_state: "staged" })
    )
  })

/** Recompute a snapshot's digest from exactly the digested fields. */
export const recomputeDigest = (snapshot: PolicySnapshot) => Digest.canonical(digestInput(snapshot))

/** A snapshot offered to a store, checked: one whose content does not recompute to its digest (only a hand-built one can) is a defect. */
export const checkDigest = (snapshot: PolicySnapshot): Effect.Effect<void, never, Digest.Digest> =>
  Effect.flatMap(
    Effect.orDie(recomputeDigest(snapshot)),
    (recomputed) =>
      recomputed === snapshot.digest ? Effect.void : Effect.dieMessage(
        `policy ${snapshot.policy_id}@${snapshot.version}: its digest ${snapshot.digest} does not recompute (${recomputed})`
      )
  )
