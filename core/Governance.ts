/**
 * Governed execution's evidence: task boundaries that mint one chain, the operation context
 * derived from exactly six trusted inputs, one append lock per chain, and the errors that make
 * an evidence failure control flow rather than a log line.
 */
import { Context, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import type { ActionDescriptor } from "./ActionDescriptor.ts"
import { ActionBackendCapabilityReport } from "./ActionExecutionBackend.ts"
import type * as Canonical from "./Canonical.ts"
import { canonical, Digest, Sha256Hex } from "./Digest.ts"
import * as Evidence from "./Evidence.ts"
import type { AppendError, AppendReceipt, EvidenceUnavailableError } from "./EvidenceStore.ts"
import { EvidenceStore } from "./EvidenceStore.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import { ExecutionRequest } from "./ExecutionRequest.ts"
import { IdGenerator, Uuid } from "./IdGenerator.ts"
import { trustedMake } from "./internal/trusted.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"
import { ActionBackendRef, Identifier, PolicySnapshotRef } from "./Refs.ts"
import * as Time from "./Time.ts"

/** A task boundary: one chain every governed operation under it appends to, bound to one policy snapshot. */
export class TaskBoundary extends Schema.Class<TaskBoundary>("TaskBoundary")({
  task_boundary_id: Uuid,
  chain_id: Uuid,
  policy: PolicySnapshotRef,
  opened_at: Time.Timestamp
}) {}

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

/** An evidence append failed; `call_executed` says whether the callable had already run (it is never retried). */
export class GovernanceEvidenceError extends Schema.TaggedError<GovernanceEvidenceError>()("GovernanceEvidenceError", {
  call_executed: Schema.Boolean,
  record_type: Evidence.RecordType,
  operation_id: Schema.NullOr(Schema.String),
  detail: Schema.String
}) {
  override get message() {
    return `governed evidence ${this.record_type} not committed (call_executed: ${this.call_executed}): ${this.detail}`
  }
}

/** The callable failed and recording that failure failed too; the operation can no longer be certified. */
export class OutcomeEvidenceError extends Schema.TaggedError<OutcomeEvidenceError>()("OutcomeEvidenceError", {
  operation_id: Schema.String,
  failure_code: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `callable failed (${this.failure_code}) and callable_failed was not committed: ${this.detail}`
  }
}

/** A task boundary's chain that cannot take a record: it is closed, closing (no new operation), or abandoned (this writer did not open it, so it cannot close it). */
export class BoundaryError extends Schema.TaggedError<BoundaryError>()("BoundaryError", {
  reason: Schema.Literal("closed", "closing", "abandoned", "in_use"),
  chain_id: Schema.String
}) {
  override get message() {
    return `the task boundary of chain ${this.chain_id} is ${this.reason}`
  }
}

/** What the six inputs of an operation context are. */
export interface OperationInputs {
  readonly context: ExecutionContext
  readonly request: ExecutionRequest
  readonly descriptor: ActionDescriptor
  readonly snapshot: PolicySnapshot
  readonly capability: ActionBackendCapabilityReport
  readonly boundary: TaskBoundary
}

const describeCause = (error: { readonly _tag: string; readonly message: string }) => `${error._tag}: ${error.message}`

const encodeRequest = Schema.encodeEither(ExecutionRequest)

// A backend's capability report is an immutable value; its digest is computed once per report.
const capabilityDigests = new WeakMap<ActionBackendCapabilityReport, Sha256Hex>()

/** Derive the operation context from exactly six trusted inputs; any disagreement among them is a refusal code. */
export const deriveContext = (inputs: OperationInputs, attempt_id: Uuid, arguments_digest: Sha256Hex) =>
  Effect.gen(function*() {
    const { boundary, capability, context, descriptor, request, snapshot } = inputs
    const pinned = context.policy_snapshot
    if (
      pinned === undefined || pinned.digest !== snapshot.digest || boundary.policy.digest !== snapshot.digest ||
      boundary.policy.policy_id !== snapshot.policy_id || boundary.policy.version !== snapshot.version
    ) return Either.left("governance.policy_mismatch" as const)
    if (
      capability.backend.id !== context.effect_backend.id ||
      capability.backend.version !== context.effect_backend.version
    ) return Either.left("governance.backend_mismatch" as const)
    const request_digest = yield* Effect.either(Effect.flatMap(encodeRequest(request), canonical))
    if (Either.isLeft(request_digest)) return Either.left("request.not_canonical" as const)
    const capability_digest = capabilityDigests.get(capability) ?? (yield* Effect.orDie(
      Effect.tap(
        Effect.flatMap(Schema.encode(ActionBackendCapabilityReport)(capability), canonical),
        (digest) => Effect.sync(() => capabilityDigests.set(capability, digest))
      )
    ))
    const scope = request.execution_scope
    return Either.right(
      trustedMake(OperationContext, {
        operation_id: yield* IdGenerator.pipe(Effect.flatMap((ids) => ids.uuid)),
        task_boundary_id: boundary.task_boundary_id,
        chain_id: boundary.chain_id,
        attempt_id,
        request_id: request.request_id,
        request_digest: request_digest.right,
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
      })
    )
  })

interface ChainState {
  readonly lock: Effect.Semaphore
  /** The boundary this writer opened on the chain: only the writer that opened a boundary runs and closes it. */
  opened: TaskBoundary | undefined
  head: { readonly sequence: number; readonly hash: Sha256Hex; readonly closed: boolean } | undefined
  /** Operations running under `track`. */
  running: number
  /** Set when a close begins, never unset; open once no operation is running. */
  closing: Effect.Latch | undefined
}

/** Appends to chains: one lock per chain covers head lookup, record construction and append. */
export class EvidenceWriter extends Context.Tag("writ/EvidenceWriter")<EvidenceWriter, EvidenceWriter.Service>() {}

/** The EvidenceWriter service. */
export declare namespace EvidenceWriter {
  /** Seal drafts at their chain's head and append them. */
  export interface Service {
    /** Seal one draft at the chain's head and append it. */
    readonly append: (chain_id: Uuid, draft: Evidence.Draft) => Effect.Effect<AppendReceipt, EvidenceAppendError>
    /**
     * Seal one draft after the record its caller last read (`after`) and append it: if the chain has moved on since,
     * the store refuses it (EvidenceConflictError) instead of the draft following records its caller never saw.
     */
    readonly appendAfter: (
      chain_id: Uuid,
      after: Evidence.StoredRecord,
      draft: Evidence.Draft
    ) => Effect.Effect<AppendReceipt, EvidenceAppendError>
    /** Seal drafts in turn at the chain's head and append them in one commit (see `EvidenceStore.appendAll`); once begun, an append is not interrupted. */
    readonly appendAll: (
      chain_id: Uuid,
      drafts: ReadonlyArray<Evidence.Draft>
    ) => Effect.Effect<ReadonlyArray<AppendReceipt>, EvidenceAppendError>
    /** Run one operation on the chain: a close waits until it has ended, however it ends. */
    readonly track: <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) => Effect.Effect<A, E>
    /**
     * Take ownership of a new boundary's chain: this writer, and no other, runs operations on it and may close it. A
     * chain already opened or already holding records is refused (BoundaryError `in_use`).
     */
    readonly open: (boundary: TaskBoundary) => Effect.Effect<void, BoundaryError | EvidenceUnavailableError>
    /** Whether this writer opened `boundary` (as this very boundary): only then may operations run under it. */
    readonly isOpen: (boundary: TaskBoundary) => boolean
    /**
     * Refuse new `operation_started` on the chain for good, wait until no tracked operation runs, then append `draft`;
     * a chain this writer did not open is abandoned (BoundaryError) and never closes.
     */
    readonly close: (chain_id: Uuid, draft: Evidence.Draft) => Effect.Effect<AppendReceipt, EvidenceAppendError>
  }
}

