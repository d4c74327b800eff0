/**
 * The capacity load test's floor, through the same client: the same work without writ's executor, ingress or their
 * modules. Each attempt decodes its arguments by the action's input Schema and asks the same bounded capacity for a
 * lease; deferred, it is told the same `retry_at`; admitted, it runs the handler under its lease's deadline and
 * releases the lease. Of writ it imports only the capacity and time modules, unless run with `--with-writ-modules`:
 * then it first loads the modules writ's side loads and uses none of them, the control which separates the live heap
 * those modules add from what an attempt through writ costs.
 */
import { Duration, Effect, Either, Layer, Schema } from "effect"
import * as Time from "../../core/base/Time.ts"
import type { Admission } from "../../core/execution/Capacity.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import * as Load from "./loadClient.ts"

if (process.argv.includes("--with-writ-modules")) {
  await Promise.all([
    import("../../adapters/memory/InProcessBackend.ts"),
    import("../../adapters/node/NodeDigest.ts"),
    import("../../core/action/ActionRegistry.ts"),
    import("../../core/execution/ActionExecutor.ts"),
    import("../../core/execution/Ingress.ts")
  ])
}

const input = Schema.Struct({ n: Schema.Number })
const decode = Schema.decodeUnknown(input)
const capacity = Capacity.bounded({ id: "eight", permits: Load.PERMITS, lease_microseconds: Load.LEASE_MICROSECONDS })
// Keyed by nothing, the bounded capacity reads nothing of its admission.
const admission = {} as Admission

const attempt: Load.Attempt<never> = Effect.fnUntraced(function*(n) {
  const { n: value } = yield* decode({ n })
  const admitted = yield* capacity.admit(admission)
  if (Either.isLeft(admitted)) {
    return { retry_at_millis: Math.ceil(Time.toMicros(admitted.left.retry_at!) / 1000) }
  }
  const lease = admitted.right
  const remaining = Time.toMicros(lease.expires_at!) - (yield* Time.nowMicros)
  const ran = yield* Effect.timeout(Load.work(value), Duration.micros(BigInt(Math.max(0, remaining)))).pipe(
    Effect.either,
    Effect.ensuring(lease.release)
  )
  return Either.isRight(ran) ? "succeeded" as const : "stopped" as const
}, Effect.orDie)

await Load.run(Load.requested(), attempt, Layer.empty)
