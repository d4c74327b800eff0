import { Deferred, Effect, Either, Schema } from "effect"
import type { Digest } from "../Digest.ts"
import { callExecuted, type ExecutionOutcome } from "../ExecutionOutcome.ts"
import type { Uuid } from "../IdGenerator.ts"
import type { Run, StateStore } from "../StateStore.ts"
import { OperationAttempt, outcomeIntent, summarize } from "../StateStore.ts"
import * as Time from "../Time.ts"
import type { Attempt } from "./attempt.ts"
import { denied, resultDigest } from "./attempt.ts"
import { trustedMake } from "./trusted.ts"

/** The durable profile could not commit an attempt; `call_executed` says whether the callable had run (it is never retried). */
export class PersistError extends Schema.TaggedError<PersistError>()("PersistError", {
  call_executed: Schema.Boolean,
  attempt_id: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `attempt ${this.attempt_id} not committed (call_executed: ${this.call_executed}): ${this.detail}`
  }
}

/** The durable stages (3 and 14) of one executor over its StateStore. */
export const makeDurableStages = (digest: Digest.Service) => {
  /** Stage 3, durable: the scope's Run must exist and still be running. */
  const bindRun = Effect.fnUntraced(function*(store: StateStore.Service, attempt: Attempt, run_id: string) {
    const run = yield* Effect.either(store.getRun(run_id))
    if (Either.isLeft(run)) return denied(attempt, "scope.run_not_found", `no Run ${run_id}`)
    return run.right.status === "running"
      ? undefined
      : denied(attempt, "scope.run_not_running", `Run ${run_id} is ${run.right.status}`)
  })

  /**
   * Between stages 11 and 12, one-shot durable: the invocation is admitted, so its Run is created already running (the
   * store mints its id, in one write: a crash leaves either no Run or a running one, which recovery ends) before the
   * call; a store failure here is a PersistError before any call.
   */
  const openRun = (store: StateStore.Service, attempt: Attempt, created: Deferred.Deferred<Run>) =>
    Effect.uninterruptible(Effect.gen(function*() {
      const run = yield* store.createRun({ started: true })
      attempt.run_id = run.run_id
      yield* Deferred.succeed(created, run)
    })).pipe(
      Effect.mapError((error) =>
        new PersistError({
          call_executed: false,
          attempt_id: attempt.attempt_id,
          detail: `its Run could not be created and started: ${error.message}`
        })
      )
    )

  /**
   * Stage 14, durable: the typed attempt, its outcome summary, its outcome intent and, if the call succeeded, the
   * intents it staged commit in one transaction.
   */
  const persist = Effect.fnUntraced(function*(
    store: StateStore.Service,
    attempt: Attempt,
    run_id: Uuid,
    outcome: ExecutionOutcome
  ) {
    attempt.stage = "persist"
    const result_digest = outcome._tag === "succeeded" ? yield* resultDigest(digest, outcome.result) : null
    const summary = summarize(outcome, result_digest)
    const committedAttempt = trustedMake(OperationAttempt, {
      attempt_id: attempt.attempt_id,
      run_id,
      request_id: attempt.request.request_id,
      action_name: attempt.action.name,
      action_version: attempt.action.version ?? null,
      arguments_digest: attempt.digest ?? null,
      outcome: summary,
      created_at: yield* Time.now
    })
    const offered = attempt.offered
    attempt.offered ??= outcome
    // What the call staged commits only if it succeeded; the outbox closes either way, so nothing more is staged.
    const staged = attempt.outbox?.close() ?? []
    const intents = [outcomeIntent(committedAttempt), ...(outcome._tag === "succeeded" ? staged : [])]
    const committed = yield* Effect.either(store.commitAttempt({ attempt: committedAttempt, intents }))
    if (Either.isRight(committed)) {
      attempt.committed = outcome
      return outcome
    }
    // The attempt is there already: the first commit landed though its answer was lost (to an interruption).
    if (committed.left._tag === "DuplicateAttemptError" && offered !== undefined) attempt.committed = offered
    return yield* new PersistError({
      call_executed: callExecuted(outcome),
      attempt_id: attempt.attempt_id,
      detail: committed.left.message
    })
  })

  return { bindRun, openRun, persist }
}
