/**
 * The operation context: the frozen governed projection of one operation, derived by the executor alone from exactly
 * six trusted inputs, the sixth the preflight report stage 3 verified.
 */
import { Effect, Either, Schema } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { IdGenerator, Uuid } from "../base/IdGenerator.ts"
import { trustedMake } from "../base/internal/trusted.ts"
import { ActionBackendRef, Identifier, PolicySnapshotRef } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import type { ExecutionContext } from "../execution/ExecutionContext.ts"
import type { ExecutionRequest } from "../execution/ExecutionRequest.ts"
import { type ActionPreflightReport, AdmissionLease } from "../execution/Preflight.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import type { TaskBoundary } from "./TaskBoundary.ts"

/** The frozen governed projection of one operation, derived by the executor alone; a caller-supplied one is refused. */
export class OperationContext extends Schema.Class<OperationContext>("OperationContext")({
  operation_id: Uuid,
  task_boundary_id: Uuid,
  chain_id: Uuid,
  attempt_id: Uuid,
  request_id: Identifier,
  request_digest: Sha256Hex,
  actor: Identifier,
  tenant: Schema.NullOr(Identifier),
  session_id: Schema.NullOr(Identifier),
  scope: Schema.Struct({
    kind: Schema.Literal("ephemeral_operation", "durable_run"),
    run_id: Schema.NullOr(Identifier),
    owner_attempt_id: Schema.NullOr(Identifier)
  }),
  action: Schema.Struct({ name: Schema.String, version: Schema.String, digest: Sha256Hex }),
  policy: PolicySnapshotRef,
  backend: Schema.Struct({ ...ActionBackendRef.fields, capability_digest: Sha256Hex }),
  /** The preflight report the operation was admitted on: with the fields above, everything its digest covers. */
  preflight: Schema.Struct({
    report_id: Uuid,
    digest: Sha256Hex,
    admission_leases: Schema.Array(AdmissionLease),
    verified_at: Timestamp,
    expires_at: Schema.NullOr(Timestamp)
  }),
  arguments_digest: Sha256Hex
}) {}

/** What the six inputs of an operation context are. */
export interface OperationInputs {
  readonly context: ExecutionContext
  readonly request: ExecutionRequest
  readonly descriptor: ActionDescriptor
  readonly snapshot: PolicySnapshot
  /** What stage 3 verified: the backend with its capability report, and the leases (made by the executor alone). */
  readonly preflight: ActionPreflightReport
  readonly boundary: TaskBoundary
}

/** Why the six inputs of an operation context give none. */
export type DeriveRefusal =
  | "governance.policy_mismatch"
  | "governance.backend_mismatch"
  | "governance.preflight_mismatch"

/** Derive the operation context from exactly six trusted inputs; any disagreement among them is a refusal code. */
export const deriveContext = (inputs: OperationInputs, attempt_id: Uuid, arguments_digest: Sha256Hex) =>
  Effect.flatMap(IdGenerator, (ids) => deriveContextWith(ids, inputs, attempt_id, arguments_digest))

/** `deriveContext` with the IdGenerator service given. */
export const deriveContextWith = (
  ids: IdGenerator.Service,
  inputs: OperationInputs,
  attempt_id: Uuid,
  arguments_digest: Sha256Hex
): Effect.Effect<Either.Either<OperationContext, DeriveRefusal>> => {
  const sync = ids.uuidSync
  return sync !== undefined
    ? Effect.sync(() => deriveContextNow(inputs, attempt_id, arguments_digest, sync()))
    : Effect.map(ids.uuid, (operation_id) => deriveContextNow(inputs, attempt_id, arguments_digest, operation_id))
}

/** `deriveContext` in the calling step, under the operation id given. */
export const deriveContextNow = (
  inputs: OperationInputs,
  attempt_id: Uuid,
  arguments_digest: Sha256Hex,
  operation_id: Uuid
): Either.Either<OperationContext, DeriveRefusal> => {
  const { boundary, context, descriptor, preflight, request, snapshot } = inputs
  const pinned = context.policy_snapshot
  if (
    pinned === undefined || pinned.digest !== snapshot.digest || boundary.policy.digest !== snapshot.digest ||
    boundary.policy.policy_id !== snapshot.policy_id || boundary.policy.version !== snapshot.version
  ) return Either.left("governance.policy_mismatch")
  const backend = preflight.effect_backend
  if (
    backend.id !== context.effect_backend.id || backend.version !== context.effect_backend.version ||
    preflight.capability_report.backend.id !== backend.id ||
    preflight.capability_report.backend.version !== backend.version
  ) return Either.left("governance.backend_mismatch")
  if (preflight.request_id !== request.request_id || preflight.action_descriptor_digest !== descriptor.digest) {
    return Either.left("governance.preflight_mismatch")
  }
  const scope = request.execution_scope
  return Either.right(trustedMake(OperationContext, {
    operation_id,
    task_boundary_id: boundary.task_boundary_id,
    chain_id: boundary.chain_id,
    attempt_id,
    request_id: request.request_id,
    request_digest: preflight.request_digest,
    actor: context.authenticated_principal.id,
    tenant: context.tenant?.id ?? null,
    session_id: request.session_id ?? null,
    scope: scope._tag === "durable_run"
      ? { kind: scope._tag, run_id: scope.run_id, owner_attempt_id: scope.owner_attempt_id ?? null }
      : { kind: scope._tag, run_id: null, owner_attempt_id: null },
    action: { name: descriptor.name, version: descriptor.version, digest: descriptor.digest },
    policy: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
    backend: { id: backend.id, version: backend.version, capability_digest: preflight.capability_digest },
    preflight: {
      report_id: preflight.report_id,
      digest: preflight.digest,
      admission_leases: preflight.admission_leases,
      verified_at: preflight.verified_at,
      expires_at: preflight.expires_at
    },
    arguments_digest
  }))
}
