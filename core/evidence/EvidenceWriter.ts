/**
 * The evidence writer: it seals governed drafts at their chain's head and appends them, one lock per chain; and the
 * errors that make an evidence failure control flow rather than a log line.
 */
import { Context, Effect, Layer, Schema } from "effect"
import type * as Canonical from "../base/Canonical.ts"
import { Digest } from "../base/Digest.ts"
import { IdGenerator, type Uuid } from "../base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../base/Refs.ts"
import * as Time from "../base/Time.ts"
import * as Evidence from "./Evidence.ts"
import type { AppendError, AppendReceipt, EvidenceUnavailableError } from "./EvidenceStore.ts"
import { EvidenceStore } from "./EvidenceStore.ts"
import * as internal from "./internal/writer.ts"
import type { BoundaryError, OperationOwnershipError } from "./TaskBoundary.ts"
import { TaskBoundary } from "./TaskBoundary.ts"

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

/** Appends to chains: one lock per chain covers head lookup, record construction and append. */
export class EvidenceWriter extends Context.Tag("writ/EvidenceWriter")<EvidenceWriter, EvidenceWriter.Service>() {}

/** The EvidenceWriter service. */
export declare namespace EvidenceWriter {
  /**
   * Seal drafts at their chain's head and append them. An operation record (policy_bound, operation_started,
   * gate_evaluated, exception_granted, operation_denied, a terminal) is refused here (EvidenceForbiddenError): only the
   * governed executor and recovery append those, through the executor's private append capability.
   */
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

/** A writer over the EvidenceStore in context; a conflict from another writer fails closed and is never retried. */
export const makeWriter = Effect.gen(function*() {
  return EvidenceWriter.of(internal.make(yield* EvidenceStore, yield* Digest, yield* IdGenerator))
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
export const failureDetail = (error: EvidenceAppendError | EvidenceUnavailableError): string =>
  `${error._tag}: ${error.message}`
