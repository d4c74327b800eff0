/**
 * The governed stages: the snapshot pinned at stage 3, the operation opened at stage 4 and closed with its one
 * terminal record at stage 13, the gate evidence committed at stage 11, and stage 14's projection into a Run.
 */
import { Cause, Effect, Either, Exit } from "effect"
import type * as Evidence from "../../../evidence/Evidence.ts"
import type { AppendReceipt } from "../../../evidence/EvidenceStore.ts"
import type { EvidenceWriter, OperationContext } from "../../../evidence/Governance.ts"
import {
  deriveContextWith,
  failureDetail,
  GovernanceEvidenceError,
  OutcomeEvidenceError
} from "../../../evidence/Governance.ts"
import * as ledger from "../../../evidence/internal/ledger.ts"
import { appendAdmitting, appendOperation, appendOperationNow } from "../../../evidence/internal/writer.ts"
import { deriveContextNow, type DeriveRefusal } from "../../../evidence/OperationContext.ts"
import type { BudgetSpentError } from "../../../policy/BudgetLedger.ts"
import {
  Ambiguous,
  callExecuted,
  Cancelled,
  type ExecutionOutcome,
  withProjectionPending
} from "../../ExecutionOutcome.ts"
import { carriedBy, deferredBy, deniedBy, flat, noAdmissions, startAdmissions } from "./admissions.ts"
import { type Call, denied, outcomeWith, reason, resultDigest, resultDigestNow } from "./call.ts"
import type { Env, ExecutionError } from "./env.ts"
import { producedDrafts, producedDraftsNow } from "./gateRecords.ts"
import { type Preflighted, verifyPreflight } from "./preflight.ts"
import { untilStopped } from "./secure.ts"
import { type AfterStep, type AroundStep, type DecideStep, isOutcome } from "./table.ts"

/** After stage 4: the operation whose start is committed. */
export interface Operated extends Preflighted {
  readonly operation: OperationContext
}

/**
 * Append records in one commit, with the budget places they carry: the receipts, or BudgetSpentError when a place was
 * taken (nothing written); any other failure is a GovernanceEvidenceError naming whether the callable had run.
 */
const appendEvidence = (
  writer: EvidenceWriter.Service,
  operation: OperationContext,
  drafts: ReadonlyArray<Evidence.Draft>,
  call_executed: boolean,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>,
  admissions = noAdmissions
): Effect.Effect<ReadonlyArray<AppendReceipt> | BudgetSpentError, GovernanceEvidenceError> =>
  Effect.catchAll(
    appendAdmitting(writer, operation.chain_id, drafts, ifCommitted, admissions),
    (error) =>
      error._tag === "BudgetSpentError"
        ? Effect.succeed(error)
        : Effect.fail(evidenceError(operation, drafts, call_executed, error))
  )

/** Why an operation's records did not append. */
type AppendFailure = Effect.Effect.Error<ReturnType<typeof appendOperation>>

const evidenceError = (
  operation: OperationContext,
  drafts: ReadonlyArray<Evidence.Draft>,
  call_executed: boolean,
  error: AppendFailure
) =>
  new GovernanceEvidenceError({
    call_executed,
    record_type: drafts[0]!.record_type,
    operation_id: operation.operation_id,
    detail: failureDetail(error)
  })

/** A step's answer, or the Effect of it. */
type Started = OperationContext | ExecutionOutcome

