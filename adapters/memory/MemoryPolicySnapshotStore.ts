/**
 * The in-memory PolicySnapshotStore: reference semantics for every other layer; nothing survives a restart
 * (`durable: false`). It keeps immutable copies (`PolicySnapshot.immutable`), made once when stored, and hands them
 * out as they are. Runtimes: every one.
 */
import { Effect, Layer } from "effect"
import type { Digest } from "../../core/base/Digest.ts"
import { activatable, checkDigest, immutable, PolicySnapshot } from "../../core/policy/PolicySnapshot.ts"
import * as Store from "../../core/policy/PolicySnapshotStore.ts"

/** A binding as resolution reads it. */
interface Bound {
  readonly kind: Store.BindingScope["_tag"]
  readonly name: string
  readonly tenant?: string
  readonly policy_id: string
  readonly version: string
}

const nameOf = (scope: Store.BindingScope) =>
  scope._tag === "global" ? "" : scope._tag === "role" ? scope.role : scope.resource

// One key per (tenant or none, kind, name): no two scopes share one, whatever their names contain.
const scopeKey = (scope: Store.BindingScope) => JSON.stringify([scope.tenant ?? null, scope._tag, nameOf(scope)])

/** A fresh in-memory store. */
export const make = Effect.map(Effect.context<Digest>(), (context): Store.PolicySnapshotStore.Service => {
  const snapshots = new Map<string, PolicySnapshot>()
  const bindings = new Map<string, Bound>()

  // Read when the effect runs, not when it is built.
  const get = (policy_id: string, version: string) =>
    Effect.suspend(() => {
      const found = snapshots.get(Store.pairKey(policy_id, version))
      return found === undefined
        ? Effect.fail(
          new Store.PolicyNotFoundError({ detail: `no policy ${Store.policyLabel(policy_id, version)} is stored` })
        )
        : Effect.succeed(found)
    })

  return {
    durable: false,
    put: (snapshot) =>
      Effect.zipRight(
        Effect.provide(checkDigest(snapshot), context),
        Effect.suspend(() => {
          const stored = snapshots.get(Store.pairKey(snapshot.policy_id, snapshot.version))
          if (stored === undefined) {
            const { activated_at: _at, activated_by: _by, retired_at: _retiredAt, retired_by: _retiredBy, ...content } =
              snapshot
            snapshots.set(
              Store.pairKey(snapshot.policy_id, snapshot.version),
              immutable(PolicySnapshot.make({ ...content, release_state: "staged" }))
            )
            return Effect.void
          }
          return stored.digest === snapshot.digest ? Effect.void : Effect.fail(
            new Store.PolicyConflictError({
              policy_id: snapshot.policy_id,
              version: snapshot.version,
              stored_digest: stored.digest,
              offered_digest: snapshot.digest
            })
          )
        })
      ),
    activate: (policy_id, version, by, at) =>
      Effect.flatMap(Effect.tap(get(policy_id, version), activatable), (stored) => {
        // Checked even when already active, as the SQL store checks before it writes: an invalid one is a defect.
        const active = PolicySnapshot.make({ ...stored, release_state: "active", activated_by: by, activated_at: at })
        if (stored.release_state === "retired") return Effect.fail(Store.notActive(stored))
        if (stored.release_state === "active") return Effect.succeed(stored)
        const frozen = immutable(active)
        snapshots.set(Store.pairKey(policy_id, version), frozen)
        return Effect.succeed(frozen)
      }),
    retire: (policy_id, version, by, at) =>
      Effect.flatMap(get(policy_id, version), (stored) => {
        const retired = PolicySnapshot.make({ ...stored, release_state: "retired", retired_by: by, retired_at: at })
        if (stored.release_state === "retired") return Effect.succeed(stored)
        if (stored.release_state !== "active") return Effect.fail(Store.notActive(stored))
        const frozen = immutable(retired)
        snapshots.set(Store.pairKey(policy_id, version), frozen)
        for (const [scope, bound] of bindings) {
          if (bound.policy_id === policy_id && bound.version === version) bindings.delete(scope)
        }
        return Effect.succeed(frozen)
      }),
    bind: (scope, policy_id, version) =>
      Effect.flatMap(
        Effect.zipRight(Store.checkScope(scope), get(policy_id, version)),
        (stored) =>
          stored.release_state === "active"
            ? Effect.sync(() =>
              void bindings.set(scopeKey(scope), {
                kind: scope._tag,
                name: nameOf(scope),
                ...(scope.tenant === undefined ? {} : { tenant: scope.tenant }),
                policy_id,
                version
              })
            )
            : Effect.fail(Store.notActive(stored))
      ),
    resolve: (target) =>
      Effect.suspend((): Effect.Effect<PolicySnapshot, Store.PolicyNotFoundError | Store.AmbiguousPolicyError> => {
        const applies = [...bindings.values()].filter((bound) =>
          (bound.tenant === undefined || bound.tenant === target.tenant) &&
          (bound.kind === "global" || (bound.kind === "role" ?
            target.roles.includes(bound.name) :
            bound.name === target.resource))
        )
        const refs = Store.selectBindings(applies, target)
        const bound = Store.candidatesOf(refs)
        if (bound.length > 1) return Effect.fail(new Store.AmbiguousPolicyError({ candidates: bound }))
        if (refs.length > 0) return Effect.succeed(snapshots.get(Store.pairKey(refs[0]!.policy_id, refs[0]!.version))!)
        return Effect.fail(new Store.PolicyNotFoundError({ detail: "no policy is bound for this call" }))
      }),
    get
  }
})

/** The in-memory PolicySnapshotStore (checking offered digests with the Digest in context). */
export const layer: Layer.Layer<Store.PolicySnapshotStore, never, Digest> = Layer.effect(
  Store.PolicySnapshotStore,
  make
)
