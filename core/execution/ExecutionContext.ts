/**
 * The trusted context of one execution: minted by a composition root's ingress (`Ingress.bind`, `Ingress.resolve`)
 * from what it authenticated. The executor refuses any other instance (`context.untrusted`): one built by `make`,
 * decoded from a wire format, or copied from a minted one.
 */
import { Schema } from "effect"
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

/** What an ingress authenticated, from which it mints a context. */
export interface Binding {
  readonly execution_scope: ExecutionScopeRef
  readonly authenticated_principal: PrincipalRef
  readonly tenant?: TenantRef
  readonly policy_snapshot?: PolicySnapshotRef
  readonly effect_backend: ActionBackendRef
  readonly authentication_evidence?: ReadonlyArray<string>
}