const lift = <A, E>(answer: A | Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.isEffect(answer) ? answer as Effect.Effect<A, E> : Effect.succeed(answer)

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
   * commit `policy_bound` and `operation_started`. Synchronous where every one of those steps is.
   */
  start(): Started | Effect.Effect<Started, ExecutionError> {
    const verified = verifyPreflight(this.env, this.call, this.state.preflight)
    if (!Effect.isEffect(verified)) return verified ?? this.open()
    return Effect.flatMap(verified, (refused) => refused !== undefined ? Effect.succeed(refused) : lift(this.open()))
  }

  private open(): Started | Effect.Effect<Started, ExecutionError> {
    const { call, env, state } = this
    const inputs = {
      context: call.context,
      request: call.request,
      descriptor: state.action.descriptor,
      snapshot: state.snapshot,
      preflight: state.preflight,
      boundary: state.boundary
    }
    const opened = (derived: Either.Either<OperationContext, DeriveRefusal>) =>
      Either.isLeft(derived)
        ? denied(call, derived.left, "the operation's trusted inputs disagree")
        : this.commitStart(derived.right)
    const uuid = env.ids.uuidSync
    return uuid !== undefined
      ? opened(deriveContextNow(inputs, call.attempt_id, state.digest, uuid()))
      : Effect.flatMap(deriveContextWith(env.ids, inputs, call.attempt_id, state.digest), (d) => lift(opened(d)))
  }

  private commitStart(operation: OperationContext): Started | Effect.Effect<Started, ExecutionError> {
    const { call, state } = this
    // A start whose answer is lost may still have committed: the writer then closes it as this denial.
    const unconfirmed = () => [
      ledger.terminal(operation, denied(call, "evidence.append_failed"), null, operation.arguments_digest)
    ]
    const drafts = [
      ledger.policyBound(operation, state.snapshot),
      ledger.operationStarted(operation, state.action.fields, state.args, call.containment)
    ]
    const unstarted = () => {
      this.started = undefined
      call.operated = false
    }
    // A window's last place taken by another executor first: no operation, deferred as at stage 3.
    const pendings = startAdmissions(call)
    const admissions = flat(pendings)
    const now = appendOperationNow(
      this.writer,
      operation.chain_id,
      drafts,
      call.moment.micros(),
      unconfirmed,
      admissions
    )
    if (now !== undefined) {
      if (Array.isArray(now)) {
        this.started = operation
        call.operated = true
        return operation
      }
      const failure = now as AppendFailure | BudgetSpentError
      return failure._tag === "BudgetSpentError"
        ? deferredBy(call, pendings, failure)
        : Effect.fail(evidenceError(operation, drafts, false, failure))
    }
    // Started from inside the uninterruptible region: an interruption before it leaves no operation to close.
    return Effect.uninterruptible(Effect.suspend(() => {
      this.started = operation
      call.operated = true
      return appendEvidence(this.writer, operation, drafts, false, unconfirmed, admissions).pipe(
        Effect.tapError(() => Effect.sync(unstarted)),
        Effect.map((appended): Started => {
          if (Array.isArray(appended)) return operation
          unstarted()
          return deferredBy(call, pendings, appended as BudgetSpentError)
        })
      )
    }))
  }

  /** Stage 13: the one terminal record, with any gate records not yet committed; if it fails the outcome is an error. */
  close(started: OperationContext, outcome: ExecutionOutcome): Effect.Effect<ExecutionOutcome, ExecutionError> {
    const { call, env } = this
    const sha256 = env.digest.sha256TextSync
    const produced = sha256 === undefined ? undefined : producedDraftsNow(env, call, started)
    if (sha256 !== undefined && produced !== undefined) {
      const result = outcome._tag === "succeeded" ? resultDigestNow(sha256, outcome.result) : null
      const drafts = [...produced, ledger.terminal(started, outcome, result, this.state.digest)]
      const now = appendOperationNow(this.writer, started.chain_id, drafts, call.moment.micros())
      if (now !== undefined) {
        this.concluded = true
        return Array.isArray(now)
          ? Effect.succeed(this.closed(now, outcome))
          : Effect.fail(this.closeError(started, outcome, now as AppendFailure))
      }
      return this.closeWith(started, outcome, Effect.succeed(drafts))
    }
    const result_digest = outcome._tag === "succeeded" ? resultDigest(env.digest, outcome.result) : Effect.succeed(null)
    const drafts = Effect.zipWith(result_digest, producedDrafts(env, call, started), (digest, drafts) => [
      ...drafts,
      ledger.terminal(started, outcome, digest, this.state.digest)
    ])
    return this.closeWith(started, outcome, drafts)
  }

  private closed(receipts: ReadonlyArray<AppendReceipt>, outcome: ExecutionOutcome) {
    this.call.receipt = receipts[receipts.length - 1]
    this.call.committed = outcome
    return outcome
  }

  private closeError(operation: OperationContext, outcome: ExecutionOutcome, error: AppendFailure) {
    const detail = failureDetail(error)
    return outcome._tag === "failed"
      ? new OutcomeEvidenceError({ operation_id: operation.operation_id, failure_code: outcome.failure.code, detail })
      : new GovernanceEvidenceError({
        call_executed: callExecuted(outcome),
        record_type: ledger.terminalType(outcome),
        operation_id: operation.operation_id,
        detail
      })
  }

  private closeWith(
    operation: OperationContext,
    outcome: ExecutionOutcome,
    drafts: Effect.Effect<ReadonlyArray<Evidence.Draft>>
  ) {
    // Concluded from inside the uninterruptible region: an interruption before it still closes the operation.
    return Effect.uninterruptible(Effect.suspend(() => {
      this.concluded = true
      return Effect.flatMap(drafts, (terminal) =>
        appendOperation(this.writer, operation.chain_id, terminal).pipe(
          Effect.map((receipts) => this.closed(receipts, outcome)),
          Effect.mapError((error) => this.closeError(operation, outcome, error))
        ))
    }))
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
    const proceed = (started: Started): Effect.Effect<ExecutionOutcome, ExecutionError> =>
      isOutcome(started) ? Effect.succeed(started) : inner(Object.assign(state, { operation: started })).pipe(
        Effect.catchAll((error) => operation.abandon(error)),
        Effect.flatMap((outcome) => operation.close(started, outcome))
      )
    const governed = Effect.suspend(() => {
      const started = operation.start()
      return Effect.isEffect(started) ? Effect.flatMap(started, proceed) : proceed(started)
    })
    // One exit handler: an interruption closes the operation cancelled, a defect denied or ambiguous; then release.
    return Effect.onExit(governed, (exit) => {
      const closing = Exit.isSuccess(exit)
        ? Effect.void
        : Cause.isInterruptedOnly(exit.cause)
        ? operation.closeOpen(() => outcomeWith(Cancelled, call, { call_executed: call.invoked }))
        : Cause.isDie(exit.cause)
        ? operation.closeOpen(() =>
          call.invoked
            ? outcomeWith(Ambiguous, call, { reason: reason("executor.defect") })
            : denied(call, "executor.defect")
        )
        : Effect.void
      return Effect.zipRight(closing, operation.release)
    })
  }
})

