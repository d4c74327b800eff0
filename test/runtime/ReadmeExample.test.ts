import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { InProcessBackend, NodeDigest } from "../../adapters/index.ts"
import {
  Action,
  ActionExecutor,
  ActionRegistry,
  ExecutionRequest,
  ExecutionScope,
  IdGenerator,
  Ingress
} from "../../core/index.ts"

// The README's library example, verbatim but for the import paths.
const add = Action.make({
  name: "calc.add",
  input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  output: Schema.Int,
  handler: ({ a, b }) => a + b
})

const WritLive = ActionExecutor.layerMinimal({ interceptors: [], transformers: [], observers: [] }).pipe(
  Layer.provideMerge(Layer.merge(ActionRegistry.layerWith([add]), InProcessBackend.layer)),
  Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto))
)

const program = Effect.gen(function*() {
  const executor = yield* ActionExecutor.ActionExecutor
  const scope = ExecutionScope.EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
  const context = yield* Ingress.bind({
    execution_scope: scope,
    authenticated_principal: { id: "alice" },
    effect_backend: InProcessBackend.make.ref
  })
  const request = ExecutionRequest.ExecutionRequest.make({
    request_id: "req-1",
    action: { name: "calc.add" },
    arguments: { a: 2, b: 40 },
    execution_scope: scope
  })
  return yield* executor.execute(request, { context })
})

describe("the README's library example", () => {
  it.effect("runs and succeeds", () =>
    Effect.gen(function*() {
      const outcome = yield* program
      assert.isTrue(outcome._tag === "succeeded" && outcome.result === 42)
    }).pipe(Effect.provide(WritLive)))
})
