/**
 * writ/testing: fast-check arbitraries for property-based tests of policies and calls (wire-form
 * declarations, requests, context bindings, invocation contexts, evaluator inputs) and deterministic
 * test layers. Runtimes: every one (fast-check and WebCrypto are plain JavaScript).
 */
import { Effect, Either, Layer } from "effect"
import fc from "fast-check"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as WebCryptoDigest from "../adapters/web/WebCryptoDigest.ts"
import type { ActionExecutionBackend } from "../core/action/ActionExecutionBackend.ts"
import { Sha256Hex } from "../core/base/Digest.ts"
import type { Digest } from "../core/base/Digest.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import * as Time from "../core/base/Time.ts"
import type * as ExecutionContext from "../core/execution/ExecutionContext.ts"
import { ExecutionRequest } from "../core/execution/ExecutionRequest.ts"
import { DurableRun, EphemeralOperation } from "../core/execution/ExecutionScope.ts"
import type { ExecutionScopeRef } from "../core/execution/ExecutionScope.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import * as InvocationContext from "../core/policy/InvocationContext.ts"
import type { AgentSubject, AuthorityScope, ExecutionCaller, HumanSubject } from "../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../core/policy/PermissionPolicy.ts"
import type { DeclaredRule, PermissionPolicyEncoded } from "../core/policy/PermissionPolicy.ts"
import type { ChildPolicyEncoded } from "../core/policy/PolicyComposition.ts"
import type { PolicyInput } from "../core/policy/PolicyEvaluator.ts"

type NonEmpty<A> = readonly [A, ...Array<A>]
type WireRule = typeof DeclaredRule.Encoded

// ---------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------

/** The action names arbitraries use when none are given. */
export const defaultActions: ReadonlyArray<string> = [
  "notes.read",
  "notes.write",
  "notes.search",
  "files.read",
  "files.write",
  "files.delete",
  "shell.exec",
  "web.fetch",
  "calc.add"
]

/** The principals (and executor ids) arbitraries draw from. */
export const principals: ReadonlyArray<string> = ["alice", "bob", "team-a", "team-b", "svc-1"]

const principalPatterns = ["*", "alice", "bob", "team-*", "team-a", "svc-*", "*-b"]
const tenants = ["acme", "globex", "initech"]
const tenantPatterns = ["*", "acme", "globex", "*ex*"]
const commandPatterns = ["*", "git *", "git status", "git push *", "ls", "rm", "rm *", "sudo", "make *", "kill"]
const pathPatterns = ["/work/*", "/etc/*", "*.md", "/tmp/*"]
// Strings a YAML or JSON writer must quote or escape to read back unchanged.
const awkward = [
  "null",
  "true",
  "~",
  "0x10",
  "1e3",
  "- x",
  "#x",
  "a: b",
  "'q'",
  "\"q\"",
  "&a",
  "!tag",
  " lead",
  "a\nb",
  "__proto__"
]
const roots = ["/", "/work", "/work/src", "/work/secrets", "/tmp", "/etc"]
const destinations = ["api.example.com:443", "*.example.com:443", "evil.example:80", "*:443", "*"]
const executables = ["git", "ls", "rm", "sudo", "curl", "*", "/usr/bin/*"]
const commands = [
  "git status",
  "git push origin main",
  "ls -la",
  "rm -rf /",
  "sudo ls",
  "/usr/bin/sudo ls",
  "make",
  "kill 1",
  "curl x",
  "ls; rm x",
  "echo $(id)"
]
const paths = [
  "/work/src/a.ts",
  "/work/secrets/key",
  "/work/notes/todo.md",
  "/etc/passwd",
  "/tmp/x",
  "/work/../etc/x",
  "rel"
]
const urls = ["https://api.example.com/v1", "https://x.example.com/", "http://evil.example:80/", "not a url"]
const addresses = ["127.0.0.1:8080", "api.example.com:443", "evil.example:80", "0.0.0.0:22", "no port"]
const hosts = ["api.example.com", "x.example.com", "evil.example", "not a host"]
const effects = [
  "filesystem.read",
  "filesystem.write",
  "filesystem.execute",
  "shell.exec",
  "network.connect",
  "network.listen",
  "network.resolve"
]
// Declared needs, against the mcp, secret_exposure and environment rule pools below.
const servers = ["github", "jira", "gitlab"]
const tools = ["search", "create_issue", "delete_repo"]
const resources = ["repo://writ", "issue://1", "file:///etc/passwd"]
const namespaces = ["github/token", "aws/root", "slack/webhook"]
const variables = ["PATH", "AWS_SECRET_ACCESS_KEY", "TERM"]
const callers: Array<ExecutionCaller> = ["USER", "SELF", "OTHER_AGENT"]
const agents = ["agent-a", "agent-b", "agent-c"]
const humans = ["local-chat", "alice", "bob"]
const roles = ["viewer", "planner", "ops"]

