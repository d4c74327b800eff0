/**
 * The trusted context of one execution: built by a composition root's ingress from what it
 * authenticated, never decoded from the request it authorizes.
 */
import { Effect, Schema } from "effect"
import * as IdGenerator from "../base/IdGenerator.ts"
import { ActionBackendRef, Identifier, PolicySnapshotRef, PrincipalRef, TenantRef } from "../base/Refs.ts"
import { ExecutionScopeRef } from "./ExecutionScope.ts"

/** The trusted binding of scope, principal, tenant, policy and backend for one execution. */
export class ExecutionContext extends Schema.Class<ExecutionContext>("ExecutionContext")({
  context_id: IdGenerator.Uuid,
  execution_scope: ExecutionScopeRef,
  authenticated_principal: PrincipalRef,
  tenant: Schema.optional(TenantRef),
  policy_snapshot: Schema.optional(PolicySnapshotRef),
  effect_backend: ActionBackendRef,
  authentication_evidence: Schema.optionalWith(Schema.Array(Identifier), { default: () => [] })
}) {}

/** What an ingress authenticated, from which it binds a context. */
export interface Binding {
  readonly execution_scope: ExecutionScopeRef
  readonly authenticated_principal: PrincipalRef
  readonly tenant?: TenantRef
  readonly policy_snapshot?: PolicySnapshotRef
  readonly effect_backend: ActionBackendRef
  readonly authentication_evidence?: ReadonlyArray<string>
}

/** Trusted ingress: bind an authenticated principal and scope into a context with a fresh id. */
export const bind = (binding: Binding): Effect.Effect<ExecutionContext, never, IdGenerator.IdGenerator> =>
  Effect.map(IdGenerator.uuid, (context_id) => ExecutionContext.make({ ...binding, context_id }))
