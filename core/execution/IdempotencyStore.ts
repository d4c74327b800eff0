/**
 * Stored idempotency results, partitioned by caller: the key digests the caller's partition (see
 * Origin.idempotencyPartition, or the authenticated principal and tenant when the host set no
 * invocation context), the action, and the caller's key. Every hit is re-authorised first: the
 * executor looks up only after its security stages allowed the call.
 */
import { Context, Effect, Layer, Option } from "effect"
import * as Digest from "../base/Digest.ts"
import type { ActionRef } from "../base/Refs.ts"
import { currentInvocation } from "../policy/InvocationContext.ts"
import { idempotencyPartition } from "../policy/Origin.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { Succeeded } from "./ExecutionOutcome.ts"

/** Stores the outcome a keyed call succeeded with. */
export class IdempotencyStore
  extends Context.Tag("writ/IdempotencyStore")<IdempotencyStore, IdempotencyStore.Service>()
{}

/** The IdempotencyStore service. */
export declare namespace IdempotencyStore {
  /** get and put by partitioned key. */
  export interface Service {
    readonly get: (key: Digest.Sha256Hex) => Effect.Effect<Option.Option<Succeeded>>
    readonly put: (key: Digest.Sha256Hex, outcome: Succeeded) => Effect.Effect<void>
  }
}

/** The partitioned key of a call: the caller's partition, the action and version, and the caller's key. */
export const keyOf = (context: ExecutionContext, action: ActionRef, idempotency_key: string) =>
  Effect.flatMap(currentInvocation, (invocation) =>
    Digest.canonical({
      partition: Option.match(invocation, {
        onNone: () => ({ principal: context.authenticated_principal.id, tenant: context.tenant?.id ?? null }),
        onSome: (value) => idempotencyPartition(value, { target: action.name })
      }),
      action: { name: action.name, version: action.version ?? null },
      idempotency_key
    }))

/** An in-memory store. Runtimes: every one. */
export const layerMemory: Layer.Layer<IdempotencyStore> = Layer.sync(IdempotencyStore, () => {
  const entries = new Map<string, Succeeded>()
  return {
    get: (key) => Effect.sync(() => Option.fromNullable(entries.get(key))),
    put: (key, outcome) => Effect.sync(() => void entries.set(key, outcome))
  }
})