// 2024-01-01 .. 2030-01-01, in microseconds.
const EARLIEST = 1_704_067_200_000_000
const LATEST = 1_893_456_000_000_000

const nonEmpty = <A>(arb: fc.Arbitrary<A>, max = 3): fc.Arbitrary<NonEmpty<A>> =>
  fc.tuple(arb, fc.array(arb, { maxLength: max - 1 })).map(([head, tail]): NonEmpty<A> => [head, ...tail])

const nonEmptyUnique = <A>(values: ReadonlyArray<A>): fc.Arbitrary<NonEmpty<A>> =>
  fc.shuffledSubarray([...values], { minLength: 1 }).map(([head, ...tail]): NonEmpty<A> => [head!, ...tail])

/** Free text that is a valid, trimmed, non-"inherit" string (unicode included). */
const text = (maxLength: number) =>
  fc.string({ unit: "grapheme", minLength: 1, maxLength })
    .filter((s) => s.trim() === s && s.length > 0 && s.toLowerCase() !== "inherit")

/** An Identifier in its decoded (trimmed) form: mostly short ASCII ids, sometimes any text. */
export const identifier: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.stringMatching(/^[a-z][a-z0-9-]{0,11}$/), weight: 4 },
  { arbitrary: text(24), weight: 1 }
)

/** A UTC timestamp with microseconds between 2024 and 2030. */
export const timestamp: fc.Arbitrary<Time.Timestamp> = fc.integer({ min: EARLIEST, max: LATEST }).map(Time.fromMicros)

/** A glob over the given action names: exact names, `*`, `prefix.*` and `*.suffix`. */
export const actionPattern = (actions: ReadonlyArray<string> = defaultActions): fc.Arbitrary<string> => {
  const prefixes = [...new Set(actions.map((a) => a.split(".")[0]!))].map((p) => `${p}.*`)
  const suffixes = [...new Set(actions.flatMap((a) => (a.includes(".") ? [a.slice(a.indexOf(".") + 1)] : [])))]
    .map((s) => `*.${s}`)
  return fc.oneof(
    { arbitrary: fc.constantFrom(...actions), weight: 4 },
    { arbitrary: fc.constant("*"), weight: 1 },
    { arbitrary: fc.constantFrom(...prefixes, ...suffixes), weight: 2 }
  )
}

/** A salient-argument pattern: shell commands, paths, `*`, and occasionally free or awkward text. */
export const operationPattern: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...commandPatterns), weight: 6 },
  { arbitrary: fc.constantFrom(...pathPatterns), weight: 2 },
  { arbitrary: text(16), weight: 1 },
  { arbitrary: fc.constantFrom(...awkward), weight: 1 }
)

// ---------------------------------------------------------------------------------------------
// Declarations
// ---------------------------------------------------------------------------------------------

/** What the declaration arbitraries draw action names from. */
export interface PolicyOptions {
  readonly actions?: ReadonlyArray<string>
}

const allowOrDeny = fc.constantFrom("allow" as const, "deny" as const)
const approverClass = fc.constantFrom("maintainer", "ops", "security")
const record = { noNullPrototype: true } as const

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

// ---------------------------------------------------------------------------------------------
// Calls and contexts
// ---------------------------------------------------------------------------------------------

const uuid = fc.uuid().map((id) => IdGenerator.Uuid.make(id))

/** An execution scope: an ephemeral operation or a durable Run. */
export const executionScope: fc.Arbitrary<ExecutionScopeRef> = fc.oneof(
  uuid.map((scope_id) => EphemeralOperation.make({ scope_id })),
  fc.tuple(uuid, fc.option(uuid, { nil: undefined })).map(([run_id, owner]) =>
    DurableRun.make(owner === undefined ? { run_id } : { run_id, owner_attempt_id: owner })
  )
)

/** Arguments as a model might send them: a shell command, a path, a URL, a listen address, a host, or other values. */
export const callArguments: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.constant({}),
  fc.constantFrom(...commands).map((command) => ({ command })),
  fc.constantFrom(...paths).map((path) => ({ path })),
  fc.constantFrom(...urls).map((url) => ({ url })),
  fc.constantFrom(...addresses).map((address) => ({ address })),
  fc.constantFrom(...hosts).map((host) => ({ host })),
  fc.dictionary(fc.constantFrom("a", "b", "query", "count"), fc.oneof(fc.integer(), text(8), fc.boolean()), record)
)