/** Stage 11: every gate result and granted exception produced so far committed before the token is released. */
// Budget places with no gate record to carry them: no verdict of the policy gate asks for that.
const unborne = "budget admissions with no gate record to carry them"

export const checkpointWith = (env: Env, writer: EvidenceWriter.Service): DecideStep<Operated, void> => ({
  _tag: "Decide",
  stage: "evidence_checkpoint",
  detail: "every gate_evaluated and exception_granted committed before the token is released",
  run: ({ call, operation }) => {
    // The budget places its allowing verdicts take ride on their gate records: a place lost denies the call.
    const produced = call.produced
    const carried = carriedBy(produced)
    const admissions = flat(carried)
    const settled = (appended: ReadonlyArray<AppendReceipt> | BudgetSpentError) =>
      Array.isArray(appended) ? undefined : deniedBy(call, produced!, carried, appended as BudgetSpentError)
    const append = (drafts: ReadonlyArray<Evidence.Draft>) => {
      if (drafts.length === 0) {
        return admissions.length === 0 ? undefined : denied(call, "control.evaluator_error", unborne)
      }
      const now = appendOperationNow(writer, operation.chain_id, drafts, call.moment.micros(), undefined, admissions)
      if (now === undefined) {
        return Effect.map(appendEvidence(writer, operation, drafts, false, undefined, admissions), settled)
      }
      if (Array.isArray(now)) return undefined
      const failure = now as AppendFailure | BudgetSpentError
      return failure._tag === "BudgetSpentError"
        ? settled(failure)
        : Effect.fail(evidenceError(operation, drafts, false, failure))
    }
    const drafts = producedDraftsNow(env, call, operation)
    if (drafts !== undefined) return append(drafts)
    return Effect.flatMap(producedDrafts(env, call, operation), (drafts) => {
      const answer = append(drafts)
      return Effect.isEffect(answer) ? answer : Effect.succeed(answer)
    })
  }
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
