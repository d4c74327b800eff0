/**
 * The governed stages: the snapshot pinned at stage 3, the operation opened at stage 4 and closed with its one
 * terminal record at stage 13, the gate evidence committed at stage 11, and stage 14's projection into a Run.
 */
import { Effect, Either } from "effect"
import type { ActionBackendCapabilityReport } from "../../../action/ActionExecutionBackend.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import type * as Evidence from "../../../evidence/Evidence.ts"
import type { EvidenceWriter, OperationContext, TaskBoundary } from "../../../evidence/Governance.ts"
import {
  deriveContextWith,
  failureDetail,
  GovernanceEvidenceError,
  OutcomeEvidenceError
} from "../../../evidence/Governance.ts"
import * as ledger from "../../../evidence/internal/ledger.ts"
import { appendOperation } from "../../../evidence/internal/writer.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import {
  Ambiguous,
  callExecuted,
  Cancelled,
  type ExecutionOutcome,
  withProjectionPending
} from "../../ExecutionOutcome.ts"
import { containmentRefusal, type Resolved } from "./admit.ts"
import type { Bindings } from "./bindings.ts"
import { type Call, common, denied, reason, resultDigest } from "./call.ts"
import type { Env, ExecutionError, Governor } from "./env.ts"
import { producedDrafts } from "./gateRecords.ts"
import { type Preflighted, verifyPreflight } from "./preflight.ts"
import { untilStopped } from "./secure.ts"
import { type AfterStep, type AroundStep, type EffectStep, isOutcome, type SyncStep } from "./table.ts"

/** After stage 4: the operation whose start is committed. */
export interface Operated extends Preflighted {
  readonly operation: OperationContext
}

/** Append records in one commit; a failure is a GovernanceEvidenceError naming whether the callable had run. */
const appendEvidence = (
  writer: EvidenceWriter.Service,
  operation: OperationContext,
  drafts: ReadonlyArray<Evidence.Draft>,
  call_executed: boolean,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>
) =>
  Effect.mapError(
    appendOperation(writer, operation.chain_id, drafts, ifCommitted),
    (error) =>
      new GovernanceEvidenceError({
        call_executed,
        record_type: drafts[0]!.record_type,
        operation_id: operation.operation_id,
        detail: failureDetail(error)
      })
  )

/** Stage 3, governed: a governed call runs inside an open task boundary of this executor's writer. */
export const boundaryWith = (writer: EvidenceWriter.Service): SyncStep<Resolved, { boundary: TaskBoundary }> => ({
  _tag: "Sync",
  stage: "bind_context",
  detail: "the call's task boundary must be open in this executor's evidence writer",
  run: ({ call }) => {
    if (call.boundary === undefined) {
      return denied(call, "governance.no_boundary", "a governed execution runs inside an open task boundary")
    }
    if (!writer.isOpen(call.boundary)) {
      return denied(
        call,
        "governance.boundary_not_open",
        `task boundary ${call.boundary.task_boundary_id} is not open in this executor's evidence writer (not opened here, or closed)`
      )
    }
    return { boundary: call.boundary }
  }
})

/**
 * Stage 3, governed: from the boundary check on, the call is one of its boundary's operations, so a close begun after
 * that check waits for it.
 */
export const trackWith = (
  writer: EvidenceWriter.Service
): AroundStep<Resolved & { boundary: TaskBoundary }, unknown> => ({
  _tag: "Around",
  stage: "bind_context",
  detail: "a close of the boundary waits for the call from here on",
  run: (state, inner) => writer.track(state.boundary.chain_id, inner(state))
})

/** Stage 3, governed, once admitted: a close begun while the call was being admitted leaves it no operation to start. */
export const stillOpenWith = (
  writer: EvidenceWriter.Service
): SyncStep<Resolved & { boundary: TaskBoundary }, void> => ({
  _tag: "Sync",
  stage: "bind_context",
  detail: "the boundary is still open once the call is admitted",
  run: ({ boundary, call }) =>
    writer.isOpen(boundary)
      ? undefined
      : denied(
        call,
        "governance.boundary_not_open",
        `task boundary ${boundary.task_boundary_id} began closing while the call was admitted`
      )
})

/**
 * Stage 3, governed: retrieve the exact snapshot and recompute its digest; it must bind every configured interceptor
 * by identity (`policy.unbound_interceptor`); probe the backend once.
 */