/** Why a writer could not append. */
export type EvidenceAppendError =
  | AppendError
  | Canonical.CanonicalJsonError
  | BoundaryError

/** A writer over the EvidenceStore in context; a conflict from another writer fails closed and is never retried. */
export const makeWriter = Effect.gen(function*() {
  const store = yield* EvidenceStore
  const digest = yield* Digest
  const ids = yield* IdGenerator
  const chains = new Map<string, ChainState>()

  const stateOf = (chain_id: string) => {
    let state = chains.get(chain_id)
    if (state === undefined) {
      state = {
        lock: Effect.unsafeMakeSemaphore(1),
        opened: undefined,
        head: undefined,
        running: 0,
        closing: undefined
      }
      chains.set(chain_id, state)
    }
    return state
  }

  const loadHead = Effect.fnUntraced(function*(chain_id: string) {
    const head = yield* store.head(chain_id)
    if (Option.isNone(head)) return undefined
    const last = yield* Stream.runHead(store.read(chain_id, head.value.sequence - 1))
    return { ...head.value, closed: Option.isSome(last) && last.value.record_type === "task_closed" }
  })

  const appendFrom = (
    chain_id: Uuid,
    drafts: ReadonlyArray<Evidence.Draft>,
    expected: ChainState["head"] | undefined
  ) => {
    if (drafts.length === 0) return Effect.succeed<ReadonlyArray<AppendReceipt>>([])
    const state = stateOf(chain_id)
    // Waiting for the lock can be interrupted; an append, once begun, runs to its commit or its failure.
    return state.lock.withPermits(1)(
      Effect.uninterruptible(
        Effect.gen(function*() {
          const head = expected ?? state.head ?? (yield* loadHead(chain_id))
          const closing = drafts.findIndex((draft) => draft.record_type === "task_closed")
          if (head?.closed === true || (closing !== -1 && closing < drafts.length - 1)) {
            return yield* new BoundaryError({ reason: "closed", chain_id })
          }
          if (closing !== -1 && state.opened === undefined) {
            return yield* new BoundaryError({ reason: "abandoned", chain_id })
          }
          if (state.closing !== undefined && drafts.some((draft) => draft.record_type === "operation_started")) {
            return yield* new BoundaryError({ reason: "closing", chain_id })
          }
          const record_ids: Array<Uuid> = []
          for (let i = 0; i < drafts.length; i++) record_ids.push(yield* ids.uuid)
          const records = yield* Evidence.sealAllWith(digest, drafts, {
            chain_id,
            sequence: head === undefined ? 0 : head.sequence + 1,
            previous_chain_hash: head?.hash ?? null,
            record_ids,
            created_at: yield* Time.now
          })
          const receipts = yield* store.appendAll(records)
          const last = receipts[receipts.length - 1]
          if (last !== undefined) {
            state.head = { sequence: last.sequence, hash: last.head_hash, closed: closing !== -1 }
          }
          return receipts
        }).pipe(Effect.tapError(() => Effect.sync(() => (state.head = undefined))))
      )
    )
  }
  const appendAll = (chain_id: Uuid, drafts: ReadonlyArray<Evidence.Draft>) => appendFrom(chain_id, drafts, undefined)
  const append = (chain_id: Uuid, draft: Evidence.Draft) =>
    Effect.map(appendAll(chain_id, [draft]), (receipts) => receipts[0]!)
  const appendAfter = (chain_id: Uuid, after: Evidence.StoredRecord, draft: Evidence.Draft) =>
    Effect.map(
      appendFrom(chain_id, [draft], {
        sequence: after.sequence,
        hash: after.chain_hash as Sha256Hex,
        closed: after.record_type === "task_closed"
      }),
      (receipts) => receipts[0]!
    )

  // Counted and released in one uninterruptible region, so no exit of the operation can skip the release.
  const track = <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) =>
    Effect.uninterruptibleMask((restore) => {
      const state = stateOf(chain_id)
      state.running++
      return Effect.ensuring(
        restore(operation),
        Effect.sync(() => {
          if (--state.running === 0) state.closing?.unsafeOpen()
        })
      )
    })

  // The wait holds no lock; an interrupted close leaves the chain closing, and a later close completes it.
  const close = (chain_id: Uuid, draft: Evidence.Draft) =>
    Effect.suspend(() => {
      const state = stateOf(chain_id)
      state.closing ??= Effect.unsafeMakeLatch(state.running === 0)
      return Effect.zipRight(state.closing.await, append(chain_id, draft))
    })

  const open = (boundary: TaskBoundary) =>
    Effect.suspend(() => {
      const { chain_id } = boundary
      const state = stateOf(chain_id)
      return state.lock.withPermits(1)(Effect.gen(function*() {
        if (state.opened !== undefined || state.head !== undefined || Option.isSome(yield* store.head(chain_id))) {
          return yield* new BoundaryError({ reason: "in_use", chain_id })
        }
        state.opened = boundary
      }))
    })

  const isOpen = (boundary: TaskBoundary) => {
    const opened = chains.get(boundary.chain_id)?.opened
    return opened !== undefined && opened.task_boundary_id === boundary.task_boundary_id &&
      opened.opened_at === boundary.opened_at &&
      opened.policy.policy_id === boundary.policy.policy_id && opened.policy.version === boundary.policy.version &&
      opened.policy.digest === boundary.policy.digest
  }

  return EvidenceWriter.of({ append, appendAfter, appendAll, track, open, isOpen, close })
})

