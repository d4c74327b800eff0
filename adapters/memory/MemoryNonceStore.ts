/**
 * The in-memory NonceStore: one map per store, forgetting a nonce once its retention has passed. Every handler built
 * over the same store (the workers of one process or isolate) shares it; separate isolates or machines need a shared
 * store behind the same port. Runtimes: every one.
 */
import { Clock, Effect, Layer } from "effect"
import { NonceStore } from "../../core/base/NonceStore.ts"

// Expired entries are swept once this many claims have been made since the last sweep.
const sweepEvery = 1024

/** A fresh in-memory nonce store. */
export const make = (): NonceStore.Service => {
  const seen = new Map<string, number>()
  let claims = 0
  const sweep = (now: number) => {
    for (const [key, until] of seen) if (until < now) seen.delete(key)
  }
  return {
    claim: (scope, nonce, retainUntilMillis) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (++claims % sweepEvery === 0) sweep(now)
        const key = `${scope}\u0000${nonce}`
        const until = seen.get(key)
        if (until !== undefined && until >= now) return false
        seen.set(key, retainUntilMillis)
        return true
      })
  }
}

/** An in-memory NonceStore layer (a fresh store each time the layer is built). */
export const layer: Layer.Layer<NonceStore> = Layer.sync(NonceStore, make)
