/**
 * Composing a child declaration with its captured parent. Unset child fields inherit the parent's;
 * the composed declaration keeps the parent's rules in the parent's gates and the child's rules in
 * gates of their own, so a call is allowed only when the parent alone and the child alone allow it
 * (deny dominates, the child only narrows), and it compiles to one snapshot with one digest. A child
 * that would widen its parent fails unless a named authority is given, which is then recorded.
 */
import { Effect, Either, Option, Predicate, Schema } from "effect"
import * as Absence from "../base/Absence.ts"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import type { Digest } from "../base/Digest.ts"
import { Identifier } from "../base/Refs.ts"
import { type Widening, widenings } from "./internal/widening.ts"
import * as PermissionPolicy from "./PermissionPolicy.ts"
import { DeclaredRule, PolicyValidationError } from "./PermissionPolicy.ts"
import type { CompiledRule, GateBinding, InterceptorBinding } from "./PolicyRule.ts"
import { Pattern } from "./PolicyRule.ts"
import * as PolicySnapshot from "./PolicySnapshot.ts"

// ---------------------------------------------------------------------------------------------
// The child declaration
// ---------------------------------------------------------------------------------------------

/**
 * A field the wire form omits to inherit: a missing (or `undefined`, as PermissionPolicy reads it) key
 * decodes to Unset, and Unset encodes to a missing key.
 */
const inheritable = <A, I>(schema: Schema.Schema<A, I>) =>
  Schema.optionalToRequired(Schema.UndefinedOr(schema), Absence.settable(Schema.typeSchema(schema)), {
    decode: (value): A | Absence.Unset => {
      const present = Option.getOrUndefined(value)
      return present === undefined ? Absence.Unset : present
    },
    encode: (value) => (Absence.isUnset(value) ? Option.none() : Option.some(value))
  })

/** A child declaration: a PermissionPolicy whose scopes, approver class and rules may be left Unset (omitted) to inherit. */
export const ChildPolicy = Schema.Struct({
  ...PermissionPolicy.PermissionPolicy.fields,
  principal_scope: inheritable(Schema.NonEmptyArray(Pattern)),
  tenant_scope: inheritable(Schema.NonEmptyArray(Pattern)),
  // `null` is "explicitly none": the child drops the parent's approver, so its escalations deny.
  approver_class: inheritable(Schema.NullOr(Identifier)),
  rules: inheritable(Schema.Array(DeclaredRule))
})

/** A child declaration. */
export type ChildPolicy = typeof ChildPolicy.Type

/** A child declaration's wire form (YAML or JSON): an omitted inheritable field inherits. */
export type ChildPolicyEncoded = typeof ChildPolicy.Encoded

/** The fields a child may leave Unset. */
export const inheritableFields = ["principal_scope", "tenant_scope", "approver_class", "rules"] as const

const isInheritable = (key: string | undefined) =>
  (inheritableFields as ReadonlyArray<string | undefined>).includes(key)

