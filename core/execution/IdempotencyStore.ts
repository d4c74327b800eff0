/**
 * Stored idempotency results, partitioned by caller: the key digests the tenant and authenticated principal, the
 * invocation's partition when the host set one (see Origin.idempotencyPartition), the action, and the caller's key.
 * Each entry keeps the digest of the arguments it was called with, so a key reused with other arguments is refused,
 * never answered. Every hit is re-authorised first: the executor looks up only after its security stages allowed it.
 */
import { Context, Effect, Layer, Option } from "effect"
import * as Digest from "../base/Digest.ts"
import type { ActionRef } from "../base/Refs.ts"
import { currentInvocation } from "../policy/InvocationContext.ts"
import { idempotencyPartition } from "../policy/Origin.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { Succeeded } from "./ExecutionOutcome.ts"

/** A stored success and the digest of the arguments it was called with. */
export interface Entry {
  readonly arguments_digest: Digest.Sha256Hex
  readonly outcome: Succeeded
}

/** Stores the outcome a keyed call succeeded with. */
export class IdempotencyStore
  extends Context.Tag("writ/IdempotencyStore")<IdempotencyStore, IdempotencyStore.Service>()
{}

/** The IdempotencyStore service. */
export declare namespace IdempotencyStore {
  /** get and put by partitioned key. */
  export interface Service {
    readonly get: (key: Digest.Sha256Hex) => Effect.Effect<Option.Option<Entry>>
    readonly put: (key: Digest.Sha256Hex, entry: Entry) => Effect.Effect<void>
  }
}

/** The partitioned key of a call: its tenant, principal and origin partition, the action and version, and the key. */
export const keyOf = (context: ExecutionContext, action: ActionRef, idempotency_key: string) =>
  Effect.flatMap(currentInvocation, (invocation) =>
    Digest.canonical({
      caller: { principal: context.authenticated_principal.id, tenant: context.tenant?.id ?? null },
      partition: Option.match(invocation, {
        onNone: () => null,
        onSome: (value) => idempotencyPartition(value, { target: action.name })
      }),
      action: { name: action.name, version: action.version ?? null },
      idempotency_key
    }))

/** A fresh in-memory store. Runtimes: every one. */
export const makeMemory = (): IdempotencyStore.Service => {
  const entries = new Map<string, Entry>()
  return {
    get: (key) => Effect.sync(() => Option.fromNullable(entries.get(key))),
    put: (key, entry) => Effect.sync(() => void entries.set(key, entry))
  }
}

/** An in-memory store (`makeMemory`) as a layer. */
export const layerMemory: Layer.Layer<IdempotencyStore> = Layer.sync(IdempotencyStore, makeMemory)
