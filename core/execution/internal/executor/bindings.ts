/**
 * Stage 3's binding of configured interceptors, governed: the pinned snapshot must bind each by id, version and
 * configuration digest, or the call is denied before any operation opens.
 */
import type { InterceptorBinding } from "../../../policy/PolicyRule.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import type { Governor } from "./env.ts"

/** The first configured interceptor a snapshot does not bind by identity, if any. */
export type Bindings = (snapshot: PolicySnapshot) => InterceptorBinding | undefined

const bindingKey = ({ config_digest, id, version }: InterceptorBinding) => `${id}\u0000${version}\u0000${config_digest}`

// Snapshots whose answers are kept: a few policies are active at once, so an overflow only drops the cache.
const keptSnapshots = 256

/**
 * Stage 3's check that the pinned snapshot binds every interceptor the executor was configured with, answered once per
 * snapshot digest (the digest covers what it binds) and then by one Map lookup per call.
 */
export const bindingsWith = (governor: Governor): Bindings => {
  const required = [...(governor.identities?.values() ?? [])].filter((identity) => identity !== "snapshot")
  if (required.length === 0) return () => undefined
  const answers = new Map<string, InterceptorBinding | null>()
  return (snapshot) => {
    let unbound = answers.get(snapshot.digest)
    if (unbound === undefined) {
      const bound = new Set((snapshot.interceptors ?? []).map(bindingKey))
      unbound = required.find((identity) => !bound.has(bindingKey(identity))) ?? null
      if (answers.size >= keptSnapshots) answers.clear()
      answers.set(snapshot.digest, unbound)
    }
    return unbound ?? undefined
  }
}