/** An ExecutionRequest for one of the given action names (untrusted fields included). */
export const executionRequest = (actions: ReadonlyArray<string> = defaultActions): fc.Arbitrary<ExecutionRequest> =>
  fc.record({
    request_id: identifier,
    name: fc.constantFrom(...actions),
    version: identifier,
    arguments: callArguments,
    principal_claim: fc.constantFrom(...principals),
    execution_scope: executionScope,
    session_id: identifier,
    deadline: timestamp,
    idempotency_key: identifier,
    metadata: fc.dictionary(fc.constantFrom("trace", "source"), text(8), record)
  }, { ...record, requiredKeys: ["request_id", "name", "arguments", "execution_scope"] }).map((
    { name, principal_claim, version, ...fields }
  ) =>
    ExecutionRequest.make({
      ...fields,
      action: version === undefined ? { name } : { name, version },
      ...(principal_claim === undefined ? {} : { principal_claim: { id: principal_claim } })
    })
  )

/** What a trusted ingress authenticated (ExecutionContext.Binding): scope, principal, tenant, pinned policy, backend. */
export const binding: fc.Arbitrary<ExecutionContext.Binding> = fc.record({
  execution_scope: executionScope,
  principal: fc.constantFrom(...principals),
  tenant: fc.constantFrom(...tenants),
  policy_snapshot: fc.record({
    policy_id: identifier,
    version: identifier,
    digest: fc.stringMatching(/^[0-9a-f]{64}$/).map((hex) => Sha256Hex.make(hex))
  }, record),
  backend: fc.constant(InProcessBackend.make.ref),
  authentication_evidence: fc.array(identifier, { maxLength: 2 })
}, { ...record, requiredKeys: ["execution_scope", "principal", "backend"] }).map((
  { backend, principal, tenant, ...fields }
): ExecutionContext.Binding => ({
  ...fields,
  authenticated_principal: { id: principal },
  effect_backend: backend,
  ...(tenant === undefined ? {} : { tenant: { id: tenant } })
}))

// A test ingress: it mints the context for a binding under the context id it is given.
const mintedWith = (binding: ExecutionContext.Binding, context_id: IdGenerator.Uuid) =>
  Effect.runSync(Effect.provideService(Ingress.bind(binding), IdGenerator.IdGenerator, {
    uuid: Effect.succeed(context_id)
  }))

/** An ExecutionContext a test ingress minted for a binding (so the executor runs it), with a context id. */
export const executionContext: fc.Arbitrary<ExecutionContext.ExecutionContext> = fc.tuple(binding, uuid).map((
  [fields, context_id]
) => mintedWith(fields, context_id))

// ---------------------------------------------------------------------------------------------
// Invocation contexts
// ---------------------------------------------------------------------------------------------

/** How to build an invocation context: one host ingress factory, or a delegation from another recipe. */
export type InvocationRecipe =
  | {
    readonly _tag: "user"
    readonly human: HumanSubject
    readonly agent: AgentSubject
    readonly executorId: string
    readonly authority: AuthorityScope
  }
  | {
    readonly _tag: "autonomous"
    readonly agent: AgentSubject
    readonly executorId: string
    readonly authority: AuthorityScope
  }
  | {
    readonly _tag: "otherAgent"
    readonly caller: AgentSubject
    readonly agent: AgentSubject
    readonly executorId: string
    readonly authority: AuthorityScope
  }
  | { readonly _tag: "unknown"; readonly executorId: string }
  | {
    readonly _tag: "delegated"
    readonly from: InvocationRecipe
    readonly agent: AgentSubject
    readonly executorId: string
    readonly authority: AuthorityScope
  }

/** An authority scope: mostly unbounded, sometimes bounded by expiry, action types or target systems. */
export const authorityScope = (actions: ReadonlyArray<string> = defaultActions): fc.Arbitrary<AuthorityScope> =>
  fc.oneof(
    { arbitrary: fc.constant({}), weight: 3 },
    {
      arbitrary: fc.record({
        expires_at: timestamp,
        action_types: fc.subarray([...actions]),
        target_systems: fc.subarray(["github", "jira"])
      }, { ...record, requiredKeys: [] }),
      weight: 1
    }
  )

// Subjects are validated on construction, which is slow next to generation: build every one once.
const roleSets = roles.reduce<Array<Array<string>>>((sets, role) => [...sets, ...sets.map((set) => [...set, role])], [
  []
])
const agentSubject = fc.constantFrom(...agents.flatMap((id) => roleSets.map((r) => InvocationContext.agent(id, r))))
const humanSubject = fc.constantFrom(...humans.flatMap((id) => roleSets.map((r) => InvocationContext.human(id, r))))
const executorId = fc.constantFrom(...principals)

