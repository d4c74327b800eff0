import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as IdempotencyStore from "../../core/execution/IdempotencyStore.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import { base } from "../fixtures/layers.ts"

let charges = 0
let open = true
const charge = Action.make({
  name: "card.charge",
  input: Schema.Struct({ cents: Schema.Int }),
  output: Schema.Int,
  handler: () => ++charges
})

let tips = 0
const tip = Action.make({
  name: "card.tip",
  input: Schema.Struct({ amount: Schema.Number }),
  output: Schema.Int,
  handler: () => ++tips
})

const layer = ActionExecutor.layerMinimal({
  interceptors: [
    Interceptor.make("switch", "policy", () => (open ? Interceptor.allow() : Interceptor.deny("policy.denied")))
  ]
}).pipe(Layer.provideMerge(Layer.merge(base([charge]), IdempotencyStore.layerMemory)))

interface Caller {
  readonly tenant?: string
  readonly cents?: number
}

const call = (principal: string, key = "order-1", { cents = 500, tenant }: Caller = {}) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: principal },
      ...(tenant === undefined ? {} : { tenant: { id: tenant } }),
      effect_backend: InProcessBackend.make.ref
    })
    const request = ExecutionRequest.make({
      request_id: yield* IdGenerator.uuid,
      action: { name: "card.charge" },
      arguments: { cents },
      execution_scope: scope,
      idempotency_key: key
    })
    return yield* executor.execute(request, { context })
  })

// No interceptor binds its decisions to a canonical digest, which a float has not: such a call is keyed by the
// arguments' tagged form.
const unevaluated = ActionExecutor.layerMinimal().pipe(
  Layer.provideMerge(Layer.merge(base([tip]), IdempotencyStore.layerMemory))
)

const tipWith = (amount: number) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: "erin" },
      effect_backend: InProcessBackend.make.ref
    })
    const request = ExecutionRequest.make({
      request_id: yield* IdGenerator.uuid,
      action: { name: "card.tip" },
      arguments: { amount },
      execution_scope: scope,
      idempotency_key: "tip-1"
    })
    return yield* executor.execute(request, { context })
  })

const agent = InvocationContext.agent("shop-agent")
const asUser = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  InvocationContext.withInvocation(effect, InvocationContext.user(InvocationContext.human("h"), agent, "alice", {}))
const asSelf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  InvocationContext.withInvocation(effect, InvocationContext.autonomous(agent, "alice", {}))

describe("idempotency partitioned by caller", () => {
  it.effect("the same caller retrying under a fresh context gets the stored result; the handler ran once", () =>
    Effect.gen(function*() {
      const before = charges
      const first = yield* call("alice")
      const retry = yield* call("alice")
      assert.isTrue(first._tag === "succeeded" && retry._tag === "succeeded")
      if (first._tag !== "succeeded" || retry._tag !== "succeeded") return
      assert.strictEqual(retry.result, first.result)
      assert.strictEqual(retry.replay_of, first.attempt_id)
      assert.notStrictEqual(retry.attempt_id, first.attempt_id)
      assert.strictEqual(charges, before + 1)
      yield* call("alice", "order-2")
      assert.strictEqual(charges, before + 2)
    }).pipe(Effect.provide(layer)))

  it.effect("another principal, or the same principal under another origin, never reads the entry", () =>
    Effect.gen(function*() {
      const before = charges
      yield* call("alice")
      yield* call("bob")
      assert.strictEqual(charges, before + 2)
      yield* asUser(call("alice"))
      yield* asUser(call("alice"))
      assert.strictEqual(charges, before + 3)
      yield* asSelf(call("alice"))
      assert.strictEqual(charges, before + 4)
    }).pipe(Effect.provide(layer)))

  it.effect("under one invocation context, another tenant or principal with the same key runs its own call", () =>
    Effect.gen(function*() {
      const before = charges
      const first = yield* asUser(call("alice", "order-9", { tenant: "t1" }))
      const otherTenant = yield* asUser(call("alice", "order-9", { tenant: "t2", cents: 1 }))
      const otherPrincipal = yield* asUser(call("bob", "order-9", { tenant: "t1", cents: 2 }))
      assert.strictEqual(charges, before + 3)
      for (const outcome of [first, otherTenant, otherPrincipal]) {
        assert.isTrue(outcome._tag === "succeeded" && outcome.replay_of === undefined)
      }
      const same = yield* asUser(call("alice", "order-9", { tenant: "t1" }))
      assert.isTrue(same._tag === "succeeded" && same.replay_of === first.attempt_id)
      assert.strictEqual(charges, before + 3)
    }).pipe(Effect.provide(layer)))

  it.effect("a key the same caller reuses with other arguments is refused, naming both digests; nothing runs", () =>
    Effect.gen(function*() {
      const before = charges
      const first = yield* call("dave", "order-3", { cents: 500 })
      const reused = yield* call("dave", "order-3", { cents: 90000 })
      const underOrigin = yield* asUser(call("dave", "order-4", { cents: 500 }))
      const reusedUnderOrigin = yield* asUser(call("dave", "order-4", { cents: 7 }))
      assert.strictEqual(first._tag, "succeeded")
      assert.strictEqual(underOrigin._tag, "succeeded")
      for (const outcome of [reused, reusedUnderOrigin]) {
        assert.strictEqual(outcome._tag, "denied")
        if (outcome._tag !== "denied") return
        assert.strictEqual(outcome.reason.code, "idempotency.key_reused")
        assert.match(outcome.reason.detail ?? "", /arguments [0-9a-f]{64}, not [0-9a-f]{64}$/)
      }
      assert.strictEqual(charges, before + 2)
    }).pipe(Effect.provide(layer)))

  it.effect("arguments canonical JSON refuses (a float) are still bound to the key: replayed, or refused when changed", () =>
    Effect.gen(function*() {
      const first = yield* tipWith(1.5)
      const again = yield* tipWith(1.5)
      const other = yield* tipWith(2.5)
      assert.strictEqual(first._tag, "succeeded")
      assert.isTrue(again._tag === "succeeded" && again.replay_of === first.attempt_id)
      assert.strictEqual(other._tag === "denied" && other.reason.code, "idempotency.key_reused")
      assert.strictEqual(tips, 1)
    }).pipe(Effect.provide(unevaluated)))

  it.effect("unknown contexts get a random partition each", () =>
    Effect.gen(function*() {
      const before = charges
      for (let i = 0; i < 2; i++) {
        const unknown = yield* InvocationContext.unknown("alice")
        yield* InvocationContext.withInvocation(call("alice"), unknown)
      }
      assert.strictEqual(charges, before + 2)
    }).pipe(Effect.provide(layer)))

  it.effect("every hit is re-authorised against current policy", () =>
    Effect.gen(function*() {
      const first = yield* call("carol")
      assert.strictEqual(first._tag, "succeeded")
      open = false
      const retry = yield* call("carol")
      open = true
      assert.strictEqual(retry._tag === "denied" && retry.reason.code, "policy.denied")
    }).pipe(Effect.provide(layer)))
})
