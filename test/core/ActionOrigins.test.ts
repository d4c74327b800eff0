import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import type { AuthorityScope } from "../../core/policy/InvocationContext.ts"
import * as Invocation from "../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base, call, run } from "../fixtures/layers.ts"

const agentA = Invocation.agent("agent-a")
const agentB = Invocation.agent("agent-b")
const open: AuthorityScope = {}
const user = Invocation.user(Invocation.human("carol"), agentA, "alice", open)
const self = Invocation.autonomous(agentA, "alice", open)
const delegated = Invocation.otherAgent(agentB, agentA, "alice", open)

const calls = { count: 0 }
const action = (name: string, origins?: ReadonlyArray<Invocation.ExecutionCaller>) =>
  Action.make({
    name,
    input: Schema.Struct({}),
    output: Schema.Void,
    ...(origins === undefined ? {} : { origins }),
    handler: () => {
      calls.count++
    }
  })
const actions = [
  action("notes.free"),
  action("notes.user", ["USER"]),
  action("notes.nobody", []),
  action("notes.agents", ["SELF", "OTHER_AGENT"])
]

const codeOf = (name: string, invocation?: Invocation.InvocationContext) =>
  Effect.map(
    invocation === undefined ? run(name, {}) : Invocation.withInvocation(run(name, {}), invocation),
    (outcome) => outcome._tag === "denied" ? outcome.reason.code : outcome._tag
  )

describe("origins declared on the action itself", () => {
  it.effect("are enforced by the executor at stage 5, with no policy configured; absent adds no restriction", () =>
    Effect.gen(function*() {
      const before = calls.count
      assert.deepStrictEqual([
        yield* codeOf("notes.free"),
        yield* codeOf("notes.user", user),
        yield* codeOf("notes.user", self),
        yield* codeOf("notes.user"),
        yield* codeOf("notes.nobody", user),
        yield* codeOf("notes.agents", delegated)
      ], ["succeeded", "succeeded", "origin.not_allowed", "origin.unknown", "origin.not_allowed", "succeeded"])
      assert.strictEqual(calls.count, before + 3)
      const plan = yield* Effect.flatMap(
        ActionExecutor.ActionExecutor,
        (executor) => executor.plan({ name: "notes.user" })
      )
      assert.deepStrictEqual(plan.stages.find((stage) => stage.stage === "authorise")!.evaluators, ["action.origins"])
      assert.deepStrictEqual(plan.action.origins, ["USER"])
    }).pipe(
      Effect.provide(ActionExecutor.layerMinimal({ boundAgent: agentA }).pipe(Layer.provideMerge(base(actions))))
    ))

  it.effect("require the invocation's agent to be the executor's bound agent", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* codeOf("notes.user", user), "origin.agent_mismatch")
    }).pipe(
      Effect.provide(ActionExecutor.layerMinimal({ boundAgent: agentB }).pipe(Layer.provideMerge(base(actions))))
    ))

  it.effect("intersect with the policy's origin rules: both must allow", () =>
    Effect.gen(function*() {
      const policy = Either.getOrThrow(PermissionPolicy.decode({
        policy_id: "o",
        version: "1",
        allow: { "notes.*": ["*"] },
        rules: [{ kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] }]
      }))
      const snapshot = yield* Effect.orDie(PolicySnapshot.compile(policy))
      const store = yield* PolicySnapshotStore
      yield* store.put(snapshot)
      yield* store.activate("o", "1", "ops", Time.fromMicros(0))
      const executor = yield* ActionExecutor.ActionExecutor
      const codes = []
      for (const invocation of [user, self, delegated]) {
        const { request } = yield* call("notes.agents", {})
        const context = yield* Ingress.bind({
          execution_scope: request.execution_scope,
          authenticated_principal: { id: "alice" },
          effect_backend: InProcessBackend.make.ref,
          policy_snapshot: { policy_id: "o", version: "1", digest: snapshot.digest }
        })
        const outcome = yield* Invocation.withInvocation(executor.execute(request, { context }), invocation)
        codes.push(outcome._tag === "denied" ? outcome.reason.code : outcome._tag)
      }
      // The action allows SELF and OTHER_AGENT, the policy USER and OTHER_AGENT: only OTHER_AGENT passes both.
      assert.deepStrictEqual(codes, ["origin.not_allowed", "origin.not_allowed", "succeeded"])
    }).pipe(
      Effect.provide(
        ActionExecutor.layerPolicyGated({}, { boundAgent: agentA }).pipe(
          Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base(actions))))
        )
      )
    ))
})
