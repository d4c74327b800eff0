import { Cause, Deferred, Effect, Either, Option, Schema } from "effect"
import * as IdGenerator from "../../base/IdGenerator.ts"
import { trustedMake } from "../../base/internal/trusted.ts"
import { PrincipalRef, TenantRef } from "../../base/Refs.ts"
import type { ActionBackendRef } from "../../base/Refs.ts"
import { PolicySnapshotRef } from "../../base/Refs.ts"
import { EvidenceStore } from "../../evidence/EvidenceStore.ts"
import { closeBoundary } from "../../evidence/EvidenceWriter.ts"
import type { TaskBoundary } from "../../evidence/TaskBoundary.ts"
import * as TaskCertificate from "../../evidence/TaskCertificate.ts"
import type { AmbiguousPolicyError, BindingTarget, PolicyNotFoundError } from "../../policy/PolicySnapshotStore.ts"
import { PolicySnapshotStore } from "../../policy/PolicySnapshotStore.ts"
import { type Run, RunTerminal, type TerminalStatus } from "../../state/Run.ts"
import { RunStore } from "../../state/RunStore.ts"
import type { Binding, ExecutionContext } from "../ExecutionContext.ts"
import type { ExecutionOutcome } from "../ExecutionOutcome.ts"
import { callExecuted, reasonCode } from "../ExecutionOutcome.ts"
import { ExecutionRequest } from "../ExecutionRequest.ts"
import { EphemeralOperation } from "../ExecutionScope.ts"
import type { ExecutionScopeRef } from "../ExecutionScope.ts"
import { mintContext } from "./mint.ts"

/** One call as operator input names it: untrusted, decoded by `prepare`. */
export interface Call {
  readonly action: string
  readonly version?: string
  readonly arguments?: Record<string, unknown>
  readonly request_id?: string
  readonly principal_claim?: string
  /** An RFC 3339 UTC instant, as `Time.Timestamp` prints. */
  readonly deadline?: string
  readonly idempotency_key?: string
  readonly approval_id?: string
}

/**
 * What the host authenticated and chose for the call: its principal (with its roles) and tenant, backend, scope (a new
 * ephemeral one by default), and the policy, named, or else resolved from the store's bindings when there is a store.
 */
export interface Trust {
  readonly principal: string
  readonly roles?: ReadonlyArray<string>
  readonly tenant?: string
  readonly resource?: string
  readonly effect_backend: ActionBackendRef
  readonly policy_snapshot?: PolicySnapshotRef
  readonly execution_scope?: ExecutionScopeRef
}

const decodeRequest = Schema.decodeUnknown(ExecutionRequest)
const decodePrincipal = Schema.decodeUnknown(PrincipalRef)
const decodeTenant = Schema.decodeUnknown(TenantRef)

export const bind = (binding: Binding): Effect.Effect<ExecutionContext, never, IdGenerator.IdGenerator> =>
  Effect.map(IdGenerator.uuid, (context_id) => mintContext(binding, context_id))

/** What a binding offers the store's resolution: the principal's roles and the resource the call is on. */
export type Resolving = Binding & Partial<Omit<BindingTarget, "tenant">>

export const resolve = (
  binding: Resolving
): Effect.Effect<
  ExecutionContext,
  AmbiguousPolicyError | PolicyNotFoundError,
  IdGenerator.IdGenerator | PolicySnapshotStore
> => {
  const { resource, roles, ...fields } = binding
  if (fields.policy_snapshot !== undefined) return bind(fields)
  return Effect.flatMap(
    PolicySnapshotStore,
    (store) =>
      store.resolve({
        roles: roles ?? [],
        ...(resource === undefined ? {} : { resource }),
        ...(fields.tenant === undefined ? {} : { tenant: fields.tenant.id })
      }).pipe(
        Effect.map((snapshot) => ({
          ...fields,
          policy_snapshot: PolicySnapshotRef.make({
            policy_id: snapshot.policy_id,
            version: snapshot.version,
            digest: snapshot.digest
          })
        })),
        // Nothing bound: the context pins no policy, which a governed executor denies (`policy.unbound`). A bound
        // snapshot the store refuses (tampered) is no absence: it fails, naming it.
        Effect.catchIf(
          (error): error is PolicyNotFoundError => error._tag === "PolicyNotFoundError" && error.refused !== true,
          () => Effect.succeed(fields)
        ),
        Effect.flatMap(bind)
      )
  )
}

