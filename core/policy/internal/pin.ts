import { Effect, Either } from "effect"
import { Digest } from "../../base/Digest.ts"
import type { ExecutionContext } from "../../execution/ExecutionContext.ts"
import type { Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import type { PolicySnapshot } from "../PolicySnapshot.ts"
import { immutable, recomputeDigest } from "../PolicySnapshot.ts"
import type { PolicySnapshotStore } from "../PolicySnapshotStore.ts"
import type { Pinned } from "./reduce.ts"
import { pinned } from "./reduce.ts"

/** How policy decisions get their snapshot: read for a context, or compiled from one already pinned. */
export interface Pin {
  /** Read the snapshot a context names and check it is active and the pinned one: the compiled snapshot, or the refusal. */
  readonly read: (context: ExecutionContext) => Effect.Effect<Either.Either<Pinned, Verdict>>
  /** The compiled form of a snapshot this executor pinned (verified against its digest once per digest). */
  readonly compiled: (snapshot: PolicySnapshot) => Effect.Effect<Either.Either<Pinned, Verdict>>
  /** The compiled form of a pinned snapshot already verified, synchronously; undefined until it is. */
  readonly cached: (snapshot: PolicySnapshot) => Pinned | undefined
}

const deny = (code: string, detail: string) => Either.left(Interceptor.deny(code, detail))

/**
 * Read the snapshot a context names, check it is active and is the pinned one, and verify and compile its content
 * once per digest (a snapshot's content is immutable by its digest; its release state is read on every read).
 */
export const makePinWith = (store: PolicySnapshotStore.Service, digest: Digest.Service): Pin => {
  const cache = new Map<string, Pinned>()

  const verified = Effect.fnUntraced(function*(snapshot: PolicySnapshot) {
    // Its own immutable copy (the same snapshot when the store's is one), so no holder of the store's can change it.
    const own = immutable(snapshot)
    const recomputed = yield* Effect.either(Effect.provideService(recomputeDigest(own), Digest, digest))
    if (Either.isLeft(recomputed) || recomputed.right !== snapshot.digest) {
      return deny("policy.digest_mismatch", "the stored snapshot's content does not recompute to its digest")
    }
    const compiledSnapshot = pinned(own)
    cache.set(snapshot.digest, compiledSnapshot)
    return Either.right(compiledSnapshot)
  })

  // The compiled snapshot was verified against this digest when it was cached; decisions use it, not the store's copy.
  const compiled = (snapshot: PolicySnapshot) => {
    const cached = cache.get(snapshot.digest)
    return cached !== undefined ? Effect.succeed(Either.right(cached)) : verified(snapshot)
  }

  const read = (context: ExecutionContext): Effect.Effect<Either.Either<Pinned, Verdict>> => {
    const ref = context.policy_snapshot
    if (ref === undefined) return Effect.succeed(deny("policy.unbound", "the context names no policy snapshot"))
    return Effect.flatMap(Effect.either(store.get(ref.policy_id, ref.version)), (stored) => {
      if (Either.isLeft(stored)) return Effect.succeed(deny("policy.not_found", stored.left.message))
      const snapshot = stored.right
      if (snapshot.digest !== ref.digest) {
        return Effect.succeed(
          deny("policy.digest_mismatch", `${ref.policy_id}@${ref.version} is not the pinned snapshot`)
        )
      }
      if (snapshot.release_state !== "active") {
        return Effect.succeed(deny("policy.not_active", `${ref.policy_id}@${ref.version} is ${snapshot.release_state}`))
      }
      return compiled(snapshot)
    })
  }

  return { read, compiled, cached: (snapshot) => cache.get(snapshot.digest) }
}