/** The first string value that spells "inherit" (a sentinel is never a string), with its path. */
const findInherit = (value: unknown, path: string): string | undefined => {
  if (typeof value === "string") return value.trim().toLowerCase() === "inherit" ? path : undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findInherit(value[i], `${path}.${i}`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (Predicate.isObject(value)) {
    for (const [key, child] of Object.entries(value)) {
      const found = findInherit(child, `${path}.${key}`)
      if (found !== undefined) return found
    }
  }
  return undefined
}

const strict = { onExcessProperty: "error", errors: "first" } as const
const decodeChildEither = Schema.decodeUnknownEither(ChildPolicy, strict)

const validationError = PermissionPolicy.validationError

/** Validate a parsed mapping into a child declaration; a literal "inherit" anywhere is rejected with its path. */
export const decodeChild = (input: unknown): Either.Either<ChildPolicy, PolicyValidationError> => {
  const inherit = findInherit(input, "$")
  if (inherit !== undefined) {
    return Either.left(
      new PolicyValidationError({
        path: inherit,
        detail: isInheritable(inherit.split(".")[1])
          ? "\"inherit\" is not a value (a literal \"inherit\" is not a preset): omit the field to inherit it"
          : "\"inherit\" is not a value (a literal \"inherit\" is not a preset), and this field is never inherited"
      })
    )
  }
  return Either.mapLeft(decodeChildEither(input), validationError)
}

/** A child declaration's wire form: Unset fields are omitted, `null` is kept. */
export const encodeChild: (child: ChildPolicy) => ChildPolicyEncoded = Schema.encodeSync(ChildPolicy)

/** Resolve every Unset field against the captured parent; the result is proved free of Unset (else the error names it). */
export const resolve = (
  parent: PermissionPolicy.PermissionPolicy,
  child: ChildPolicy
): Either.Either<PermissionPolicy.PermissionPolicy, Absence.UnresolvedFieldError> => {
  const { approver_class, principal_scope, rules, tenant_scope, ...own } = child
  const approver = Absence.resolve<string | null | undefined>(approver_class, parent.approver_class)
  return Absence.strictSnapshot<PermissionPolicy.PermissionPolicy>({
    ...own,
    principal_scope: Absence.resolve(principal_scope, parent.principal_scope),
    tenant_scope: Absence.resolve(tenant_scope, parent.tenant_scope),
    rules: Absence.resolve(rules, parent.rules),
    ...(approver === null || approver === undefined ? {} : { approver_class: approver })
  })
}

export type {
  /** The executor's verdict on one input over every gate of a snapshot, with the gate and rules behind it. */
  Verdict,
  /** One way a child widens its parent: where, and a witness. */
  Widening
} from "./internal/widening.ts"

export {
  /** A decision function over a snapshot: PolicyGate's own reduction, annotated with the deciding gate and rules. */
  decider,
  /** Whether every value `inner` matches is also matched by `outer` (`*` globs); sound, not complete. */
  patternCovers,
  /** The index of the first pattern of `inner` that no pattern of `outer` covers, or -1. */
  uncoveredPattern,
  /** The ways a (resolved) child widens its parent: uncovered scope patterns, then sampled calls only the child allows. */
  widenings
} from "./internal/widening.ts"

export {
  /** Witness calls for a set of compiled rules: every action and argument their patterns name, at every expiry edge. */
  witnesses
} from "./internal/witnesses.ts"

// ---------------------------------------------------------------------------------------------
// Composition
// ---------------------------------------------------------------------------------------------

/** How to compose: a named authority lets the child widen its parent, and is recorded. */
export interface ComposeOptions {
  readonly widening?: { readonly authority: string }
}

/** A composition: the composed declaration and its one snapshot, the two sides it came from, and any widening. */
export interface Composition {
  readonly declaration: PermissionPolicy.PermissionPolicy
  readonly snapshot: PolicySnapshot.PolicySnapshot
  readonly parent: PolicySnapshot.PolicySnapshot
  readonly child: PolicySnapshot.PolicySnapshot
  readonly widenings: ReadonlyArray<Widening>
}

const label = (policy: PermissionPolicy.PermissionPolicy) => `${policy.policy_id}@${policy.version}`

/** Grants a widening authority copies into the parent's gates: allows that lift a default deny, never a deny rule. */
const GRANTS: ReadonlyArray<CompiledRule["kind"]> = [
  "action",
  "filesystem",
  "network",
  "subprocess",
  "mcp",
  "secret_exposure",
  "environment"
]
const isGrant = (rule: CompiledRule) =>
  GRANTS.includes(rule.kind) && rule.effect === "allow" && !("exposure" in rule && rule.exposure === "forbid")

const side = (
  name: "parent" | "child",
  declaration: PermissionPolicy.PermissionPolicy,
  snapshot: PolicySnapshot.PolicySnapshot,
  firstGateOrder: number
) => {
  const rules = snapshot.compiled_rules.map((rule): CompiledRule => ({
    ...rule,
    rule_id: `${name}.${rule.rule_id}`,
    provenance: `${name}:${label(declaration)} (${rule.provenance})`
  }))
  const gates = snapshot.gate_bindings.map((gate, i): GateBinding => ({
    ...gate,
    gate_id: declaration.gates === undefined ? name : `${name}.${gate.gate_id}`,
    order: firstGateOrder + i,
    rule_ids: gate.rule_ids.map((id) => `${name}.${id}`)
  }))
  return { rules, gates }
}

// The interceptors both sides bind, by exact identity: binding one is executable policy, which a child only narrows.
const boundByBoth = (parent: PolicySnapshot.PolicySnapshot, child: PolicySnapshot.PolicySnapshot) => {
  if (parent.interceptors === undefined && child.interceptors === undefined) return {}
  const same = (a: InterceptorBinding, b: InterceptorBinding) =>
    a.id === b.id && a.version === b.version && a.config_digest === b.config_digest
  return {
    interceptors: (parent.interceptors ?? []).filter((bound) => (child.interceptors ?? []).some((b) => same(bound, b)))
  }
}

// The containment opt-ins both sides make: going without containment is a widening, which a child only narrows.
const optedByBoth = (parent: PolicySnapshot.PolicySnapshot, child: PolicySnapshot.PolicySnapshot) => {
  const both = (key: "degrade" | "remote_claims") =>
    (parent.containment?.[key] ?? []).filter((kind) => (child.containment?.[key] ?? []).includes(kind))
  const containment = PolicySnapshot.compileContainment({
    degrade: both("degrade"),
    remote_claims: both("remote_claims")
  })
  return containment === undefined ? {} : { containment }
}

const composedDeclaration = (
  parent: PermissionPolicy.PermissionPolicy,
  parentSnapshot: PolicySnapshot.PolicySnapshot,
  child: PermissionPolicy.PermissionPolicy,
  childSnapshot: PolicySnapshot.PolicySnapshot,
  authority: string | undefined
): Either.Either<PermissionPolicy.PermissionPolicy, PolicyValidationError> => {
  const fromParent = side("parent", parent, parentSnapshot, 0)
  const fromChild = side("child", child, childSnapshot, fromParent.gates.length)
  const grants = authority === undefined ? [] : childSnapshot.compiled_rules.filter(isGrant)
  // A grant goes to the parent gates that already hold rules of its kind (every gate, for an action grant).
  const bindings = new Map<string, Array<string>>()
  const parentGates = fromParent.gates.map((gate) => {
    const bound = new Set(gate.rule_ids)
    const kinds = new Set(fromParent.rules.filter((rule) => bound.has(rule.rule_id)).map((rule) => rule.kind))
    const extra = grants
      .filter((rule) => rule.kind === "action" || kinds.has(rule.kind))
      .map((rule) => `widened.${rule.rule_id}`)
    extra.forEach((id) => bindings.set(id, [...(bindings.get(id) ?? []), gate.gate_id]))
    return { ...gate, rule_ids: [...gate.rule_ids, ...extra] }
  })
  const widened = grants
    .filter((rule) => bindings.has(`widened.${rule.rule_id}`))
    .map((rule): CompiledRule => ({
      ...rule,
      rule_id: `widened.${rule.rule_id}`,
      provenance: `widened by ${authority}: child:${label(child)} (${rule.provenance})`
    }))
  // A side whose gates cover only some tools denies every other tool (policy.no_gate_binding); a hard
  // coverage gate over every tool keeps that refusal in the conjunction.
  const coverage = ([["parent", fromParent, parent], ["child", fromChild, child]] as const).flatMap(
    ([name, built, policy], i) => {
      const tools = [...new Set(built.gates.flatMap((gate) => gate.tool_ids))]
      if (tools.includes("*")) return []
      const rule_id = `${name}.coverage`
      const rule = {
        kind: "action",
        effect: "allow",
        rule_id,
        order: 0,
        action_patterns: tools as unknown as readonly [string, ...Array<string>],
        operations: ["*"],
        provenance: `${name}:${label(policy)} (gate coverage)`
      } satisfies CompiledRule
      const gate = {
        gate_id: rule_id,
        adapter_id: "writ.policy",
        level: "hard",
        order: fromParent.gates.length + fromChild.gates.length + i,
        tool_ids: ["*"],
        rule_ids: [rule_id]
      } as const
      return [{ rule, gate }]
    }
  )
  const sides = `parent:${label(parent)} + child:${label(child)}`
  const candidate: PermissionPolicy.PermissionPolicyEncoded = {
    policy_id: child.policy_id,
    version: child.version,
    principal_scope: child.principal_scope,
    tenant_scope: child.tenant_scope,
    mode: "rules",
    ...(child.approver_class === undefined ? {} : { approver_class: child.approver_class }),
    // Rules are listed in compiled order with `order` left to the compiler, which assigns the same positions;
    // a grandchild that inherits these rules and adds its own then never collides with them.
    rules: [...fromParent.rules, ...fromChild.rules, ...widened, ...coverage.map((c) => c.rule)].map((
      { order: _order, ...rule }
    ) => rule),
    gates: [...parentGates, ...fromChild.gates, ...coverage.map((c) => c.gate)],
    ...boundByBoth(parentSnapshot, childSnapshot),
    ...optedByBoth(parentSnapshot, childSnapshot),
    provenance: {
      source: authority === undefined ? `composed ${sides}` : `widened by ${authority}: composed ${sides}`,
      ...(child.provenance.author === undefined ? {} : { author: child.provenance.author })
    }
  }
  return Either.mapLeft(
    PermissionPolicy.decode(candidate),
    (error) => new PolicyValidationError({ path: error.path, detail: `${error.detail} (in the composed declaration)` })
  )
}

const validAuthority = Schema.decodeUnknownEither(Identifier)

/**
 * Compose a child with its captured parent: resolve the child's Unset fields, refuse any widening
 * unless `widening.authority` names who allowed it, and compile the conjunction (parent gates, then
 * child gates, all levels kept) into one snapshot.
 */
export const compose = Effect.fn("PolicyComposition.compose")(function*(
  parent: PermissionPolicy.PermissionPolicy,
  child: ChildPolicy,
  options: ComposeOptions = {}
): Effect.fn.Return<
  Composition,
  PolicyValidationError | Absence.UnresolvedFieldError | CanonicalJsonError,
  Digest
> {
  let authority: string | undefined
  if (options.widening !== undefined) {
    const decoded = validAuthority(options.widening.authority)
    if (Either.isLeft(decoded)) {
      return yield* new PolicyValidationError({
        path: "widening.authority",
        detail: "a widening authority is a non-empty identifier"
      })
    }
    authority = decoded.right
  }
  const resolved = yield* resolve(parent, child)
  const parentSnapshot = yield* PolicySnapshot.compile(parent)
  const childSnapshot = yield* PolicySnapshot.compile(resolved)
  const found = widenings(parentSnapshot, childSnapshot, resolved)
  if (authority === undefined && found.length > 0) {
    const [first] = found
    return yield* new PolicyValidationError({
      path: first!.path,
      detail: `widens the parent ${label(parent)}: ${first!.detail}; a child may only narrow its parent ` +
        `unless a named authority allows the widening`
    })
  }
  const declaration = yield* composedDeclaration(parent, parentSnapshot, resolved, childSnapshot, authority)
  const snapshot = yield* PolicySnapshot.compile(declaration)
  return { declaration, snapshot, parent: parentSnapshot, child: childSnapshot, widenings: found }
})
