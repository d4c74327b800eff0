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
import * as Time from "../base/Time.ts"
import type * as Interceptor from "../execution/Interceptor.ts"
import * as PermissionPolicy from "./PermissionPolicy.ts"
import { DeclaredRule, PolicyValidationError } from "./PermissionPolicy.ts"
import type { PolicyInput } from "./PolicyEvaluator.ts"
import * as PolicyEvaluator from "./PolicyEvaluator.ts"
import * as PolicyGate from "./PolicyGate.ts"
import type { CompiledRule, GateBinding } from "./PolicyRule.ts"
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

// ---------------------------------------------------------------------------------------------
// Deciding over every gate
// ---------------------------------------------------------------------------------------------

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

const instances = (pattern: string): ReadonlyArray<string> =>
  pattern.includes("*") ? [pattern.replaceAll("*", ""), pattern.replaceAll("*", "x")] : [pattern]

const FS_EFFECTS = [["filesystem.read"], ["filesystem.write"], ["filesystem.execute"]] as const

/** Witness calls for two snapshots: every action and argument their patterns name, instantiated, at every expiry edge. */
function* samples(rules: ReadonlyArray<CompiledRule>): Generator<PolicyInput> {
  const actions = new Set<string>(["writ.sample"])
  const operations = new Set<string>()
  const commands = new Set<string>()
  const paths = new Set<string>()
  const urls = new Set<string>()
  const listens = new Set<string>()
  const hosts = new Set<string>()
  const mcp = { servers: new Set<string>(), tools: new Set<string>(["writ.sample"]), resources: new Set<string>() }
  const exposures: Array<Pick<PolicyInput, "secrets" | "environment">> = []
  const nows = new Set<number>([0])
  for (const rule of rules) {
    if ("action_patterns" in rule) {
      for (const p of rule.action_patterns) for (const a of instances(p)) actions.add(a)
    }
    if (rule.kind === "action" || rule.kind === "approval") {
      for (const p of rule.operations) for (const o of instances(p)) operations.add(o)
    }
    if (rule.kind === "subprocess") {
      for (const p of rule.executable_patterns) {
        for (const e of instances(p)) [e, `${e} x`].forEach((c) => commands.add(c))
      }
    }
    if (rule.kind === "filesystem") {
      for (const r of rule.roots) {
        for (const p of instances(r)) [p, `${p}/x`].forEach((x) => paths.add(x))
      }
    }
    if (rule.kind === "network") {
      for (const d of rule.destinations) {
        for (const instance of instances(d)) {
          const colon = instance.lastIndexOf(":")
          const host = instance.slice(0, colon)
          const port = instance.slice(colon + 1)
          if (colon > 0 && /^\d+$/.test(port)) {
            urls.add(`https://${host}:${port}/`)
            listens.add(instance)
          }
          hosts.add(colon > 0 ? host : instance)
        }
      }
    }
    if (rule.kind === "mcp") {
      for (const p of rule.server_patterns) for (const x of instances(p)) mcp.servers.add(x)
      for (const p of rule.tool_patterns) for (const x of instances(p)) mcp.tools.add(x)
      for (const p of rule.resource_patterns) for (const x of instances(p)) mcp.resources.add(x)
    }
    if (rule.kind === "secret_exposure") {
      for (const p of rule.secret_namespaces) {
        for (const namespace of instances(p)) {
          exposures.push({ secrets: [{ namespace, exposure: "reference_only" }] })
          exposures.push({ secrets: [{ namespace, exposure: "inject" }] })
        }
      }
    }
    if (rule.kind === "environment") {
      for (const p of rule.variable_patterns) {
        for (const variable of instances(p)) {
          exposures.push({ environment: [{ variable, exposure: "read" }] })
          exposures.push({ environment: [{ variable, exposure: "inject" }] })
        }
      }
    }
    // Windows are [not_before, expires_at): 0 and every bound represent every cell between bounds.
    if (rule.kind === "expiry") {
      for (const t of [rule.not_before, rule.expires_at]) if (t !== undefined) nows.add(Time.toMicros(t))
    }
  }
  const targets: Array<Pick<PolicyInput, "effects" | "arguments" | "mcp" | "secrets" | "environment">> = [
    { effects: [], arguments: {} }
  ]
  for (const o of operations) {
    targets.push({ effects: [], arguments: { command: o } })
    if (o.startsWith("/")) paths.add(o)
  }
  for (const c of commands) targets.push({ effects: [], arguments: { command: c } })
  for (const p of paths) {
    targets.push({ effects: [], arguments: { path: p } })
    for (const effects of FS_EFFECTS) targets.push({ effects, arguments: { path: p } })
  }
  for (const url of urls) targets.push({ effects: [], arguments: { url } })
  for (const address of listens) targets.push({ effects: ["network.listen"], arguments: { address } })
  for (const host of hosts) targets.push({ effects: ["network.resolve"], arguments: { host } })
  for (const server of mcp.servers) {
    for (const tool of mcp.tools) {
      targets.push({ effects: [], arguments: {}, mcp: { server, tool, resources: [] } })
      for (const r of mcp.resources) targets.push({ effects: [], arguments: {}, mcp: { server, tool, resources: [r] } })
    }
  }
  for (const exposure of exposures) targets.push({ effects: [], arguments: {}, ...exposure })
  for (const now of nows) {
    for (const action of actions) {
      for (const target of targets) yield { action, principal: "writ.sample", now, ...target }
    }
  }
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
  PolicySnapshot.PolicySnapshot.make({ ...snapshot, principal_scope: ["*"], tenant_scope: ["*"] })

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
  for (const input of samples([...parent.compiled_rules, ...child.compiled_rules])) {
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
