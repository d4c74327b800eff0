/**
 * Gate 1, no bypass: every public route enters the ActionExecutor exactly once, and no module but
 * the executor can reach a backend's invoke or a handler.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import { ActionOutbox } from "../../core/action/ActionOutbox.ts"
import { ActionRegistry } from "../../core/action/ActionRegistry.ts"
import * as ActionRegistryModule from "../../core/action/ActionRegistry.ts"
import { ActionUsage } from "../../core/action/ActionUsage.ts"
import { mint } from "../../core/action/internal/token.ts"
import { InvocationTokenError } from "../../core/action/InvocationTokenError.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Demo from "../../runtime/Demo.ts"
import * as Cli from "../../runtime/node/Cli.ts"
import { createExecutor } from "../../runtime/Promise.ts"
import { factsOf, productionFiles } from "../fixtures/sources.ts"

const importers = (target: string) => productionFiles().filter((file) => factsOf(file).imports.includes(target)).sort()
const callers = (callee: string) => productionFiles().filter((file) => factsOf(file).calls.includes(callee)).sort()

describe("gate 1: static", () => {
  it("only the executor mints invocation tokens and calls a backend's invoke", () => {
    assert.deepStrictEqual(callers("mint"), ["core/execution/internal/executor/invoke.ts"])
    assert.deepStrictEqual(callers(".invoke"), ["core/execution/internal/executor/invoke.ts"])
    assert.deepStrictEqual(importers("core/action/internal/token.ts"), [
      "core/action/InvocationToken.ts",
      "core/execution/internal/executor/invoke.ts"
    ])
  })

  it("a handler is reachable only by spending a token, and only backends spend them", () => {
    assert.deepStrictEqual(importers("core/action/internal/callable.ts"), [
      "core/action/Action.ts",
      "core/action/internal/token.ts"
    ])
    assert.deepStrictEqual(callers("unseal"), ["core/action/internal/token.ts"])
    assert.deepStrictEqual(callers(".redeem"), ["adapters/memory/InProcessBackend.ts"])
    assert.deepStrictEqual(callers(".handler"), [])
  })

  it("the check sees call sites (it is not vacuous)", () => {
    assert.isTrue(productionFiles().length > 10)
    assert.include(factsOf("core/execution/internal/executor/invoke.ts").calls, ".invoke")
    assert.deepStrictEqual(importers("core/execution/internal/executor/invoke.ts"), [
      "core/execution/internal/executor/run.ts"
    ])
  })
})

const counting = () => {
  const counts = { entered: 0, invoked: 0 }
  const backend = Layer.succeed(ActionExecutionBackend, {
    ...InProcessBackend.make,
    invoke: (token, invocation) => {
      counts.invoked++
      return InProcessBackend.make.invoke(token, invocation)
    }
  })
  const observers = [{ id: "count", observe: () => Effect.sync(() => void counts.entered++) }]
  return { counts, backend, observers }
}

describe("gate 1: runtime routes", () => {
  it.effect("the executor: one entry, one invoke", () =>
    Effect.gen(function*() {
      const { backend, counts, observers } = counting()
      const layer = ActionExecutor.layerMinimal({ observers }).pipe(
        Layer.provideMerge(Layer.mergeAll(ActionRegistryModule.layerWith(Demo.actions), backend)),
        Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerSeeded(1)))
      )
      const outcome = yield* Effect.provide(Demo.runStep(Demo.script[1]!, 0), layer)
      assert.strictEqual(outcome._tag, "succeeded")
      assert.deepStrictEqual(counts, { entered: 1, invoked: 1 })
    }))

  it.live("the CLI: `writ exec` enters the executor once per call", () =>
    Effect.gen(function*() {
      const { backend, counts, observers } = counting()
      const layer = Demo.layerWith({ observers }, backend).pipe(
        Layer.provideMerge(Layer.mergeAll(NodeDigest.layer, IdGenerator.layerCrypto, NodeContext.layer))
      )
      yield* Cli.run(["node", "writ", "exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--json"]).pipe(
        Effect.provide(layer)
      )
      assert.deepStrictEqual(counts, { entered: 1, invoked: 1 })
      process.exitCode = undefined
    }))

  it.live("the Promise facade: one entry per call; an aborted signal cancels before the call", () =>
    Effect.promise(async () => {
      let calls = 0
      let entered = 0
      const executor = await createExecutor({
        principal: "alice",
        actions: [Action.make({
          name: "count",
          input: Schema.Struct({}),
          output: Schema.Number,
          handler: () => ++calls
        })],
        observers: [{ id: "count", observe: () => Effect.sync(() => void entered++) }]
      })
      const outcome = await executor.execute({ action: "count" })
      assert.strictEqual(outcome._tag, "succeeded")
      const aborted = AbortSignal.abort()
      const cancelled = await executor.execute({ action: "count" }, { signal: aborted })
      assert.isTrue(cancelled._tag === "cancelled" && !cancelled.call_executed)
      assert.deepStrictEqual({ calls, entered }, { calls: 1, entered: 2 })
      await executor.dispose()
    }))

  it.effect("the registry: registering, discovering, resolving and listing never reach a handler", () =>
    Effect.gen(function*() {
      let calls = 0
      const definition = Action.make({
        name: "guarded",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => void calls++
      })
      const registry = yield* ActionRegistry
      yield* registry.discover({ id: "plugin", discover: Effect.succeed([definition]) })
      const resolved = yield* registry.resolve({ name: "guarded" })
      const list = yield* registry.list
      const reachable = [
        ...Object.values(resolved.definition),
        ...Object.values(resolved.descriptor),
        ...Object.values(registry),
        ...list
      ]
      assert.isFalse(
        reachable.some((value) => typeof value === "function" && value.length <= 2 && value.name === "handler")
      )
      assert.notProperty(resolved.definition, "handler")
      assert.strictEqual(calls, 0)
    }).pipe(Effect.provide(ActionRegistryModule.layer), Effect.provide(NodeDigest.layer)))
})

describe("gate 1: the invocation token", () => {
  const definition = Demo.actions[1]!
  const invocation = {
    definition,
    input: { a: 1, b: 2 },
    context: { request_id: "r", attempt_id: "a" },
    usage: ActionUsage.of({ report: () => Effect.void }),
    outbox: ActionOutbox.of({ stage: () => Effect.void })
  }

  it.effect("a backend refuses an invoke without a fresh token", () =>
    Effect.gen(function*() {
      const forged = yield* Effect.either(InProcessBackend.make.invoke(Object.freeze({}) as never, invocation))
      assert.isTrue(Either.isLeft(forged) && (forged.left as { reason: string }).reason === "spent")
      const missing = yield* Effect.either(InProcessBackend.make.invoke(undefined as never, invocation))
      assert.isTrue(Either.isLeft(missing) && (missing.left as { reason: string }).reason === "missing")
    }))

  it.effect("a handler failing with an InvocationTokenError of its own is a failure, not a refusal", () =>
    Effect.gen(function*() {
      const sly = Action.make({
        name: "sly",
        input: Schema.Struct({}),
        output: Schema.Void,
        handler: () => Effect.fail(new InvocationTokenError({ reason: "spent", action: "sly" }))
      })
      const layer = ActionExecutor.layerMinimal().pipe(
        Layer.provideMerge(Layer.merge(ActionRegistryModule.layerWith([sly]), InProcessBackend.layer)),
        Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerSeeded(3)))
      )
      const outcome = yield* Effect.provide(Demo.runStep({ action: "sly", arguments: {}, note: "" }, 0), layer)
      assert.strictEqual(outcome._tag, "failed")
    }))

  it.effect("a token works once, and only for the action it was minted for", () =>
    Effect.gen(function*() {
      const call = InProcessBackend.make.invoke(mint(definition), invocation)
      assert.strictEqual(yield* call, 3)
      const again = yield* Effect.either(call)
      assert.isTrue(Either.isLeft(again) && (again.left as { reason: string }).reason === "spent")
      const other = yield* Effect.either(InProcessBackend.make.invoke(mint(Demo.actions[0]!), invocation))
      assert.isTrue(Either.isLeft(other) && (other.left as { reason: string }).reason === "mismatched")
      const Token = mint(definition).constructor as new(key: symbol, definition: unknown) => unknown
      assert.throws(() => new Token(Symbol("writ/InvocationToken.mint"), definition), /minted by the executor only/)
    }))
})