export const pinWith = (
  env: Env,
  governor: Governor,
  bindings: Bindings
): EffectStep<Resolved, { snapshot: PolicySnapshot; capability: ActionBackendCapabilityReport }> => ({
  _tag: "Effect",
  stage: "bind_context",
  detail: "retrieve the exact policy snapshot and recompute its digest; it must bind every configured interceptor " +
    "by id, version and configuration digest; probe the backend for required containment",
  run: ({ action, call }) =>
    Effect.flatMap(governor.pin(call.context), (pinned) => {
      if (Either.isLeft(pinned)) return Effect.succeed(denied(call, pinned.left.code, pinned.left.detail))
      const unbound = bindings(pinned.right)
      return unbound !== undefined
        ? Effect.succeed(denied(
          call,
          "policy.unbound_interceptor",
          `interceptor ${unbound.id} (version ${unbound.version}, configuration ${unbound.config_digest}) is not ` +
            `bound by policy ${pinned.right.policy_id}@${pinned.right.version}`
        ))
        : Effect.map(env.backend.probe, (capability) =>
          containmentRefusal(env, call, action, capability) ?? { snapshot: pinned.right, capability })
    })
})

/** One governed operation of one call, from its start to its one terminal record. */
class Operation {
  /** Set once its start is appended (or being appended), and unset if that append fails. */
  private started: OperationContext | undefined = undefined
  /** Its terminal record was appended, or is being: nothing may append another. */
  private concluded = false

  constructor(readonly env: Env, readonly writer: EvidenceWriter.Service, readonly state: Preflighted) {}

  get call(): Call {
    return this.state.call
  }

  /**
   * Stage 4: the preflight report must still admit the call; derive the context from its six trusted inputs and
   * commit `policy_bound` and `operation_started`.
   */
  readonly start = Effect.suspend(() => {
    const { call, env, state } = this
    return Effect.flatMap(
      verifyPreflight(env, call, state.preflight),
      (refused) =>
        refused !== undefined ? Effect.succeed(refused) : Effect.flatMap(
          deriveContextWith(
            env.ids,
            {
              context: call.context,
              request: call.request,
              descriptor: state.action.descriptor,
              snapshot: state.snapshot,
              preflight: state.preflight,
              boundary: state.boundary
            },
            call.attempt_id,
            state.digest
          ),
          (derived): Effect.Effect<OperationContext | ExecutionOutcome, ExecutionError> =>
            Either.isLeft(derived)
              ? Effect.succeed(denied(call, derived.left, "the operation's trusted inputs disagree"))
              : this.commitStart(derived.right)
        )
    )
  })

  private commitStart(operation: OperationContext) {
    const { call, state } = this
    // A start whose answer is lost may still have committed: the writer then closes it as this denial.
    const unconfirmed = () => [
      ledger.terminal(operation, denied(call, "evidence.append_failed"), null, operation.arguments_digest)
    ]
    const drafts = [
      ledger.policyBound(operation, state.snapshot),
      ledger.operationStarted(operation, state.action.fields, state.args)
    ]
    return Effect.uninterruptible(Effect.suspend(() => {
      this.started = operation
      call.operated = true
      return appendEvidence(this.writer, operation, drafts, false, unconfirmed).pipe(
        Effect.tapError(() =>
          Effect.sync(() => {
            this.started = undefined
            call.operated = false
          })
        ),
        Effect.as(operation)
      )
    }))
  }

  /** Stage 13: the one terminal record, with any gate records not yet committed; if it fails the outcome is an error. */
  close(started: OperationContext, outcome: ExecutionOutcome) {
    return Effect.uninterruptible(Effect.suspend(() => {
      this.concluded = true
      return this.append(started, outcome)
    }))
  }

  private append(operation: OperationContext, outcome: ExecutionOutcome) {
    const { call, env } = this
    const result_digest = outcome._tag === "succeeded" ? resultDigest(env.digest, outcome.result) : Effect.succeed(null)
    const drafts = Effect.zipWith(result_digest, producedDrafts(env, call, operation), (digest, drafts) => [
      ...drafts,
      ledger.terminal(operation, outcome, digest, this.state.digest)
    ])
    return Effect.flatMap(drafts, (terminal) =>
      appendOperation(this.writer, operation.chain_id, terminal).pipe(
        Effect.map((receipts) => {
          call.receipt = receipts[receipts.length - 1]
          call.committed = outcome
          return outcome
        }),
        Effect.mapError((error) => {
          const detail = failureDetail(error)
          return outcome._tag === "failed"
            ? new OutcomeEvidenceError({
              operation_id: operation.operation_id,
              failure_code: outcome.failure.code,
              detail
            })
            : new GovernanceEvidenceError({
              call_executed: callExecuted(outcome),
              record_type: ledger.terminalType(outcome),
              operation_id: operation.operation_id,
              detail
            })
        })
      ))
  }

