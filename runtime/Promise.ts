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
import { PrincipalRef } from "../core/base/Refs.ts"
import type { ActionExecutionPlan } from "../core/execution/ActionExecutionPlan.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import * as ExecutionContext from "../core/execution/ExecutionContext.ts"
import type { ExecutionOutcome } from "../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../core/execution/ExecutionScope.ts"

/** How to build a Promise executor. */
export interface Options extends ActionExecutor.Config {
  readonly actions: ReadonlyArray<ActionDefinition>
  /** The authenticated principal calls run for, unless a call names another. */
  readonly principal: string
  /** The Digest layer; WebCrypto (every runtime) when omitted. */
  readonly digest?: Layer.Layer<Digest>
}

/** One call: the action, its arguments, and optional request fields. */
export interface Call {
  readonly action: string
  readonly version?: string
  readonly arguments?: Record<string, unknown>
  readonly request_id?: string
  readonly principal_claim?: string
  readonly deadline?: string
  readonly idempotency_key?: string
}

/** Per-call options: the principal the host authenticated, and an AbortSignal that cancels. */
export interface CallOptions {
  readonly principal?: string
  readonly signal?: AbortSignal
}

/** An executor with a Promise API. */
export interface PromiseExecutor {
  readonly execute: (call: Call, options?: CallOptions) => Promise<ExecutionOutcome>
  readonly plan: (action: string) => Promise<ActionExecutionPlan>
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

  const execute = (call: Call, callOptions: CallOptions = {}) =>
    runtime.runPromise(Effect.gen(function*() {
      const executor = yield* ActionExecutor.ActionExecutor
      const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
      const request = yield* Schema.decodeUnknown(ExecutionRequest)({
        request_id: call.request_id ?? (yield* IdGenerator.uuid),
        action: call.version === undefined ? { name: call.action } : { name: call.action, version: call.version },
        arguments: call.arguments ?? {},
        execution_scope: scope,
        ...(call.principal_claim === undefined ? {} : { principal_claim: { id: call.principal_claim } }),
        ...(call.deadline === undefined ? {} : { deadline: call.deadline }),
        ...(call.idempotency_key === undefined ? {} : { idempotency_key: call.idempotency_key })
      })
      const context = yield* ExecutionContext.bind({
        execution_scope: scope,
        authenticated_principal: PrincipalRef.make({ id: callOptions.principal ?? options.principal }),
        effect_backend: InProcessBackend.make.ref
      })
      const signal = callOptions.signal
      if (signal === undefined) return yield* executor.execute(request, { context })
      return yield* executor.execute(request, { context, cancel: yield* cancelOn(signal) })
    }))

  return {
    execute,
    plan: (action) =>
      runtime.runPromise(
        Effect.flatMap(ActionExecutor.ActionExecutor, (executor) => executor.plan({ name: action }))
      ),
    dispose: () => runtime.dispose()
  }
}
