import { Effect, Either } from "effect"
import { type ActionExecutionBackend, uncontained } from "../ActionExecutionBackend.ts"
import type { ExecutionError, Governor } from "../ActionExecutor.ts"
import type { Digest } from "../Digest.ts"
import type * as Evidence from "../Evidence.ts"
import {
  Ambiguous,
  callExecuted,
  Cancelled,
  type ExecutionOutcome,
  withProjectionPending
} from "../ExecutionOutcome.ts"
import type { OperationContext, TaskBoundary } from "../Governance.ts"
import { deriveContextWith, failureDetail, GovernanceEvidenceError, OutcomeEvidenceError } from "../Governance.ts"
import type { IdGenerator } from "../IdGenerator.ts"
import type { Verdict } from "../Interceptor.ts"
import * as Time from "../Time.ts"
import type { Attempt, Compiled } from "./attempt.ts"
import { common, denied, reason, resultDigest } from "./attempt.ts"
import * as ledger from "./ledger.ts"
import { trustedMake } from "./trusted.ts"

/** The governed stages (4, 11 and 13) of one executor: evidence committed as control flow through its writer. */
export const makeGovernedStages = (
  governor: Governor,
  backend: ActionExecutionBackend.Service,
  digest: Digest.Service,
  ids: IdGenerator.Service
) => {
  /**
   * Mark the attempt (operation started, or terminal under way) and append, as one uninterruptible step: an
   * interruption lands before both or after the append is answered, so the mark always says what was appended.
   */
  const marked = <A, E>(mark: () => unknown, append: Effect.Effect<A, E>) =>
    Effect.uninterruptible(Effect.suspend(() => {
      mark()
      return append
    }))

  /** Append governed records in one commit; a failure is a GovernanceEvidenceError naming whether the callable had run. */
  const appendEvidence = (
    operation: OperationContext,
    drafts: ReadonlyArray<Evidence.Draft>,
    call_executed: boolean,
    ifCommitted?: () => ReadonlyArray<Evidence.Draft>
  ) =>
    Effect.mapError(
      governor.writer.appendAll(operation.chain_id, drafts, ifCommitted),
      (error) =>
        new GovernanceEvidenceError({
          call_executed,
          record_type: drafts[0]!.record_type,
          operation_id: operation.operation_id,
          detail: failureDetail(error)
        })
    )

  /**
   * Stage 11, as each decision is produced: one `gate_evaluated` per gate result (a verdict without gates is its
   * evaluator's one hard gate, except a deferral: capacity is never a gate result), then any granted exception.
   */
  const recordVerdict = Effect.fnUntraced(function*(
    operation: OperationContext,
    attempt: Attempt,
    evaluator: string,
    verdict: Verdict
  ) {
    const gates = verdict.gates ?? (verdict.disposition === "defer" ? [] : [{
      gate_id: evaluator,
      level: "hard" as const,
      decision: verdict.disposition === "allow" ? "allow" as const : "deny" as const,
      reason_code: verdict.code,
      matched_rules: []
    }])
    const drafts: Array<Evidence.Draft> = []
    for (const gate of gates) {
      drafts.push(ledger.gateEvaluated(operation, {
        ...gate,
        result_id: yield* ids.uuid,
        evaluator,
        stage: attempt.stage,
        arguments_digest: attempt.digest!,
        evaluated_at: yield* Time.now
      }))
    }
    if (verdict.exception !== undefined) drafts.push(ledger.exceptionGranted(operation, verdict.exception))
    if (drafts.length > 0) yield* appendEvidence(operation, drafts, false)
  })

  /** Stages 3-4, governed: pin and verify the exact snapshot, derive the operation context, and commit its start. */
  const start = Effect.fnUntraced(function*(
    attempt: Attempt,
    compiled: Compiled,
    boundary: TaskBoundary | undefined
  ) {
    if (boundary === undefined) {
      return denied(attempt, "governance.no_boundary", "a governed execution runs inside an open task boundary")
    }
    if (!governor.writer.isOpen(boundary)) {
      return denied(
        attempt,
        "governance.boundary_not_open",
        `task boundary ${boundary.task_boundary_id} is not open in this executor's evidence writer (not opened here, or closed)`
      )
    }
    const pinned = yield* governor.pin(attempt.context, attempt.attempt_id)
    if (Either.isLeft(pinned)) return denied(attempt, pinned.left.code, pinned.left.detail)
    // The report the operation records must still enforce what stage 3 admitted the action on.
    const capability = yield* backend.probe
    const missing = uncontained(capability, compiled.definition.containment)
    if (missing.length > 0) {
      return denied(
        attempt,
        "containment.unsupported",
        `${capability.backend.id} no longer contains ${missing.join(", ")} (its report changed after stage 3)`
      )
    }
    const derived = yield* deriveContextWith(
      digest,
      ids,
      {
        context: attempt.context,
        request: attempt.request,
        descriptor: compiled.descriptor,
        snapshot: pinned.right,
        capability,
        boundary
      },
      attempt.attempt_id,
      attempt.digest!
    )
    if (Either.isLeft(derived)) return denied(attempt, derived.left, "the operation's trusted inputs disagree")
    const operation = derived.right
    attempt.stage = "governed_start"
    // A start whose answer is lost may still have committed: the writer then closes it as this denial.
    const unconfirmed = () => [
      ledger.terminal(operation, denied(attempt, "evidence.append_failed"), null, operation.arguments_digest)
    ]
    yield* marked(
      () => (attempt.operation = operation),
      appendEvidence(
        operation,
        [
          ledger.policyBound(operation, pinned.right),
          ledger.operationStarted(operation, attempt.compiled!.fields, attempt.args!)
        ],
        false,
        unconfirmed
      ).pipe(Effect.tapError(() => Effect.sync(() => delete attempt.operation)))
    )
    return undefined
  })

  /** Stage 13, governed: the one terminal record; if it cannot be committed the outcome is replaced by an error. */
  const conclude = Effect.fnUntraced(
    function*(attempt: Attempt, operation: OperationContext, outcome: ExecutionOutcome) {
      const result_digest = outcome._tag === "succeeded" ? yield* resultDigest(digest, outcome.result) : null
      const appended = yield* Effect.either(marked(
        () => (attempt.concluded = true),
        governor.writer.append(
          operation.chain_id,
          ledger.terminal(operation, outcome, result_digest, attempt.digest ?? operation.arguments_digest)
        )
      ))
      if (Either.isRight(appended)) {
        attempt.receipt = appended.right
        attempt.committed = outcome
        return outcome
      }
      const detail = failureDetail(appended.left)
      if (outcome._tag === "failed") {
        return yield* new OutcomeEvidenceError({
          operation_id: operation.operation_id,
          failure_code: outcome.failure.code,
          detail
        })
      }
      return yield* new GovernanceEvidenceError({
        call_executed: callExecuted(outcome),
        record_type: ledger.terminalType(outcome),
        operation_id: operation.operation_id,
        detail
      })
    }
  )

  // Close an operation that has no terminal record yet with `outcome`, best effort.
  const concludeOpen = (attempt: Attempt, outcome: (attempt: Attempt) => ExecutionOutcome) =>
    attempt.operation === undefined || attempt.concluded === true
      ? Effect.void
      : Effect.asVoid(Effect.exit(conclude(attempt, attempt.operation, outcome(attempt))))

  /** A governed operation interrupted from outside still closes with `operation_cancelled`, best effort. */
  const concludeInterrupted = (attempt: Attempt) =>
    concludeOpen(attempt, (attempt) => trustedMake(Cancelled, { ...common(attempt), call_executed: attempt.invoked }))

  /** A defect still closes its operation, best effort: denied before the call, ambiguous once it was invoked. */
  const concludeDefect = (attempt: Attempt) =>
    concludeOpen(
      attempt,
      (attempt) =>
        attempt.invoked
          ? trustedMake(Ambiguous, { ...common(attempt), reason: reason("executor.defect") })
          : denied(attempt, "executor.defect")
    )

  /** A pre-call evidence failure: the callable is unreachable; close the operation if the store still takes it. */
  const abandon = (attempt: Attempt, error: ExecutionError) =>
    attempt.operation === undefined || attempt.invoked
      ? Effect.fail(error)
      : Effect.zipRight(
        Effect.exit(marked(
          () => (attempt.concluded = true),
          governor.writer.append(
            attempt.operation.chain_id,
            ledger.terminal(
              attempt.operation,
              denied(attempt, "evidence.append_failed"),
              null,
              attempt.digest ?? attempt.operation.arguments_digest
            )
          )
        )),
        Effect.fail(error)
      )

  /**
   * Stage 14 in a durable Run, once the call's capacity is released: the concluded operation projected into the Run
   * now, within `limit`, or its outcome says it is pending.
   */
  const project = (
    attempt: Attempt,
    outcome: ExecutionOutcome,
    limit: (projection: Effect.Effect<boolean>) => Effect.Effect<boolean>
  ) =>
    governor.project === undefined || attempt.run_id === undefined || attempt.committed === undefined
      ? Effect.succeed(outcome)
      : Effect.map(limit(governor.project), (projected) => projected ? outcome : withProjectionPending(outcome))

  /** Stages 4-13, governed: start the operation, run it, and conclude it; its boundary's close waits until it ends. */
  const govern = (
    attempt: Attempt,
    compiled: Compiled,
    boundary: TaskBoundary | undefined,
    operate: Effect.Effect<ExecutionOutcome, ExecutionError>
  ) => {
    const governed = Effect.flatMap(
      start(attempt, compiled, boundary),
      (refused) =>
        refused !== undefined ? Effect.succeed(refused) : operate.pipe(
          Effect.catchAll((error) => abandon(attempt, error)),
          Effect.flatMap((outcome) => conclude(attempt, attempt.operation!, outcome))
        )
    ).pipe(
      Effect.onInterrupt(() => concludeInterrupted(attempt)),
      Effect.tapDefect(() => concludeDefect(attempt)),
      Effect.ensuring(Effect.suspend(() =>
        attempt.operation === undefined
          ? Effect.void
          : governor.writer.release(attempt.operation.chain_id, attempt.operation.operation_id)
      ))
    )
    return boundary === undefined ? governed : governor.writer.track(boundary.chain_id, governed)
  }

  return { recordVerdict, govern, project }
}
