/**
 * The capacity load test on writ as a process of its own: 10,000 concurrent requests against 8 permits (20 ms leases)
 * on the real clock, each an `Ingress.prepare` and a minimal executor's `execute`, through the shared client.
 */
import { Effect, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Load from "./loadClient.ts"

const work = Action.make({
  name: "work",
  input: Schema.Struct({ n: Schema.Number }),
  output: Schema.Number,
  handler: ({ n }) => Load.work(n)
})

const layer = ActionExecutor.layerMinimal({
  capacity: [Capacity.bounded({ id: "eight", permits: Load.PERMITS, lease_microseconds: Load.LEASE_MICROSECONDS })]
}).pipe(
  Layer.provideMerge(
    ActionRegistry.layerWith([work]).pipe(
      Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)),
      Layer.merge(InProcessBackend.layer)
    )
  )
)

const attempt: Load.Attempt<ActionExecutor.ActionExecutor | IdGenerator.IdGenerator> = Effect.fnUntraced(
  function*(n, tried) {
    const { context, request } = yield* Ingress.prepare(
      { action: "work", arguments: { n }, request_id: `r${n}-${tried}` },
      { principal: "load", effect_backend: InProcessBackend.make.ref }
    )
    const outcome = yield* (yield* ActionExecutor.ActionExecutor).execute(request, { context })
    if (outcome._tag === "succeeded") return "succeeded" as const
    if (outcome._tag === "timed_out") return "stopped" as const
    if (outcome._tag !== "deferred" || outcome.retry_at === undefined) {
      return { failed: `${outcome._tag} without a time to retry at` }
    }
    return { retry_at_millis: Math.ceil(Time.toMicros(outcome.retry_at) / 1000) }
  },
  Effect.orDie
)

await Load.run(Load.requested(), attempt, layer)
