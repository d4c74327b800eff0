/**
 * The in-process effect backend: runs handlers in the host's own process, so it contains nothing
 * and says so. Runtimes: every one (Node, Deno, edge).
 */
import { Effect, Layer, Predicate } from "effect"
import type * as Scope from "effect/Scope"
import type { Handler, HandlerContext } from "../core/Action.ts"
import { ActionBackendCapabilityReport, ActionExecutionBackend } from "../core/ActionExecutionBackend.ts"
import type { Invocation } from "../core/ActionExecutionBackend.ts"
import { ActionUsage } from "../core/ActionUsage.ts"
import type { Report } from "../core/ActionUsage.ts"
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

class InProcessContext implements HandlerContext {
  #controller: AbortController | undefined
  constructor(readonly request_id: string, readonly attempt_id: string, readonly usage: ActionUsage.Service) {}
  get report() {
    return (usage: Report) => {
      const reported = Effect.runSync(Effect.either(this.usage.report(usage)))
      if (reported._tag === "Left") throw reported.left
    }
  }
  get signal() {
    return (this.#controller ??= new AbortController()).signal
  }
  abort() {
    this.#controller?.abort()
  }
}

const run = (token: InvocationToken.InvocationToken, invocation: Invocation): Effect.Effect<unknown, unknown> =>
  Effect.suspend(() => {
    const redeemed = InvocationToken.redeem(token, invocation.definition)
    if (redeemed._tag === "Left") return redeemed
    const handler = redeemed.right
    const context = new InProcessContext(
      invocation.context.request_id,
      invocation.context.attempt_id,
      invocation.usage
    )
    let result: ReturnType<Handler>
    try {
      result = handler(invocation.input, context)
    } catch (error) {
      return Effect.fail(error)
    }
    if (Effect.isEffect(result)) {
      const effect = result as Effect.Effect<unknown, unknown, Scope.Scope | ActionUsage>
      return Effect.provideService(Effect.scoped(effect), ActionUsage, invocation.usage)
    }
    if (Predicate.isPromiseLike(result)) {
      return Effect.tryPromise({ try: () => result, catch: (error) => error }).pipe(
        Effect.onInterrupt(() => Effect.sync(() => context.abort()))
      )
    }
    return Effect.succeed(result)
  })

/** The in-process backend service. */
export const make: ActionExecutionBackend.Service = {
  ref,
  probe: Effect.succeed(report),
  invoke: run
}

/** The in-process backend: effect containment unsupported on every axis. */
export const layer: Layer.Layer<ActionExecutionBackend> = Layer.succeed(ActionExecutionBackend, make)