/** The one writer every governed executor and task boundary of a process shares. */
export const layerWriter = Layer.effect(EvidenceWriter, makeWriter)

/**
 * Open a task boundary under one policy snapshot: it mints the chain its operations append to, owned by the process's
 * writer. Only that writer closes it: a boundary whose process ends first is abandoned and can never be certified.
 */
export const openBoundary = (policy: PolicySnapshotRef) =>
  Effect.gen(function*() {
    const ids = yield* IdGenerator
    const boundary = new TaskBoundary({
      task_boundary_id: yield* ids.uuid,
      chain_id: yield* ids.uuid,
      policy: { policy_id: policy.policy_id, version: policy.version, digest: policy.digest },
      opened_at: yield* Time.now
    })
    yield* (yield* EvidenceWriter).open(boundary)
    return boundary
  })

/** Close a task boundary with its one `task_closed` once its operations in flight end, refusing new ones; a second close fails with BoundaryError. */
export const closeBoundary = (boundary: TaskBoundary) =>
  Effect.flatMap(EvidenceWriter, (writer) =>
    writer.close(boundary.chain_id, {
      record_type: "task_closed",
      operation_id: null,
      policy_id: boundary.policy.policy_id,
      policy_version: boundary.policy.version,
      payload: {
        task_boundary_id: boundary.task_boundary_id,
        policy_digest: boundary.policy.digest,
        opened_at: boundary.opened_at
      }
    }))

/** Describe a store or canonicalisation failure for an error's detail, without any payload. */
export const failureDetail = (error: EvidenceAppendError | EvidenceUnavailableError): string => describeCause(error)
