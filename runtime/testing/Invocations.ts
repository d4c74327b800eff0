/** fast-check arbitraries of calls, contexts, invocation contexts and evaluator inputs, and deterministic test layers. */
import { Effect, Layer } from "effect"
import fc from "fast-check"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import type { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type * as ExecutionContext from "../../core/execution/ExecutionContext.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { DurableRun, EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import type { ExecutionScopeRef } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import type { AgentSubject, AuthorityScope, HumanSubject } from "../../core/policy/InvocationContext.ts"
import type { PolicyInput } from "../../core/policy/PolicyEvaluator.ts"
import {
  addresses,
  agents,
  commands,
  defaultActions,
  EARLIEST,
  effects,
  hosts,
  humans,
  identifier,
  LATEST,
  namespaces,
  paths,
  principals,
  record,
  resources,
  roles,
  servers,
  tenants,
  text,
  timestamp,
  tools,
  urls,
  variables
} from "./internal/pools.ts"

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
