/**
 * The nonce store port: remembers which one-use nonces of signed requests were already seen, each until the instant
 * after which its request is refused as expired anyway. One store is shared by every worker of one signed ingress (the
 * edge handler), so a request replayed to another worker is refused as well.
 */
import { Context } from "effect"
import type { Effect } from "effect"

/** Remembers the nonces of signed requests. */
export class NonceStore extends Context.Tag("writ/NonceStore")<NonceStore, NonceStore.Service>() {}

/** The NonceStore service. */
export declare namespace NonceStore {
  /** One atomic operation: claim a nonce within a scope (a key id), or learn it was already claimed. */
  export interface Service {
    /**
     * Record `nonce` in `scope`, kept until `retainUntilMillis` (epoch milliseconds); true when it was not yet
     * recorded (the request is fresh), false when it was (a replay). Claiming is atomic: of two concurrent claims of
     * one nonce, exactly one is true.
     */
    readonly claim: (scope: string, nonce: string, retainUntilMillis: number) => Effect.Effect<boolean>
  }
}