/** A recipe for an invocation context of any origin (user, autonomous, other agent, unknown), delegated up to `depth` times. */
export const invocationRecipe = (
  options: { readonly actions?: ReadonlyArray<string>; readonly depth?: number } = {}
): fc.Arbitrary<InvocationRecipe> => {
  const authority = authorityScope(options.actions)
  const root: fc.Arbitrary<InvocationRecipe> = fc.oneof(
    fc.record({ _tag: fc.constant("user"), human: humanSubject, agent: agentSubject, executorId, authority }, record),
    fc.record({ _tag: fc.constant("autonomous"), agent: agentSubject, executorId, authority }, record),
    fc.record(
      { _tag: fc.constant("otherAgent"), caller: agentSubject, agent: agentSubject, executorId, authority },
      record
    ),
    fc.record({ _tag: fc.constant("unknown"), executorId }, record)
  )
  const hop = fc.tuple(agentSubject, executorId, authority)
  return fc.tuple(root, fc.array(hop, { maxLength: options.depth ?? 2 })).map(([start, hops]) =>
    hops.reduce<InvocationRecipe>(
      (from, [agent, executorId, authority]) => ({ _tag: "delegated", from, agent, executorId, authority }),
      start
    )
  )
}

/** Build the context a recipe describes, through the host factories (an unknown origin draws its partition from IdGenerator). */
export const buildInvocation = (
  recipe: InvocationRecipe
): Effect.Effect<InvocationContext.InvocationContext, never, IdGenerator.IdGenerator> => {
  switch (recipe._tag) {
    case "user":
      return Effect.sync(() => InvocationContext.user(recipe.human, recipe.agent, recipe.executorId, recipe.authority))
    case "autonomous":
      return Effect.sync(() => InvocationContext.autonomous(recipe.agent, recipe.executorId, recipe.authority))
    case "otherAgent":
      return Effect.sync(() =>
        InvocationContext.otherAgent(recipe.caller, recipe.agent, recipe.executorId, recipe.authority)
      )
    case "unknown":
      return InvocationContext.unknown(recipe.executorId)
    case "delegated":
      return Effect.map(
        buildInvocation(recipe.from),
        (from) => InvocationContext.delegateTo(from, recipe.agent, recipe.executorId, recipe.authority)
      )
  }
}

/** An invocation context of any origin, built from a recipe (an unknown origin's partition id is generated too). */
export const invocationContext = (
  options: { readonly actions?: ReadonlyArray<string>; readonly depth?: number } = {}
): fc.Arbitrary<InvocationContext.InvocationContext> =>
  fc.tuple(invocationRecipe(options), uuid).map(([recipe, partition]) =>
    Effect.runSync(
      Effect.provideService(buildInvocation(recipe), IdGenerator.IdGenerator, { uuid: Effect.succeed(partition) })
    )
  )

// ---------------------------------------------------------------------------------------------
// Evaluator inputs
// ---------------------------------------------------------------------------------------------

/** A PolicyInput for core/policy/PolicyEvaluator.ts over the given action names: aliases, arguments, effects, declared
 * MCP tool, secrets and environment variables, principal, origin, time. */
export const policyInput = (actions: ReadonlyArray<string> = defaultActions): fc.Arbitrary<PolicyInput> =>
  fc.record({
    action: fc.constantFrom(...actions),
    aliases: fc.subarray([...actions], { maxLength: Math.min(2, actions.length) }),
    effects: fc.subarray(effects),
    arguments: callArguments,
    mcp: fc.record({
      server: fc.constantFrom(...servers),
      tool: fc.constantFrom(...tools),
      resources: fc.subarray(resources, { maxLength: 2 })
    }, record),
    secrets: fc.uniqueArray(
      fc.record({
        namespace: fc.constantFrom(...namespaces),
        exposure: fc.constantFrom("reference_only" as const, "inject" as const)
      }, record),
      { minLength: 1, maxLength: 2, selector: (need) => need.namespace }
    ),
    environment: fc.uniqueArray(
      fc.record({
        variable: fc.constantFrom(...variables),
        exposure: fc.constantFrom("read" as const, "inject" as const)
      }, record),
      { minLength: 1, maxLength: 2, selector: (need) => need.variable }
    ),
    principal: fc.constantFrom(...principals),
    tenant: fc.constantFrom(...tenants),
    invocation: invocationContext({ actions }),
    bound_agent: agentSubject,
    now: fc.oneof(fc.constant(0), fc.integer({ min: EARLIEST, max: LATEST }))
  }, { ...record, requiredKeys: ["action", "effects", "arguments", "principal", "now"] })

// ---------------------------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------------------------

/** Deterministic test services: ids seeded by `seed`, WebCrypto digests, the in-process backend. */
export const layerTest = (
  seed: number | string
): Layer.Layer<IdGenerator.IdGenerator | Digest | ActionExecutionBackend> =>
  Layer.mergeAll(IdGenerator.layerSeeded(seed), WebCryptoDigest.layer, InProcessBackend.layer)
