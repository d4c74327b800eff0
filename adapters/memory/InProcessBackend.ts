/**
 * The in-process effect backend: runs handlers in the host's own process, so it contains nothing
 * and says so. Runtimes: every one (Node, Deno, edge).
 */
import { Effect, Exit, Layer, Predicate } from "effect"
import type { Redacted } from "effect"
import type * as Scope from "effect/Scope"
import type { Handler, HandlerContext } from "../../core/action/Action.ts"
import {
  ActionBackendCapabilityReport,
  ActionExecutionBackend,
  noContainment
} from "../../core/action/ActionExecutionBackend.ts"
import type { Invocation } from "../../core/action/ActionExecutionBackend.ts"
import { ActionOutbox } from "../../core/action/ActionOutbox.ts"
import { ActionUsage } from "../../core/action/ActionUsage.ts"
import type { Report } from "../../core/action/ActionUsage.ts"
import * as InvocationToken from "../../core/action/InvocationToken.ts"
import type { JsonValue } from "../../core/base/Canonical.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"

const ref = ActionBackendRef.make({ id: "in-process", version: "1" })

const report = ActionBackendCapabilityReport.make({
  backend: ref,
  containment: noContainment,
  verified_by: "static: a handler shares the host process, its filesystem, network and environment"
})

// A service call made synchronously for a Promise or plain handler: its failure is thrown.
const runOrThrow = (effect: Effect.Effect<void, unknown>) => {
  const done = Effect.runSync(Effect.either(effect))
  if (done._tag === "Left") throw done.left
}

class InProcessContext implements HandlerContext {
  #controller: AbortController | undefined
  constructor(
    readonly request_id: string,
    readonly attempt_id: string,
    readonly usage: ActionUsage.Service,
    readonly outbox: ActionOutbox.Service,
    private readonly secrets: ReadonlyMap<string, Redacted.Redacted<string>> | undefined
  ) {}
  get report() {
    return (usage: Report) => runOrThrow(this.usage.report(usage))
  }
  get stage() {
    return (topic: string, payload: { readonly [key: string]: JsonValue }) =>
      runOrThrow(this.outbox.stage(topic, payload))
  }
  get secret() {
    return (name: string) => this.secrets?.get(name)
  }
  get signal() {
    return (this.#controller ??= new AbortController()).signal
  }
  abort() {
    this.#controller?.abort()
  }
}

// Run at once: a plain handler's result or throw is answered as its Exit, a Promise or an Effect as the Effect awaiting it.
const run = (token: InvocationToken.InvocationToken, invocation: Invocation): Effect.Effect<unknown, unknown> => {
  const redeemed = InvocationToken.redeem(token, invocation.definition)
  if (redeemed._tag === "Left") return Exit.fail(redeemed.left)
  const handler = redeemed.right
  const context = new InProcessContext(
    invocation.context.request_id,
    invocation.context.attempt_id,
    invocation.usage,
    invocation.outbox,
    invocation.secrets
  )
  let result: ReturnType<Handler>
  try {
    result = handler(invocation.input, context)
  } catch (error) {
    return Exit.fail(error)
  }
  if (Exit.isExit(result)) return result
  if (Effect.isEffect(result)) {
    const effect = result as Effect.Effect<unknown, unknown, Scope.Scope | ActionUsage | ActionOutbox>
    return Effect.scoped(effect).pipe(
      Effect.provideService(ActionUsage, invocation.usage),
      Effect.provideService(ActionOutbox, invocation.outbox)
    )
  }
  if (Predicate.isPromiseLike(result)) {
    return Effect.tryPromise({ try: () => result, catch: (error) => error }).pipe(
      Effect.onInterrupt(() => Effect.sync(() => context.abort()))
    )
  }
  return Exit.succeed(result)
}

/** The in-process backend service. */
export const make: ActionExecutionBackend.Service = {
  ref,
  probe: Effect.succeed(report),
  invoke: run
}

/** The in-process backend: effect containment unsupported on every axis. */
export const layer: Layer.Layer<ActionExecutionBackend> = Layer.succeed(ActionExecutionBackend, make)