  /** Close an operation that has no terminal record yet, best effort (an interruption, a defect). */
  closeOpen(outcome: () => ExecutionOutcome) {
    const started = this.started
    return started === undefined || this.concluded
      ? Effect.void
      : Effect.asVoid(Effect.exit(this.close(started, outcome())))
  }

  /** A pre-call evidence failure: the callable is unreachable; close the operation if the store still takes it. */
  abandon(error: ExecutionError) {
    const started = this.started
    if (started === undefined || this.call.invoked) return Effect.fail(error)
    const closing = Effect.uninterruptible(Effect.suspend(() => {
      this.concluded = true
      this.call.produced = undefined
      return appendOperation(this.writer, started.chain_id, [
        ledger.terminal(started, denied(this.call, "evidence.append_failed"), null, this.state.digest)
      ])
    }))
    return Effect.zipRight(Effect.exit(closing), Effect.fail(error))
  }

  /** The operation released by the writer, however it ended. */
  readonly release = Effect.suspend(() =>
    this.started === undefined ? Effect.void : this.writer.release(this.started.chain_id, this.started.operation_id)
  )
}

/**
 * Stages 4-13: open the operation, run the rest, and close it with one terminal record however the rest ends: an
 * interruption closes it cancelled, a defect denied before the call and ambiguous after it, a pre-call evidence
 * failure denied (the callable unreachable).
 */
export const operateWith = (
  env: Env,
  writer: EvidenceWriter.Service
): AroundStep<Preflighted, { operation: OperationContext }> => ({
  _tag: "Around",
  stage: "governed_start",
  closes: "outcome",
  detail: "derive the operation context from six trusted inputs; commit policy_bound and operation_started; " +
    "close the operation with its one terminal record",
  run: (state, inner) => {
    const operation = new Operation(env, writer, state)
    const call = state.call
    const governed = Effect.flatMap(
      operation.start,
      (started) =>
        isOutcome(started) ? Effect.succeed(started) : inner(Object.assign(state, { operation: started })).pipe(
          Effect.catchAll((error) => operation.abandon(error)),
          Effect.flatMap((outcome) => operation.close(started, outcome))
        )
    ).pipe(
      Effect.onInterrupt(() =>
        operation.closeOpen(() => trustedMake(Cancelled, { ...common(call), call_executed: call.invoked }))
      ),
      Effect.tapDefect(() =>
        operation.closeOpen(() =>
          call.invoked
            ? trustedMake(Ambiguous, { ...common(call), reason: reason("executor.defect") })
            : denied(call, "executor.defect")
        )
      ),
      Effect.ensuring(operation.release)
    )
    return governed
  }
})

/** Stage 11: every gate result and granted exception produced so far committed before the token is released. */
export const checkpointWith = (env: Env, writer: EvidenceWriter.Service): EffectStep<Operated, void> => ({
  _tag: "Effect",
  stage: "evidence_checkpoint",
  detail: "every gate_evaluated and exception_granted committed before the token is released",
  run: (state) =>
    Effect.flatMap(
      producedDrafts(env, state.call, state.operation),
      (drafts) =>
        drafts.length === 0 ? Effect.void : Effect.asVoid(appendEvidence(writer, state.operation, drafts, false))
    )
})

/**
 * Stage 14 in a durable Run, once the call's capacity is released: the concluded operation projected into the Run
 * now, within the request's deadline and cancellation, or its outcome says it is pending.
 */
export const projectWith = (projection: Effect.Effect<boolean>): AfterStep => ({
  _tag: "After",
  stage: "persist",
  detail: "governed: a call in a durable Run is projected from its committed evidence (EvidenceProjector)",
  run: (call, outcome) =>
    call.run_id === undefined || call.committed === undefined
      ? Effect.succeed(outcome)
      : Effect.map(
        untilStopped(call, projection, () => false),
        (projected) => projected ? outcome : withProjectionPending(outcome)
      )
})
