import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor, layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import { ExecutionContext } from "../../core/execution/ExecutionContext.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

let deletes = 0
const actions = [
  Action.make({
    name: "files.delete",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.String,
    effects: ["files.delete"],
    handler: ({ path }) => {
      deletes++
      return `deleted ${path}`
    }
  })
]

const layer = layerPolicyGated().pipe(
  Layer.provideMerge(
    Layer.merge(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer).pipe(Layer.provideMerge(base(actions)))
  )
)

// v1 (looser) allows everything; v2 (the one bound) denies deletes. Both are active.
const installBoth = Effect.gen(function*() {
  const loose = yield* installPolicy({ policy_id: "p", version: "1", mode: "allow_all" })
  const strict = yield* installPolicy({
    policy_id: "p",
    version: "2",
    mode: "allow_all",
    rules: [{ rule_id: "no-delete", kind: "action", effect: "deny", action_patterns: ["files.delete"] }]
  })
  yield* (yield* PolicySnapshotStore).bind({ _tag: "global" }, "p", "2")
  return { loose, strict }
})

const scopeAndRequest = Effect.gen(function*() {
  const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
  const request = ExecutionRequest.make({
    request_id: yield* IdGenerator.uuid,
    action: { name: "files.delete" },
    arguments: { path: "/etc" },
    execution_scope: scope
  })
  return { scope, request }
})

const fields = (scope: EphemeralOperation, policy_snapshot?: PolicySnapshotRef) => ({
  execution_scope: scope,
  authenticated_principal: { id: "alice" },
  effect_backend: InProcessBackend.make.ref,
  ...(policy_snapshot === undefined ? {} : { policy_snapshot })
})

const code = (outcome: { readonly _tag: string }) =>
  `${outcome._tag} ${"reason" in outcome ? (outcome.reason as { code: string }).code : ""}`.trim()

describe("the trusted ingress", () => {
  it.effect("a context built by ExecutionContext.make pinning an older, looser active version is refused, nothing runs", () =>
    Effect.gen(function*() {
      const { loose } = yield* installBoth
      const { request, scope } = yield* scopeAndRequest
      const forged = ExecutionContext.make({ ...fields(scope, loose), context_id: yield* IdGenerator.uuid })
      const before = deletes
      const outcome = yield* (yield* ActionExecutor).execute(request, { context: forged })
      assert.strictEqual(code(outcome), "denied context.untrusted")
      assert.strictEqual(outcome.stage, "resolve")
      assert.strictEqual(deletes, before)
    }).pipe(Effect.provide(layer)))

  it.effect("a decoded or copied context is refused; a minted one's fields cannot be reassigned", () =>
    Effect.gen(function*() {
      const { loose, strict } = yield* installBoth
      const { request, scope } = yield* scopeAndRequest
      const minted = yield* Ingress.resolve(fields(scope))
      assert.isTrue(Ingress.isMinted(minted))
      const decoded = yield* Schema.decodeUnknown(ExecutionContext)(yield* Schema.encode(ExecutionContext)(minted))
      const copied = Object.assign(Object.create(ExecutionContext.prototype), { ...minted, policy_snapshot: loose })
      const executor = yield* ActionExecutor
      const before = deletes
      for (const context of [decoded, copied, { ...minted }]) {
        assert.isFalse(Ingress.isMinted(context))
        assert.strictEqual(code(yield* executor.execute(request, { context })), "denied context.untrusted")
      }
      assert.throws(() => {
        ;(minted as { policy_snapshot: unknown }).policy_snapshot = loose
      })
      assert.throws(() => {
        ;(minted.policy_snapshot as { version: string }).version = "1"
      })
      assert.deepStrictEqual(minted.policy_snapshot, strict)
      assert.strictEqual(deletes, before)
    }).pipe(Effect.provide(layer)))

  it.effect("the ingress resolves the bound active version, so the stricter policy decides", () =>
    Effect.gen(function*() {
      const { strict } = yield* installBoth
      const { request, scope } = yield* scopeAndRequest
      const context = yield* Ingress.resolve(fields(scope))
      assert.deepStrictEqual(context.policy_snapshot, strict)
      const before = deletes
      assert.strictEqual(code(yield* (yield* ActionExecutor).execute(request, { context })), "denied policy.denied")
      assert.strictEqual(deletes, before)
    }).pipe(Effect.provide(layer)))

  it.effect("with nothing bound the ingress mints an unpinned context, which the policy gate denies", () =>
    Effect.gen(function*() {
      const { request, scope } = yield* scopeAndRequest
      const context = yield* Ingress.resolve(fields(scope))
      assert.isUndefined(context.policy_snapshot)
      assert.strictEqual(code(yield* (yield* ActionExecutor).execute(request, { context })), "denied policy.unbound")
    }).pipe(Effect.provide(layer)))
})

describe("Ingress.prepare resolves through the store's bindings", () => {
  it.effect("for the call's tenant: another tenant's looser binding never reaches it; a named snapshot is pinned as named", () =>
    Effect.gen(function*() {
      const { loose, strict } = yield* installBoth
      // Tenant t1 binds the looser version for itself; every other tenant gets the strict global one.
      yield* (yield* PolicySnapshotStore).bind({ _tag: "global", tenant: "t1" }, "p", "1")
      const trust = { principal: "alice", effect_backend: InProcessBackend.make.ref }
      const call = { action: "files.delete", arguments: { path: "/etc" } }
      const pinned = (extra: object) =>
        Effect.map(Ingress.prepare(call, { ...trust, ...extra }), ({ context }) => context.policy_snapshot)
      assert.deepStrictEqual(yield* pinned({ tenant: "t1" }), loose)
      assert.deepStrictEqual(yield* pinned({ tenant: "t2" }), strict)
      assert.deepStrictEqual(yield* pinned({}), strict)
      assert.deepStrictEqual(yield* pinned({ tenant: "t2", policy_snapshot: loose }), loose)
      const before = deletes
      const { context, request } = yield* Ingress.prepare(call, { ...trust, tenant: "t2" })
      assert.strictEqual(code(yield* (yield* ActionExecutor).execute(request, { context })), "denied policy.denied")
      assert.strictEqual(deletes, before)
      // Retired, t1's binding is gone: its calls fall back to the binding for every tenant.
      yield* (yield* PolicySnapshotStore).retire("p", "1", "ops", Time.fromMicros(1))
      assert.deepStrictEqual(yield* pinned({ tenant: "t1" }), strict)
    }).pipe(Effect.provide(layer)))

  it.effect("a malformed authenticated principal or tenant is a ParseError naming it, never a thrown one", () =>
    Effect.gen(function*() {
      yield* installBoth
      yield* (yield* PolicySnapshotStore).bind({ _tag: "global", tenant: "t1" }, "p", "1")
      const call = { action: "files.delete", arguments: { path: "/etc" } }
      const trusts = [{ principal: "" }, { tenant: "" }, { tenant: " t1" }, { tenant: "t".repeat(201) }]
      for (const trust of trusts) {
        const refused = yield* Effect.flip(
          Ingress.prepare(call, { principal: "alice", effect_backend: InProcessBackend.make.ref, ...trust })
        )
        assert.strictEqual(refused._tag, "ParseError", JSON.stringify(trust).slice(0, 60))
        assert.include(refused.message, "[\"id\"]")
      }
    }).pipe(Effect.provide(layer)))
})
