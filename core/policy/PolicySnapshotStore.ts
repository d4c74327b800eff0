/**
 * The PolicySnapshotStore port: immutable snapshots by (policy id, version), the one staged ->
 * active step and the one active -> retired step, scope bindings with precedence, and historical reads.
 */
import { Context, Effect, Schema } from "effect"
import { Identifier } from "../base/Refs.ts"
import type { Timestamp } from "../base/Time.ts"
import type { PolicyValidationError } from "./PermissionPolicy.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"

/** The same policy id and version put again with another digest. */
export class PolicyConflictError extends Schema.TaggedError<PolicyConflictError>()("PolicyConflictError", {
  policy_id: Schema.String,
  version: Schema.String,
  stored_digest: Schema.String,
  offered_digest: Schema.String
}) {
  override get message() {
    return `policy ${this.policy_id}@${this.version} is stored with digest ${this.stored_digest}; refusing ${this.offered_digest}`
  }
}

/** No snapshot (or no active one) answers. */
export class PolicyNotFoundError extends Schema.TaggedError<PolicyNotFoundError>()("PolicyNotFoundError", {
  detail: Schema.String,
  /** The snapshot is stored but refused (its content does not decode or recompute to its digest): tampering, not absence. */
  refused: Schema.optional(Schema.Literal(true))
}) {
  override get message() {
    return this.detail
  }
}

/** Two bindings tie at the top precedence. */
export class AmbiguousPolicyError extends Schema.TaggedError<AmbiguousPolicyError>()("AmbiguousPolicyError", {
  candidates: Schema.Array(Schema.String)
}) {
  override get message() {
    return `ambiguous policy binding: ${this.candidates.join(", ")}`
  }
}

/** A (policy_id, version) pair as a string no other pair shares: an identifier may itself contain "@". */
export const pairKey = (policy_id: string, version: string): string => `${policy_id.length}:${policy_id}@${version}`

/** A (policy_id, version) pair as errors name it: `id@version`. */
export const policyLabel = (policy_id: string, version: string): string => `${policy_id}@${version}`

/** Why a stored snapshot that is not active cannot be bound, activated or retired. */
export const notActive = (
  snapshot: { readonly policy_id: string; readonly version: string; readonly release_state: string }
) =>
  new PolicyNotFoundError({
    detail: snapshot.release_state === "retired"
      ? `policy ${policyLabel(snapshot.policy_id, snapshot.version)} is retired: it is never active again`
      : `policy ${policyLabel(snapshot.policy_id, snapshot.version)} is staged, not active`
  })

/** The candidates an AmbiguousPolicyError names: each distinct pair once, as `id@version`, sorted. */
export const candidatesOf = (pairs: ReadonlyArray<{ readonly policy_id: string; readonly version: string }>) =>
  [...new Map(pairs.map((pair) => [pairKey(pair.policy_id, pair.version), pair])).values()]
    .map((pair) => policyLabel(pair.policy_id, pair.version))
    .sort()

const tenant = { tenant: Schema.optional(Identifier) }

/**
 * Where a binding applies: every call, calls by a role, or calls on one resource; each for every tenant, or (with
 * `tenant`) for one tenant's calls only.
 */
export const BindingScope = Schema.Union(
  Schema.TaggedStruct("global", tenant),
  Schema.TaggedStruct("role", { role: Identifier, ...tenant }),
  Schema.TaggedStruct("resource", { resource: Identifier, ...tenant })
)

/** Where a binding applies. */
export type BindingScope = typeof BindingScope.Type

/**
 * A scope checked as every store checks one before it binds: a scope that is not a BindingScope (an empty, untrimmed or
 * over-long name or tenant; an unknown kind) is a defect, as an invalid activator is, and binds nothing. Unchecked, an
 * empty tenant would be one tenant's scope to one store and every tenant's to another.
 */
export const checkScope = (scope: BindingScope): Effect.Effect<void> =>
  Schema.validate(BindingScope)(scope).pipe(Effect.asVoid, Effect.orDie)

/** What a call offers to binding resolution: its tenant, the principal's roles, the resource it is on. */
export interface BindingTarget {
  readonly tenant?: string
  readonly roles: ReadonlyArray<string>
  readonly resource?: string
}

// The binding tiers in precedence order.
const tiers = ["resource", "role", "global"] as const

/**
 * The bindings a call resolves to, from those that may apply to it: the top tier that has any, and within it the
 * call's own tenant's bindings over those for every tenant (another tenant's never apply).
 */
export const selectBindings = <B extends { readonly kind: BindingScope["_tag"]; readonly tenant?: string }>(
  bindings: ReadonlyArray<B>,
  target: BindingTarget
): ReadonlyArray<B> => {
  for (const tier of tiers) {
    const inTier = bindings.filter((binding) => binding.kind === tier)
    const own = target.tenant === undefined ? [] : inTier.filter((binding) => binding.tenant === target.tenant)
    if (own.length > 0) return own
    const shared = inTier.filter((binding) => binding.tenant === undefined)
    if (shared.length > 0) return shared
  }
  return []
}

/** Stores snapshots; nothing in a stored snapshot's executable content ever changes. */
export class PolicySnapshotStore extends Context.Tag("writ/PolicySnapshotStore")<
  PolicySnapshotStore,
  PolicySnapshotStore.Service
>() {}

/** The PolicySnapshotStore service. */
export declare namespace PolicySnapshotStore {
  /** put, activate, retire, bind, resolve and historical get. */
  export interface Service {
    /** Whether stored snapshots survive a restart: a certificate re-reads its policy by (id, version) to verify. */
    readonly durable: boolean
    /** Store a staged snapshot; the same (id, version, digest) again is a no-op. */
    readonly put: (snapshot: PolicySnapshot) => Effect.Effect<void, PolicyConflictError>
    /** The only staged -> active step, refused for a snapshot that is not `activatable`; content never changes. */
    readonly activate: (
      policy_id: string,
      version: string,
      by: string,
      at: Timestamp
    ) => Effect.Effect<PolicySnapshot, PolicyNotFoundError | PolicyValidationError>
    /**
     * The only active -> retired step: no binding resolves to it again and no call runs under it, and it stays readable
     * (by `get`) so what it governed still certifies. Retiring a retired snapshot again returns it unchanged.
     */
    readonly retire: (
      policy_id: string,
      version: string,
      by: string,
      at: Timestamp
    ) => Effect.Effect<PolicySnapshot, PolicyNotFoundError>
    /**
     * Bind an active snapshot to a scope, for one tenant or all (replacing that scope's previous binding); a scope that is
     * not a BindingScope is a defect (`checkScope`).
     */
    readonly bind: (scope: BindingScope, policy_id: string, version: string) => Effect.Effect<void, PolicyNotFoundError>
    /**
     * The snapshot bound for a call: resource beats role beats global, and in a tier the call's tenant's binding beats
     * one for every tenant; a tie at the top is ambiguous.
     */
    readonly resolve: (
      target: BindingTarget
    ) => Effect.Effect<PolicySnapshot, PolicyNotFoundError | AmbiguousPolicyError>
    /** Any stored version, whatever its release state. */
    readonly get: (policy_id: string, version: string) => Effect.Effect<PolicySnapshot, PolicyNotFoundError>
  }
}
