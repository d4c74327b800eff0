/**
 * Hostile arguments handed to the executor as values: nested thousands of levels deep, larger than the size limit, or
 * carrying a `__proto__` key. Each is denied at stage 2 with its typed code before anything decodes, digests or runs it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Schema, Stream } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import type * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { ActionExecutor as ActionExecutorTag } from "../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import { makeCounter } from "../fixtures/actions.ts"
import { executor, governedInMemory, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const counter = makeCounter()

const actions = [
  Action.make({
    name: "data.echo",
    input: Schema.Struct({ data: Schema.Unknown }),
    output: Schema.Unknown,
    handler: ({ data }) => {
      counter.hit("echo")
      return data
    }
  }),
  Action.make({
    name: "data.add",
    input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
    output: Schema.Number,
    handler: ({ a, b }) => {
      counter.hit("add")
      return a + b
    }
  })
]

const nested = (levels: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < levels; i++) value = [value]
  return value
}

/** What each hostile argument set is denied with, by code. */
const hostile: ReadonlyArray<readonly [string, string, Record<string, unknown>]> = [
  ["5000 levels", "arguments.too_deep", { data: nested(5000) }],
  ["100000 levels", "arguments.too_deep", { data: nested(100_000) }],
  ["a 2 MiB string", "arguments.too_large", { data: "x".repeat(2 << 20) }],
  ["a nested own __proto__ key", "arguments.proto_key", { data: JSON.parse("{\"x\":{\"__proto__\":{\"a\":1}}}") }],
  ["a nested getter that throws", "arguments.unreadable", {
    data: {
      get x(): number {
        throw new Error("getter")
      }
    }
  }],
  ["a nested proxy that throws", "arguments.unreadable", {
    data: new Proxy({}, {
      ownKeys: () => {
        throw new Error("proxy")
      }
    })
  }]
]

const denial = (outcome: ExecutionOutcome) =>
  outcome._tag === "denied" ? [outcome.reason.code, outcome.stage] : [outcome._tag]

describe("hostile arguments (minimal profile)", () => {
  it.effect("deep, large and __proto__ arguments are denied at normalise and the handler never runs", () =>
    Effect.gen(function*() {
      const before = counter.count("echo")
      for (const [what, code, args] of hostile) {
        assert.deepStrictEqual(denial(yield* run("data.echo", args)), [code, "normalise"], what)
      }
      assert.strictEqual(counter.count("echo"), before)
      const deep = yield* run("data.echo", { data: nested(5000) })
      assert.match(
        deep._tag === "denied" ? deep.reason.detail ?? "" : "",
        /^arguments\.data\[0\].*: nested deeper than 128 levels$/
      )
    }).pipe(Effect.provide(executor(actions))))

  it.effect("a __proto__ key parsed into the arguments feeds no field: denied naming its path", () =>
    Effect.gen(function*() {
      const before = counter.count("add")
      // `ExecutionRequest.make` copies the arguments: on Node the parsed key becomes their prototype, which decoding
      // reads through (`a` would be 1); on Deno it stays an own key.
      const outcome = yield* run("data.add", JSON.parse("{\"__proto__\":{\"a\":1},\"b\":2}"))
      assert.deepStrictEqual(denial(outcome), ["arguments.proto_key", "normalise"])
      assert.strictEqual(
        outcome._tag === "denied" && outcome.reason.detail,
        "arguments.__proto__: the key \"__proto__\" is refused"
      )
      assert.strictEqual(counter.count("add"), before)
    }).pipe(Effect.provide(executor(actions))))

  it.effect("a __proto__ key in a call the ingress prepares is refused too, not dropped by decoding", () =>
    Effect.gen(function*() {
      const before = counter.count("add")
      const { context, request } = yield* Ingress.prepare(
        { action: "data.add", arguments: JSON.parse("{\"__proto__\":{\"a\":1},\"b\":2}") },
        { principal: "alice", effect_backend: InProcessBackend.make.ref }
      )
      const outcome = yield* (yield* ActionExecutorTag).execute(request, { context })
      assert.deepStrictEqual(denial(outcome), ["arguments.proto_key", "normalise"])
      assert.strictEqual(counter.count("add"), before)
    }).pipe(Effect.provide(executor(actions))))

  it.effect("the limits are configurable", () =>
    Effect.gen(function*() {
      const before = counter.count("echo")
      assert.deepStrictEqual(denial(yield* run("data.echo", { data: nested(4) })), ["arguments.too_deep", "normalise"])
      assert.deepStrictEqual(denial(yield* run("data.echo", { data: "x".repeat(40) })), [
        "arguments.too_large",
        "normalise"
      ])
      assert.strictEqual((yield* run("data.echo", { data: [["x"]] }))._tag, "succeeded")
      assert.strictEqual(counter.count("echo"), before + 1)
    }).pipe(Effect.provide(executor(actions, { argumentLimits: { maxDepth: 4, maxSize: 32 } }))))

  it.effect("arguments at the default limits still run", () =>
    Effect.gen(function*() {
      const outcome = yield* run("data.echo", { data: nested(126) })
      assert.strictEqual(outcome._tag, "succeeded")
    }).pipe(Effect.provide(executor(actions))))
})

const declaration = {
  policy_id: "hostile",
  version: "1",
  rules: [{ rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["data.echo", "data.add"] }]
}

const governed = (config: ActionExecutor.Config = {}) => governedInMemory(actions, config)

describe("hostile arguments (governed profile)", () => {
  it.effect("each is denied before any operation opens: its chain holds no record, half-open or otherwise", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(declaration)
      const boundary = yield* Governance.openBoundary(ref)
      const before = counter.count("echo")
      for (const [what, code, args] of hostile) {
        const outcome = yield* run("data.echo", args, {}, { policy_snapshot: ref }, { boundary })
        assert.deepStrictEqual(denial(outcome), [code, "normalise"], what)
      }
      assert.strictEqual(counter.count("echo"), before)
      const store = yield* EvidenceStore
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(boundary.chain_id))), [])
      // The boundary is still usable: a well-formed call runs and is recorded.
      const fine = yield* run("data.echo", { data: [1] }, {}, { policy_snapshot: ref }, { boundary })
      assert.strictEqual(fine._tag, "succeeded")
      assert.strictEqual(counter.count("echo"), before + 1)
    }).pipe(Effect.provide(governed())))
})
