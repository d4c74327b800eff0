/**
 * The operation context: the frozen governed projection of one operation, derived by the executor alone from exactly
 * six trusted inputs.
 */
import { Effect, Either, Schema } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import { ActionBackendCapabilityReport } from "../action/ActionExecutionBackend.ts"
import * as Canonical from "../base/Canonical.ts"
import { canonicalWith, Digest, Sha256Hex, sha256TextWith } from "../base/Digest.ts"
import { IdGenerator, Uuid } from "../base/IdGenerator.ts"
import { trustedMake } from "../base/internal/trusted.ts"
import { ActionBackendRef, Identifier, PolicySnapshotRef } from "../base/Refs.ts"
import type { ExecutionContext } from "../execution/ExecutionContext.ts"
import { ExecutionRequest } from "../execution/ExecutionRequest.ts"
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
  arguments_digest: Sha256Hex
}) {}

/** What the six inputs of an operation context are. */
export interface OperationInputs {
  readonly context: ExecutionContext
  readonly request: ExecutionRequest
  readonly descriptor: ActionDescriptor
  readonly snapshot: PolicySnapshot
  readonly capability: ActionBackendCapabilityReport
  readonly boundary: TaskBoundary
}

const encodeRequest = Schema.encodeEither(ExecutionRequest)

// A backend's capability report is an immutable value; its digest is computed once per report.
const capabilityDigests = new WeakMap<ActionBackendCapabilityReport, Sha256Hex>()

/** Why the six inputs of an operation context give none. */
export type DeriveRefusal = "governance.policy_mismatch" | "governance.backend_mismatch" | "request.not_canonical"

/** Derive the operation context from exactly six trusted inputs; any disagreement among them is a refusal code. */
export const deriveContext = (inputs: OperationInputs, attempt_id: Uuid, arguments_digest: Sha256Hex) =>
  Effect.flatMap(
    Digest,
    (digest) =>
      Effect.flatMap(IdGenerator, (ids) => deriveContextWith(digest, ids, inputs, attempt_id, arguments_digest))
  )

/** `deriveContext` with the Digest and IdGenerator services given. */
export const deriveContextWith = (
  digest: Digest.Service,
  ids: IdGenerator.Service,
  inputs: OperationInputs,
  attempt_id: Uuid,
  arguments_digest: Sha256Hex
) =>
  Effect.suspend((): Effect.Effect<Either.Either<OperationContext, DeriveRefusal>> => {
    const { boundary, capability, context, descriptor, request, snapshot } = inputs
    const pinned = context.policy_snapshot
    if (
      pinned === undefined || pinned.digest !== snapshot.digest || boundary.policy.digest !== snapshot.digest ||
      boundary.policy.policy_id !== snapshot.policy_id || boundary.policy.version !== snapshot.version
    ) return Effect.succeed(Either.left("governance.policy_mismatch"))
    if (
      capability.backend.id !== context.effect_backend.id ||
      capability.backend.version !== context.effect_backend.version
    ) return Effect.succeed(Either.left("governance.backend_mismatch"))
    const requestText = Either.flatMap(encodeRequest(request), Canonical.stringify)
    if (Either.isLeft(requestText)) return Effect.succeed(Either.left("request.not_canonical"))
    const known = capabilityDigests.get(capability)
    const capabilityDigest = known !== undefined ? Effect.succeed(known) : Effect.orDie(
      Effect.tap(
        Effect.flatMap(
          Schema.encode(ActionBackendCapabilityReport)(capability),
          (value) => canonicalWith(digest, value)
        ),
        (computed) => Effect.sync(() => capabilityDigests.set(capability, computed))
      )
    )
    const scope = request.execution_scope
    return Effect.zipWith(
      Effect.zip(sha256TextWith(digest, requestText.right), capabilityDigest),
      ids.uuid,
      ([request_digest, capability_digest], operation_id) =>
        Either.right(trustedMake(OperationContext, {
          operation_id,
          task_boundary_id: boundary.task_boundary_id,
          chain_id: boundary.chain_id,
          attempt_id,
          request_id: request.request_id,
          request_digest,
          actor: context.authenticated_principal.id,
          tenant: context.tenant?.id ?? null,
          session_id: request.session_id ?? null,
          scope: scope._tag === "durable_run"
            ? { kind: scope._tag, run_id: scope.run_id, owner_attempt_id: scope.owner_attempt_id ?? null }
            : { kind: scope._tag, run_id: null, owner_attempt_id: null },
          action: { name: descriptor.name, version: descriptor.version, digest: descriptor.digest },
          policy: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
          backend: { id: capability.backend.id, version: capability.backend.version, capability_digest },
          arguments_digest
        }))
    )
  })
