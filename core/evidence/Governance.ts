/**
 * Governed execution's evidence: task boundaries that mint one chain, the operation context
 * derived from exactly six trusted inputs, one append lock per chain, and the errors that make
 * an evidence failure control flow rather than a log line.
 */
import { Chunk, Context, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import { ActionBackendCapabilityReport } from "../action/ActionExecutionBackend.ts"
import type * as Canonical from "../base/Canonical.ts"
import { canonicalWith, Digest, Sha256Hex } from "../base/Digest.ts"
import { IdGenerator, Uuid } from "../base/IdGenerator.ts"
import { trustedMake } from "../base/internal/trusted.ts"
import { ActionBackendRef, Identifier, PolicySnapshotRef } from "../base/Refs.ts"
import * as Time from "../base/Time.ts"
import type { ExecutionContext } from "../execution/ExecutionContext.ts"
import { ExecutionRequest } from "../execution/ExecutionRequest.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import * as Evidence from "./Evidence.ts"
import type { AppendError, AppendReceipt, EvidenceUnavailableError } from "./EvidenceStore.ts"
import { EvidenceStore } from "./EvidenceStore.ts"

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

/**
 * A task boundary's chain that cannot take a record: it is closed, closing (no new operation), or abandoned (this writer
 * did not open it, so it cannot close it); or the boundary offered is not the one opened on its chain: another
 * `task_boundary_id` or `opened_at` (`boundary_mismatch`), or another policy (`policy_mismatch`).
 */
export class BoundaryError extends Schema.TaggedError<BoundaryError>()("BoundaryError", {
  reason: Schema.Literal("closed", "closing", "abandoned", "in_use", "boundary_mismatch", "policy_mismatch"),
  chain_id: Schema.String
}) {
  override get message() {
    switch (this.reason) {
      case "boundary_mismatch":
        return `the task boundary offered for chain ${this.chain_id} is not the one opened on it`
      case "policy_mismatch":
        return `the task boundary offered for chain ${this.chain_id} names another policy than the one opened on it`
      default:
        return `the task boundary of chain ${this.chain_id} is ${this.reason}`
    }
  }
}

/**
 * A record for an operation its writer cannot take: the operation is still running in this process (no one else may
 * conclude it), or another writer (a forced recovery) has already concluded it.
 */
export class OperationOwnershipError extends Schema.TaggedError<OperationOwnershipError>()("OperationOwnershipError", {
  reason: Schema.Literal("running_here", "concluded_elsewhere"),
  chain_id: Schema.String,
  operation_id: Schema.String
}) {
  override get message() {
    return this.reason === "running_here"
      ? `operation ${this.operation_id} on chain ${this.chain_id} is still running in this process`
      : `operation ${this.operation_id} on chain ${this.chain_id} was already concluded by another writer`
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
  Effect.gen(function*() {
    const canonical = (value: unknown) => canonicalWith(digest, value)
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
        operation_id: yield* ids.uuid,
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
  /** The last head this writer knew; `fresh` while its own last append on the chain succeeded. */
  head: { readonly sequence: number; readonly hash: Sha256Hex; readonly closed: boolean } | undefined
  fresh: boolean
  /** Operations whose executor still runs them here (from their start to `release`): true once concluded elsewhere. */
  readonly operations: Map<string, boolean>
  /** Terminal drafts for starts whose append failed, by operation: owed if the start turns out committed. */
  readonly unconfirmed: Map<string, Evidence.Draft>
  /** Terminal drafts owed for starts found committed, appended ahead of the chain's next records. */
  owed: ReadonlyArray<Evidence.Draft>
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
    /**
     * Seal drafts in turn at the chain's head and append them in one commit (see `EvidenceStore.appendAll`); once
     * begun, an append is not interrupted. `ifCommitted`: the terminal records owed should the append fail yet turn out
     * committed (its answer lost), asked for only then; the writer appends them, once, ahead of the chain's next records.
     */
    readonly appendAll: (
      chain_id: Uuid,
      drafts: ReadonlyArray<Evidence.Draft>,
      ifCommitted?: () => ReadonlyArray<Evidence.Draft>
    ) => Effect.Effect<ReadonlyArray<AppendReceipt>, EvidenceAppendError>
    /** The executor that started an operation is done with it, however it ended: it no longer runs here. */
    readonly release: (chain_id: Uuid, operation_id: string) => Effect.Effect<void>
    /** Run one operation on the chain: a close waits until it has ended, however it ends. */
    readonly track: <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) => Effect.Effect<A, E>
    /**
     * Take ownership of a new boundary's chain: this writer, and no other, runs operations on it and may close it. A
     * chain already opened or already holding records is refused (BoundaryError `in_use`).
     */
    readonly open: (boundary: TaskBoundary) => Effect.Effect<void, BoundaryError | EvidenceUnavailableError>
    /** Whether this writer opened `boundary` (as this very boundary) and has not begun closing it: only then may operations start under it. */
    readonly isOpen: (boundary: TaskBoundary) => boolean
    /**
     * Refuse new `operation_started` on the boundary's chain for good, wait until no tracked operation runs, then append
     * its `task_closed`; a chain this writer did not open is abandoned (BoundaryError) and never closes, and a boundary
     * that is not the one opened on its chain (another id, opening time or policy) is refused before anything changes.
     */
    readonly close: (boundary: TaskBoundary) => Effect.Effect<AppendReceipt, EvidenceAppendError>
    /** How many chains the writer keeps state for: the boundaries it opened and has not closed, and chains it appended to otherwise. */
    readonly held: () => number
  }
}

/** Why a writer could not append. */
export type EvidenceAppendError =
  | AppendError
  | Canonical.CanonicalJsonError
  | BoundaryError
  | OperationOwnershipError

// How a boundary offered for a chain differs from the one opened on it, if it does.
const mismatchOf = (opened: TaskBoundary, offered: TaskBoundary) =>
  opened.task_boundary_id !== offered.task_boundary_id || opened.opened_at !== offered.opened_at
    ? "boundary_mismatch" as const
    : opened.policy.policy_id !== offered.policy.policy_id || opened.policy.version !== offered.policy.version ||
        opened.policy.digest !== offered.policy.digest
    ? "policy_mismatch" as const
    : undefined

// A boundary's one `task_closed`.
const closedDraft = (boundary: TaskBoundary): Evidence.Draft => ({
  record_type: "task_closed",
  operation_id: null,
  policy_id: boundary.policy.policy_id,
  policy_version: boundary.policy.version,
  payload: {
    task_boundary_id: boundary.task_boundary_id,
    policy_digest: boundary.policy.digest,
    opened_at: boundary.opened_at
  }
})

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
        fresh: false,
        operations: new Map(),
        unconfirmed: new Map(),
        owed: [],
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

  // The chain's head after a failed append, with what the records since tell about this writer's operations: one
  // another writer concluded, a start whose answer was lost but which committed (its terminal is owed), and an owed
  // terminal that committed after all.
  const catchUp = Effect.fnUntraced(function*(chain_id: string, state: ChainState) {
    const known = state.head
    if (state.operations.size === 0 && state.unconfirmed.size === 0 && state.owed.length === 0) {
      return yield* loadHead(chain_id)
    }
    const since = Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id, known?.sequence ?? -1)))
    for (const record of since) {
      const operation_id = record.operation_id
      if (operation_id === null) continue
      if (record.record_type === "operation_started") {
        const terminal = state.unconfirmed.get(operation_id)
        if (terminal !== undefined) state.owed = [...state.owed, terminal]
      } else if (Evidence.terminalTypes.has(record.record_type)) {
        if (state.owed.some((draft) => draft.operation_id === operation_id)) {
          state.owed = state.owed.filter((draft) => draft.operation_id !== operation_id)
        } else if (state.operations.has(operation_id)) {
          state.operations.set(operation_id, true)
        }
      }
    }
    state.unconfirmed.clear()
    const last = since[since.length - 1]
    return last === undefined ? known : {
      sequence: last.sequence,
      hash: last.chain_hash as Sha256Hex,
      closed: last.record_type === "task_closed"
    }
  })

  // A record for one of this writer's operations that it must refuse: concluded elsewhere, or (from another caller)
  // still running here.
  const refusal = (chain_id: string, state: ChainState, drafts: ReadonlyArray<Evidence.Draft>, foreign: boolean) => {
    for (const draft of drafts) {
      const concluded = draft.operation_id === null ? undefined : state.operations.get(draft.operation_id)
      if (concluded === undefined || (concluded === false && !foreign)) continue
      return new OperationOwnershipError({
        reason: concluded ? "concluded_elsewhere" : "running_here",
        chain_id,
        operation_id: draft.operation_id!
      })
    }
    return undefined
  }

  // A committed terminal (a forced recovery's, say) settles what the writer still owed or awaited for its operation.
  const concluded = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
    for (const draft of drafts) {
      const operation_id = draft.operation_id
      if (operation_id === null || !Evidence.terminalTypes.has(draft.record_type)) continue
      state.unconfirmed.delete(operation_id)
      if (state.owed.length > 0) state.owed = state.owed.filter((owed) => owed.operation_id !== operation_id)
    }
  }

  // An executor's committed start: its operation runs here until released.
  const started = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
    for (const draft of drafts) {
      if (draft.operation_id !== null && draft.record_type === "operation_started") {
        state.operations.set(draft.operation_id, false)
      }
    }
  }

  const appendFrom = (
    chain_id: Uuid,
    asked: ReadonlyArray<Evidence.Draft>,
    expected: ChainState["head"] | undefined,
    ifCommitted?: () => ReadonlyArray<Evidence.Draft>
  ) => {
    const foreign = expected !== undefined
    if (asked.length === 0) return Effect.succeed<ReadonlyArray<AppendReceipt>>([])
    const state = stateOf(chain_id)
    // Waiting for the lock can be interrupted; an append, once begun, runs to its commit or its failure.
    return state.lock.withPermits(1)(
      Effect.uninterruptible(
        Effect.gen(function*() {
          const tracking = state.operations.size > 0 || state.unconfirmed.size > 0 || state.owed.length > 0
          if (!state.fresh && (!foreign || tracking)) {
            state.head = yield* catchUp(chain_id, state)
            state.fresh = true
          }
          const refused = refusal(chain_id, state, asked, foreign)
          if (refused !== undefined) return yield* refused
          const owed = foreign ? [] : state.owed
          const drafts = owed.length === 0 ? asked : [...owed, ...asked]
          const head = expected ?? state.head
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
            state.fresh = true
          }
          if (owed.length > 0) state.owed = []
          concluded(state, asked)
          if (ifCommitted !== undefined) started(state, asked)
          return owed.length === 0 ? receipts : receipts.slice(owed.length)
        }).pipe(Effect.tapError(() =>
          Effect.sync(() => {
            state.fresh = false
            for (const terminal of ifCommitted?.() ?? []) state.unconfirmed.set(terminal.operation_id!, terminal)
          })
        ))
      )
    )
  }
  const appendAll = (
    chain_id: Uuid,
    drafts: ReadonlyArray<Evidence.Draft>,
    ifCommitted?: () => ReadonlyArray<Evidence.Draft>
  ) => appendFrom(chain_id, drafts, undefined, ifCommitted)
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

  // Counted and released in one uninterruptible region, so no exit of the operation can skip the release. A chain this
  // writer holds nothing for has no boundary open here: the operation is refused before it starts, and leaves no state.
  const track = <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) =>
    Effect.uninterruptibleMask((restore) => {
      const state = chains.get(chain_id)
      if (state === undefined) return restore(operation)
      state.running++
      return Effect.ensuring(
        restore(operation),
        Effect.sync(() => {
          if (--state.running === 0) state.closing?.unsafeOpen()
        })
      )
    })

  // The wait holds no lock; an interrupted close leaves the chain closing, and a later close completes it. A boundary
  // other than the one opened is refused before the chain starts closing: it must not stop the real one's operations.
  // Once closed the chain takes no record, so the writer forgets it: the store's head says it is closed from then on.
  const close = (boundary: TaskBoundary) =>
    Effect.suspend(() => {
      const { chain_id } = boundary
      const state = stateOf(chain_id)
      const mismatch = state.opened === undefined ? undefined : mismatchOf(state.opened, boundary)
      if (mismatch !== undefined) return Effect.fail(new BoundaryError({ reason: mismatch, chain_id }))
      state.closing ??= Effect.unsafeMakeLatch(state.running === 0)
      return Effect.zipRight(state.closing.await, append(chain_id, closedDraft(boundary))).pipe(
        Effect.ensuring(Effect.sync(() => {
          if (chains.get(chain_id) === state && state.head?.closed === true) chains.delete(chain_id)
        }))
      )
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
    const state = chains.get(boundary.chain_id)
    return state?.opened !== undefined && state.closing === undefined &&
      mismatchOf(state.opened, boundary) === undefined
  }

  const release = (chain_id: Uuid, operation_id: string) =>
    Effect.sync(() => void chains.get(chain_id)?.operations.delete(operation_id))

  return EvidenceWriter.of({
    append,
    appendAfter,
    appendAll,
    release,
    track,
    open,
    isOpen,
    close,
    held: () => chains.size
  })
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

/**
 * Close a task boundary with its one `task_closed` once its operations in flight end, refusing new ones; a second close
 * fails with BoundaryError (`closed`, whatever boundary value it names), and so does a boundary value that is not the
 * one opened on a chain still open (`boundary_mismatch`, `policy_mismatch`).
 */
export const closeBoundary = (boundary: TaskBoundary) =>
  Effect.flatMap(EvidenceWriter, (writer) => writer.close(boundary))

/** Describe a store or canonicalisation failure for an error's detail, without any payload. */
export const failureDetail = (error: EvidenceAppendError | EvidenceUnavailableError): string => describeCause(error)
