/**
 * A Promise facade over the executor for programs that do not use Effect. It is a composition
 * root: the host that creates it is the trusted ingress that names the principal.
 */
import { Deferred, Effect, Exit, Layer, ManagedRuntime, Schema } from "effect"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as WebCryptoDigest from "../adapters/web/WebCryptoDigest.ts"
import type { ActionDefinition } from "../core/action/Action.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import type { Digest } from "../core/base/Digest.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import type { ActionExecutionPlan } from "../core/execution/ActionExecutionPlan.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../core/execution/Ingress.ts"

/** How to build a Promise executor. */
export interface Options extends ActionExecutor.Config {
  readonly actions: ReadonlyArray<ActionDefinition>
  /** The authenticated principal calls run for, unless a call names another. */
  readonly principal: string
  /** The Digest layer; WebCrypto (every runtime) when omitted. */
  readonly digest?: Layer.Layer<Digest>
}

/** One call: the action, its arguments, and optional request fields. */
export type Call = Ingress.Call

/** Per-call options: the principal the host authenticated, and an AbortSignal that cancels. */
export interface CallOptions {
  readonly principal?: string
  readonly signal?: AbortSignal
}

/** A call to `execute` or `plan` after `dispose()`: the executor is gone, so nothing runs. */
export class ExecutorDisposedError extends Schema.TaggedError<ExecutorDisposedError>()("ExecutorDisposedError", {
  method: Schema.Literal("execute", "plan")
}) {
  override get message() {
    return `${this.method}: this executor was disposed, so nothing runs; create a new one`
  }
}

/** An executor with a Promise API; once `dispose()` is called, `execute` and `plan` reject with ExecutorDisposedError. */
export interface PromiseExecutor {
  readonly execute: (call: Call, options?: CallOptions) => Promise<ExecutionOutcome>
  readonly plan: (action: string) => Promise<ActionExecutionPlan>
  /** Release the executor; calling it again resolves the same way. */
  readonly dispose: () => Promise<void>
}

const cancelOn = (signal: AbortSignal) =>
  Effect.tap(Deferred.make<void>(), (cancel) =>
    Effect.sync(() => {
      const onAbort = () => Deferred.unsafeDone(cancel, Exit.void)
      if (signal.aborted) onAbort()
      else signal.addEventListener("abort", onAbort, { once: true })
    }))

/** Build a minimal-profile executor over the in-process backend; rejects on an invalid or colliding action. */
export const createExecutor = async (options: Options): Promise<PromiseExecutor> => {
  const layer = ActionExecutor.layerMinimal(options).pipe(
    Layer.provideMerge(Layer.merge(ActionRegistry.layerWith(options.actions), InProcessBackend.layer)),
    Layer.provideMerge(Layer.merge(options.digest ?? WebCryptoDigest.layer, IdGenerator.layerCrypto))
  )
  const runtime = ManagedRuntime.make(layer)
  await runtime.runtime()
  let disposed: Promise<void> | undefined
  // Effect's runtime, once disposed, rejects with its internal FiberFailure: refuse first, with writ's own error.
  const run = <A, E>(
    method: ExecutorDisposedError["method"],
    effect: Effect.Effect<A, E, Layer.Layer.Success<typeof layer>>
  ) => disposed === undefined ? runtime.runPromise(effect) : Promise.reject(new ExecutorDisposedError({ method }))

  const execute = (call: Call, callOptions: CallOptions = {}) =>
    run(
      "execute",
      Effect.gen(function*() {
        const executor = yield* ActionExecutor.ActionExecutor
        const { context, request } = yield* Ingress.prepare(call, {
          principal: callOptions.principal ?? options.principal,
          effect_backend: InProcessBackend.make.ref
        })
        const signal = callOptions.signal
        if (signal === undefined) return yield* executor.execute(request, { context })
        return yield* executor.execute(request, { context, cancel: yield* cancelOn(signal) })
      })
    )

  return {
    execute,
    plan: (action) =>
      run("plan", Effect.flatMap(ActionExecutor.ActionExecutor, (executor) => executor.plan({ name: action }))),
    dispose: () => (disposed ??= runtime.dispose())
  }
}
