/**
 * The in-process effect backend: runs handlers in the host's own process, so it contains nothing
 * and says so. Runtimes: every one (Node, Deno, edge).
 */
import { Cause, Effect, Layer, Predicate } from "effect"
import type * as Scope from "effect/Scope"
import { captureFailure } from "../core/Action.ts"
import type { Handler } from "../core/Action.ts"
import { ActionBackendCapabilityReport, ActionExecutionBackend } from "../core/ActionExecutionBackend.ts"
import type { Invocation } from "../core/ActionExecutionBackend.ts"
import * as InvocationToken from "../core/InvocationToken.ts"
import { ActionBackendRef } from "../core/Refs.ts"

const ref = ActionBackendRef.make({ id: "in-process", version: "1" })

const report = ActionBackendCapabilityReport.make({
  backend: ref,
  containment: {
    filesystem: "unsupported",
    network: "unsupported",
    subprocess: "unsupported",
    environment: "unsupported",
    secrets: "unsupported"
  },
  verified_by: "static: a handler shares the host process, its filesystem, network and environment"
})

const run = (handler: Handler, invocation: Invocation): Effect.Effect<unknown, unknown> =>
  Effect.suspend(() => {
    const controller = new AbortController()
    let result: ReturnType<Handler>
    try {
      result = handler(invocation.input, { ...invocation.context, signal: controller.signal })
    } catch (error) {
      return Effect.fail(error)
    }
    if (Effect.isEffect(result)) return Effect.scoped(result as Effect.Effect<unknown, unknown, Scope.Scope>)
    if (Predicate.isPromiseLike(result)) {
      return Effect.tryPromise({ try: () => result, catch: (error) => error }).pipe(
        Effect.onInterrupt(() => Effect.sync(() => controller.abort()))
      )
    }
    return Effect.succeed(result)
  })

/** The in-process backend service. */
export const make: ActionExecutionBackend.Service = {
  ref,
  probe: Effect.succeed(report),
  invoke: (token, invocation) =>
    Effect.flatMap(InvocationToken.redeem(token, invocation.definition), (handler) =>
      Effect.catchAllCause(
        run(handler, invocation),
        (cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause as Cause.Cause<never>)
            : Effect.fail(captureFailure(cause))
      ))
}

/** The in-process backend: effect containment unsupported on every axis. */
export const layer: Layer.Layer<ActionExecutionBackend> = Layer.succeed(ActionExecutionBackend, make)