export const prepare = Effect.fnUntraced(function*(call: Call, trust: Trust) {
  // A fresh id is a Uuid already: the scope is built without validating it again.
  const scope = trust.execution_scope ?? trustedMake(EphemeralOperation, { scope_id: yield* IdGenerator.uuid })
  const decoded = yield* decodeRequest({
    request_id: call.request_id ?? (yield* IdGenerator.uuid),
    action: call.version === undefined ? { name: call.action } : { name: call.action, version: call.version },
    arguments: call.arguments ?? {},
    execution_scope: scope,
    ...(call.principal_claim === undefined ? {} : { principal_claim: { id: call.principal_claim } }),
    ...(call.deadline === undefined ? {} : { deadline: call.deadline }),
    ...(call.idempotency_key === undefined ? {} : { idempotency_key: call.idempotency_key }),
    ...(call.approval_id === undefined ? {} : { approval_id: call.approval_id })
  })
  // Decoding a record assigns an own `__proto__` key through the prototype setter, so it would vanish: such arguments
  // reach the executor as given, which refuses them (`arguments.proto_key`) instead of running without the key.
  const args = call.arguments
  const request = args !== undefined && Object.hasOwn(args, "__proto__")
    ? new ExecutionRequest({ ...decoded, arguments: args }, { disableValidation: true })
    : decoded
  // What the host authenticated is checked as a call's fields are: a malformed principal or tenant (an empty header,
  // say) is a ParseError naming it, never a thrown one, and an empty tenant never reaches binding resolution.
  const principal = yield* decodePrincipal({ id: trust.principal })
  const tenant = trust.tenant === undefined ? undefined : yield* decodeTenant({ id: trust.tenant })
  const binding: Resolving = {
    execution_scope: scope,
    authenticated_principal: principal,
    effect_backend: trust.effect_backend,
    ...(tenant === undefined ? {} : { tenant }),
    ...(trust.roles === undefined ? {} : { roles: trust.roles }),
    ...(trust.resource === undefined ? {} : { resource: trust.resource }),
    ...(trust.policy_snapshot === undefined ? {} : { policy_snapshot: trust.policy_snapshot })
  }
  // Without a snapshot named, the store (when there is one) resolves the active one bound for the call.
  const store = yield* Effect.serviceOption(PolicySnapshotStore)
  const context = trust.policy_snapshot !== undefined || Option.isNone(store)
    ? yield* bind(binding)
    : yield* Effect.provideService(resolve(binding), PolicySnapshotStore, store.value)
  return { request, context }
})

const statusOf = (outcome: ExecutionOutcome): TerminalStatus =>
  outcome._tag === "succeeded"
    ? "completed"
    : outcome._tag === "cancelled" || outcome._tag === "timed_out"
    ? outcome._tag
    : "failed"

// The work is whole only when the call succeeded, unknown when it may have run and its result is lost.
const qualityOf = (outcome: ExecutionOutcome): RunTerminal["quality"] =>
  outcome._tag === "succeeded"
    ? "full"
    : outcome._tag === "ambiguous" || (outcome._tag !== "failed" && callExecuted(outcome))
    ? "indeterminate"
    : "partial"

export const terminalOf = (outcome: ExecutionOutcome) =>
  RunTerminal.make({
    status: statusOf(outcome),
    acceptance: "not_applicable",
    quality: qualityOf(outcome),
    reason_code: reasonCode(outcome),
    evidence: [],
    cost: null
  })

export const createdRun = (created: Deferred.Deferred<Run>) =>
  Effect.flatMap(
    Deferred.isDone(created),
    (done) => done ? Effect.map(Deferred.await(created), Option.some) : Effect.succeed(Option.none<Run>())
  )

export const endRunOnError =
  (created: Deferred.Deferred<Run>, prefix: string) => <A, E, R>(body: Effect.Effect<A, E, R>) =>
    Effect.onError(body, (cause) =>
      Effect.flatMap(Effect.zip(RunStore, createdRun(created)), ([state, run]) => {
        if (Option.isNone(run)) return Effect.void
        const interrupted = Cause.isInterruptedOnly(cause)
        const failure = Cause.failureOption(cause)
        const tag = Option.isSome(failure) ? (failure.value as { readonly _tag?: string })._tag ?? "error" : "defect"
        return Effect.exit(state.finish(
          run.value.run_id,
          RunTerminal.make({
            status: interrupted ? "cancelled" : "failed",
            acceptance: "not_applicable",
            quality: "indeterminate",
            reason_code: interrupted ? `${prefix}.interrupted` : `${prefix}.${tag}`,
            evidence: [],
            cost: null
          })
        ))
      }))

export const closeAndCertify = Effect.fnUntraced(function*(boundary: TaskBoundary, certify: boolean) {
  const closed = yield* closeBoundary(boundary)
  const verification = yield* (yield* EvidenceStore).verify(boundary.chain_id, closed.head_hash)
  if (!certify) return { closed, verification, certificate: undefined }
  const minted = yield* Effect.either(TaskCertificate.mint(boundary.chain_id, closed.head_hash))
  if (Either.isLeft(minted)) {
    if (minted.left.reason === "unavailable") return yield* minted.left
    return { closed, verification, certificate: { minted: false as const, error: minted.left } }
  }
  const checked = yield* TaskCertificate.verify(minted.right)
  return { closed, verification, certificate: { minted: true as const, certificate: minted.right, checked } }
})
