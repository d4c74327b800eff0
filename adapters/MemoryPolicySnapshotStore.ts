/**
 * The in-memory PolicySnapshotStore: reference semantics for every other layer. Runtimes: every one.
 */
import { Effect, Layer } from "effect"
import { PolicySnapshot } from "../core/PolicySnapshot.ts"
import type { BindingScope } from "../core/PolicySnapshotStore.ts"
import {
  AmbiguousPolicyError,
  PolicyConflictError,
  PolicyNotFoundError,
  PolicySnapshotStore
} from "../core/PolicySnapshotStore.ts"

const key = (policy_id: string, version: string) => `${policy_id}@${version}`

const scopeKey = (scope: BindingScope) =>
  scope._tag === "global" ? "global" : scope._tag === "role" ? `role:${scope.role}` : `resource:${scope.resource}`

/** A fresh in-memory store. */
export const make = Effect.sync((): PolicySnapshotStore.Service => {
  const snapshots = new Map<string, PolicySnapshot>()
  const bindings = new Map<string, string>()

  // Read when the effect runs, not when it is built.
  const get = (policy_id: string, version: string) =>
    Effect.suspend(() => {
      const found = snapshots.get(key(policy_id, version))
      return found === undefined
        ? Effect.fail(new PolicyNotFoundError({ detail: `no policy ${key(policy_id, version)} is stored` }))
        : Effect.succeed(found)
    })

  return {
    put: (snapshot) =>
      Effect.suspend(() => {
        const stored = snapshots.get(key(snapshot.policy_id, snapshot.version))
        if (stored === undefined) {
          const { activated_at: _at, activated_by: _by, ...content } = snapshot
          snapshots.set(
            key(snapshot.policy_id, snapshot.version),
            PolicySnapshot.make({ ...content, release_state: "staged" })
          )
          return Effect.void
        }
        return stored.digest === snapshot.digest ? Effect.void : Effect.fail(
          new PolicyConflictError({
            policy_id: snapshot.policy_id,
            version: snapshot.version,
            stored_digest: stored.digest,
            offered_digest: snapshot.digest
          })
        )
      }),
    activate: (policy_id, version, by, at) =>
      Effect.map(get(policy_id, version), (stored) => {
        if (stored.release_state === "active") return stored
        const active = PolicySnapshot.make({ ...stored, release_state: "active", activated_by: by, activated_at: at })
        snapshots.set(key(policy_id, version), active)
        return active
      }),
    bind: (scope, policy_id, version) =>
      Effect.flatMap(get(policy_id, version), (stored) =>
        stored.release_state === "active"
          ? Effect.sync(() => void bindings.set(scopeKey(scope), key(policy_id, version)))
          : Effect.fail(
            new PolicyNotFoundError({ detail: `policy ${key(policy_id, version)} is staged, not active` })
          )),
    resolve: (target) =>
      Effect.suspend((): Effect.Effect<PolicySnapshot, PolicyNotFoundError | AmbiguousPolicyError> => {
        const tiers = [
          target.resource === undefined ? [] : [`resource:${target.resource}`],
          target.roles.map((role) => `role:${role}`),
          ["global"]
        ]
        for (const tier of tiers) {
          const bound = [...new Set(tier.flatMap((scope) => bindings.get(scope) ?? []))]
          if (bound.length > 1) return Effect.fail(new AmbiguousPolicyError({ candidates: bound.sort() }))
          if (bound.length === 1) return Effect.succeed(snapshots.get(bound[0]!)!)
        }
        return Effect.fail(new PolicyNotFoundError({ detail: "no policy is bound for this call" }))
      }),
    get
  }
})

/** The in-memory PolicySnapshotStore. */
export const layer: Layer.Layer<PolicySnapshotStore> = Layer.effect(PolicySnapshotStore, make)
