/**
 * The durable stages: the scope's Run bound at stage 3, a one-shot call's Run created once it is admitted, and each
 * attempt with its outcome and outbox intents committed at stage 14, however the call concludes.
 */
import { Deferred, Effect, Either } from "effect"
import { trustedMake } from "../../../base/internal/trusted.ts"
import * as Time from "../../../base/Time.ts"
import { OperationAttempt, outcomeIntent, summarize } from "../../../state/Attempt.ts"
import type { AttemptStore } from "../../../state/AttemptStore.ts"
import type { Run } from "../../../state/Run.ts"
import type { RunStore } from "../../../state/RunStore.ts"
import { callExecuted, Cancelled, type ExecutionOutcome } from "../../ExecutionOutcome.ts"
import type { Noted } from "./admit.ts"
import { type Call, denied, outcomeWith, resultDigest } from "./call.ts"
import { type Env, PersistError } from "./env.ts"
import type { AroundStep, EffectStep } from "./table.ts"

/** The attempts this executor is running in Runs, by attempt id: an enclosing attempt is one before it is committed. */
export type Running = Map<string, string>

/**
 * Stage 3, durable: the scope's Run must exist and still be running, and an enclosing attempt the scope names must be
 * one of that Run's: running in this executor, or committed (read from `attempts`; without them, refused as
 * unverifiable). The call then belongs to the Run, and is running in it until it concludes.
 */
export const bindRunWith = (
  store: RunStore.Service,
  attempts: AttemptStore.Service | undefined,
  running: Running
): EffectStep<Noted, void> => ({
  _tag: "Effect",
  stage: "bind_context",
  detail: "the scope's Run must exist and be running; its owner attempt, if named, must be the Run's",
  skip: ({ call }) => call.request.execution_scope._tag !== "durable_run",
  run: ({ call }) => {
    const scope = call.request.execution_scope
    const run_id = scope._tag === "durable_run" ? scope.run_id : ""
    const owner = scope._tag === "durable_run" ? scope.owner_attempt_id : undefined
    return Effect.flatMap(Effect.either(store.getRun(run_id)), (run) => {
      if (Either.isLeft(run)) return Effect.succeed(denied(call, "scope.run_not_found", `no Run ${run_id}`))
      if (run.right.status !== "running") {
        return Effect.succeed(denied(call, "scope.run_not_running", `Run ${run_id} is ${run.right.status}`))
      }
      const bind = () => {
        call.run_id = run.right.run_id
        running.set(call.attempt_id, run.right.run_id)
      }
      if (owner === undefined || running.get(owner) === run_id) return Effect.sync(bind)
      if (attempts === undefined) {
        return Effect.succeed(
          denied(
            call,
            "scope.owner_attempt_mismatch",
            `attempt ${owner} is not running here, and no attempt store can say`
          )
        )
      }
      return Effect.map(Effect.either(attempts.listAttempts(run_id)), (listed) => {
        if (Either.isLeft(listed)) {
          return denied(call, "scope.run_unavailable", `the attempts of Run ${run_id} could not be read`)
        }
        if (!listed.right.some((attempt) => attempt.attempt_id === owner)) {
          return denied(call, "scope.owner_attempt_mismatch", `attempt ${owner} is not an attempt of Run ${run_id}`)
        }
        bind()
      })
    })
  }
})

// The call's Run, created and started, and told to whoever waits for it.
const openRun = Effect.fnUntraced(function*(store: RunStore.Service, call: Call, created: Deferred.Deferred<Run>) {
  const policy = call.context.policy_snapshot
  const run = yield* store.createRun(policy === undefined ? { started: true } : { started: true, policy })
  call.run_id = run.run_id
  yield* Deferred.succeed(created, run)
})

/**
 * Stage 12, one-shot durable: the invocation is admitted, so its Run is created already running (the store mints its
 * id, in one write: a crash leaves either no Run or a running one, which recovery ends) before the call; a store
 * failure here is a PersistError before any call.
 */
export const openRunWith = (store: RunStore.Service): EffectStep<Noted, void> => ({
  _tag: "Effect",
  stage: "invoke",
  detail: "a one-shot call's Run is created, running, once the call is admitted",
  skip: ({ call }) => call.newRun === undefined,
  run: ({ call }) => {
    const created = call.newRun
    if (created === undefined) return Effect.void
    return Effect.uninterruptible(openRun(store, call, created)).pipe(
      Effect.mapError((error) =>
        new PersistError({
          call_executed: false,
          attempt_id: call.attempt_id,
          detail: `its Run could not be created and started: ${error.message}`
        })
      )
    )
  }
})

/**
 * Stage 14, durable: from the moment a call belongs to a Run (its scope's, bound at stage 3, or its own, created at
 * stage 12), whatever concludes it is committed: the typed attempt, its outcome summary, its outcome intent and, if
 * the call succeeded, the intents it staged, in one transaction. An interruption commits it as cancelled.
 */
export const commitWith = (env: Env, store: AttemptStore.Service): AroundStep<Noted, unknown> => {
  const persist = Effect.fnUntraced(
    function*(state: Noted, offered: { first?: ExecutionOutcome }, outcome: ExecutionOutcome) {
      const call = state.call
      if (call.run_id === undefined) return outcome
      if (outcome.stage === "outcome") call.enter("persist")
      const result_digest = outcome._tag === "succeeded" ? yield* resultDigest(env.digest, outcome.result) : null
      const attempt = trustedMake(OperationAttempt, {
        attempt_id: call.attempt_id,
        run_id: call.run_id,
        request_id: call.request.request_id,
        action_name: call.action.name,
        action_version: call.action.version ?? null,
        arguments_digest: state.digest ?? null,
        outcome: summarize(outcome, result_digest),
        created_at: yield* Time.now,
        ...(call.recheck === undefined ? {} : { recheck: call.recheck }),
        ...(call.context.policy_snapshot === undefined ? {} : { policy: call.context.policy_snapshot })
      })
      const first = offered.first
      offered.first ??= outcome
      // What the call staged commits only if it succeeded; the outbox closes either way, so nothing more is staged.
      const staged = call.outbox?.close() ?? []
      const intents = [outcomeIntent(attempt), ...(outcome._tag === "succeeded" ? staged : [])]
      const committed = yield* Effect.either(store.commitAttempt({ attempt, intents }))
      if (Either.isRight(committed)) {
        call.committed = outcome
        return outcome
      }
      // The attempt is there already: the first commit landed though its answer was lost (to an interruption).
      if (committed.left._tag === "DuplicateAttemptError" && first !== undefined) call.committed = first
      return yield* new PersistError({
        call_executed: callExecuted(outcome),
        attempt_id: call.attempt_id,
        detail: committed.left.message
      })
    }
  )
  return {
    _tag: "Around",
    closes: "persist",
    detail: "durable: the attempt, its outcome and its outbox intents commit in one AttemptStore transaction",
    skip: ({ call }) => call.run_id === undefined && call.newRun === undefined,
    run: (state, inner) => {
      const offered: { first?: ExecutionOutcome } = {}
      const call: Call = state.call
      return inner(state).pipe(
        Effect.flatMap((outcome) => persist(state, offered, outcome)),
        Effect.onInterrupt(() =>
          Effect.exit(
            persist(
              state,
              offered,
              outcomeWith(Cancelled, call, { call_executed: call.invoked })
            )
          )
        )
      )
    }
  }
}
