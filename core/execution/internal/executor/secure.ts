/**
 * Stages 5-10: the security interceptors in fixed order, bound to the arguments' digest; the transformers; the
 * revalidation of what they produced; and the recheck of every evaluator when the digest or a policy input changed.
 */
import { Deferred, Duration, Effect, Exit, Option, Schema } from "effect"
import type { Usage } from "../../../action/ActionUsage.ts"
import { type IdGenerator, type Uuid, uuidsWith } from "../../../base/IdGenerator.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import * as Time from "../../../base/Time.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import { ActionAdmissionDecision } from "../../AdmissionDecision.ts"
import {
  Cancelled,
  ComparedInputs,
  type ExecutionOutcome,
  PolicyInputs,
  Recheck,
  TimedOut
} from "../../ExecutionOutcome.ts"
import type { Arguments } from "../../ExecutionRequest.ts"
import { type Evaluation, type GateOutcome, type Interceptor, isVerdict, type Verdict } from "../../Interceptor.ts"
import type { SecurityStage, Stage } from "../../Stage.ts"
import { decodeWith, type Digested } from "./admit.ts"
import { type Call, denied, outcomeOf, outcomeWith, reason } from "./call.ts"
import type { Env } from "./env.ts"
import { type DecideStep, type EffectStep, isOutcome, type SyncStep, type WithinStep } from "./table.ts"

// What an evaluator sees of the call now, with the snapshot a governed call was pinned to at stage 3.
const evaluationOf = (state: Digested & { readonly snapshot?: PolicySnapshot }): Evaluation => ({
  attempt_id: state.call.attempt_id,
  request: state.call.request,
  context: state.call.context,
  descriptor: state.action.descriptor,
  arguments: state.args,
  arguments_digest: state.digest,
  ...(state.snapshot === undefined ? {} : { snapshot: state.snapshot })
})

// An evaluator that failed, threw or answered no verdict: a hard deny of its own gate, marked as an evaluator error.
const evaluatorError = (evaluator: string): Verdict => ({
  disposition: "deny",
  code: "control.evaluator_error",
  gates: [{
    gate_id: evaluator,
    level: "hard",
    decision: "deny",
    reason_code: "control.evaluator_error",
    matched_rules: [],
    evaluator_error: true
  }]
})

// What an evaluator answered, as a verdict copied once its fields were checked; reading it must not throw past here.
const verdictOf = (answer: unknown, evaluator: string): Verdict => {
  try {
    if (!isVerdict(answer)) return evaluatorError(evaluator)
    const copy = { ...answer }
    return isVerdict(copy) ? copy : evaluatorError(evaluator)
  } catch {
    return evaluatorError(evaluator)
  }
}

/** The evidence reference of a gate result: its `gate_evaluated` record's result id (governed), else its gate's id. */
export const gateReference = (gate_id: string, result_id?: string) =>
  result_id === undefined ? `gate:${gate_id}` : `gate_evaluated:${result_id}`

// An allow that a gate denied (advisory, or soft with an exception granted): the denying gate results it rests on.
const denyingGates = (verdict: Verdict) =>
  verdict.disposition === "allow" && verdict.gates !== undefined &&
  verdict.gates.some((gate) => gate.decision === "deny")

// The references an allow's decision carries to the gate results that denied it: none for any other verdict.
const evidenceOf = (verdict: Verdict, result_ids: ReadonlyArray<Uuid> | undefined): Array<string> =>
  verdict.disposition !== "allow" || verdict.gates === undefined
    ? []
    : verdict.gates.flatMap((gate, i) => gate.decision === "deny" ? [gateReference(gate.gate_id, result_ids?.[i])] : [])

// One interceptor's answer bound to the current digest and recorded on the call: an outcome when it refuses. Governed,
// `result_ids` are the ids its gate records will carry, minted here when its decision must reference them.
const bound = (
  state: Digested,
  interceptor: Interceptor,
  stage: Stage,
  governed: boolean,
  verdict: Verdict,
  result_ids?: ReadonlyArray<Uuid>
): ExecutionOutcome | undefined => {
  const call = state.call
  const decision = trustedMake(ActionAdmissionDecision, {
    disposition: verdict.disposition,
    reason: reason(verdict.code, verdict.detail),
    evaluator: interceptor.id,
    stage,
    arguments_digest: state.digest,
    evidence: evidenceOf(verdict, result_ids),
    ...(verdict.disposition === "defer" && verdict.retry_at !== undefined ? { retry_at: verdict.retry_at } : {}),
    ...(verdict.disposition === "escalate" && verdict.approval !== undefined ? { approval: verdict.approval } : {})
  })
  ;(call.decisions ??= []).push(decision)
  if (governed) {
    ;(call.produced ??= []).push({
      evaluator: interceptor.id,
      verdict,
      stage,
      arguments_digest: state.digest,
      ...(result_ids === undefined ? {} : { result_ids })
    })
  }
  const charge = interceptor.charge
  if (
    verdict.disposition === "allow" && verdict.metered === true && charge !== undefined &&
    call.charges?.has(interceptor) !== true
  ) {
    ;(call.charges ??= new Map()).set(interceptor, (usage: Usage) => charge(evaluationOf(state), usage))
  }
  return verdict.disposition === "allow" ? undefined : outcomeOf(call, verdict.disposition, decision)
}

const decodeInputs = Schema.decodeUnknownOption(PolicyInputs)

// What an evaluator read besides the arguments, now; undefined when it could not say (a recheck then runs).
const inputsNow = (state: Digested, interceptor: Interceptor): Effect.Effect<PolicyInputs | undefined> =>
  interceptor.inputs === undefined ? Effect.succeed(undefined) : Effect.map(
    Effect.exit(Effect.suspend(() => interceptor.inputs!(evaluationOf(state)))),
    (exit) => Exit.isSuccess(exit) ? Option.getOrUndefined(decodeInputs(exit.value)) : undefined
  )

// A stage's decision so far: settled (an outcome, or undefined to go on), or the Effect that settles it.
type Decided = ExecutionOutcome | undefined | Effect.Effect<ExecutionOutcome | undefined>

const asEffect = (decided: Decided): Effect.Effect<ExecutionOutcome | undefined> =>
  Effect.isEffect(decided) ? decided : Effect.succeed(decided)

// What an interceptor decides synchronously, as a verdict to bind; undefined when it has no such decision now.
const decidedNow = (state: Digested, interceptor: Interceptor): Verdict | undefined => {
  try {
    const answer = interceptor.decide?.(evaluationOf(state), state.call.moment)
    return answer === undefined ? undefined : verdictOf(answer, interceptor.id)
  } catch {
    return evaluatorError(interceptor.id)
  }
}

/**
 * Run interceptors in order at `stage`, each decision bound to the current digest; an outcome when one refuses. An
 * interceptor that decides synchronously costs no Effect operation: the answer is an Effect only from the first one
 * that needs it (an evaluator doing I/O, gate ids minted asynchronously, inputs kept for a comparison). With
 * `compare` (a recheck follows), what each reporting evaluator read is kept for stage 10; `governed`: the ids the
 * gate records are minted from.
 */
const decide = (
  state: Digested,
  interceptors: ReadonlyArray<Interceptor>,
  stage: Stage,
  governed: IdGenerator.Service | undefined,
  compare = false
): Decided => {
  const from = (i: number): Decided => {
    const interceptor = interceptors[i]
    if (interceptor === undefined) return undefined
    const now = decidedNow(state, interceptor)
    if (now !== undefined) return settle(i, interceptor, now)
    return Effect.flatMap(Effect.exit(Effect.suspend(() => interceptor.evaluate(evaluationOf(state)))), (exit) =>
      // An evaluator is user code: what it answers is bound only if it is a verdict.
      asEffect(
        settle(
          i,
          interceptor,
          Exit.isSuccess(exit) ? verdictOf(exit.value, interceptor.id) : evaluatorError(interceptor.id)
        )
      ))
  }
  const kept = (i: number, interceptor: Interceptor): Decided =>
    !compare || interceptor.inputs === undefined ?
      from(i + 1) :
      Effect.flatMap(inputsNow(state, interceptor), (inputs) => {
        ;(state.call.inputs ??= new Map()).set(interceptor, inputs)
        return asEffect(from(i + 1))
      })
  const settle = (i: number, interceptor: Interceptor, verdict: Verdict): Decided => {
    const next = (refused: ExecutionOutcome | undefined) => refused === undefined ? kept(i, interceptor) : refused
    // Governed, an allow resting on a denying gate references its record, so that record's id is minted now.
    if (governed === undefined || !denyingGates(verdict)) {
      return next(bound(state, interceptor, stage, governed !== undefined, verdict))
    }
    const count = (verdict as { readonly gates: ReadonlyArray<GateOutcome> }).gates.length
    const sync = governed.uuidSync
    if (sync !== undefined) {
      return next(bound(state, interceptor, stage, true, verdict, Array.from({ length: count }, sync)))
    }
    return Effect.flatMap(
      uuidsWith(governed, count),
      (result_ids) => asEffect(next(bound(state, interceptor, stage, true, verdict, result_ids)))
    )
  }
  return from(0)
}

const securityDetail: Record<SecurityStage, string> = {
  authorise: "principal and tenant authorization interceptors",
  guard: "intrinsic guard interceptors",
  policy: "action policy interceptors"
}

/** Stages 5, 6 or 7: the action's interceptors of that stage; with `compare`, what they read is kept for stage 10. */
export const securityWith = (
  stage: SecurityStage,
  interceptors: ReadonlyArray<Interceptor>,
  governed: IdGenerator.Service | undefined,
  compare: boolean
): DecideStep<Digested, void> => ({
  _tag: "Decide",
  stage,
  detail: `${securityDetail[stage]}: ${interceptors.map((interceptor) => interceptor.id).join(", ")}`,
  run: (state) => decide(state, interceptors, stage, governed, compare)
})

/** After stage 8: the digest the security stages decided on. */
export interface Transformed extends Digested {
  readonly before: Digested["digest"]
}

/** Stage 8: each transformer in turn rewrites the arguments. */
export const transformWith = (env: Env): EffectStep<Digested, { before: Digested["digest"]; args: Arguments }> => ({
  _tag: "Effect",
  stage: "transform",
  detail: `user transformations: ${env.transformers.map((transformer) => transformer.id).join(", ")}`,
  run: Effect.fnUntraced(function*(state) {
    const before = state.digest
    let args = state.args
    for (const transformer of env.transformers) {
      const exit = yield* Effect.exit(
        Effect.suspend(() => transformer.transform(Object.assign({}, evaluationOf(state), { arguments: args })))
      )
      if (Exit.isFailure(exit)) return denied(state.call, "transform.failed", `transformer ${transformer.id} failed`)
      args = exit.value
    }
    return { before, args }
  })
})

/** Stage 9: decode and digest the transformed arguments again. */
export const revalidateWith = (
  digestStep: SyncStep<any, Digested> | EffectStep<any, Digested>
): EffectStep<Transformed, Digested> => ({
  _tag: "Effect",
  stage: "revalidate",
  detail: "decode the transformed arguments again",
  run: (state) => {
    const decoded = decodeWith(state.call, state.action, state.args)
    if (isOutcome(decoded)) return Effect.succeed(decoded)
    const view = Object.assign({}, state, { input: decoded.input })
    const digested = digestStep._tag === "Sync" ? Effect.succeed(digestStep.run(view)) : digestStep.run(view)
    return Effect.map(
      digested,
      (answer) =>
        isOutcome(answer)
          ? answer
          : Object.assign({}, decoded, { args: answer.args, digest: answer.digest }) as Digested
    )
  }
})

const sameInputs = (a: PolicyInputs, b: PolicyInputs) =>
  a.snapshot === b.snapshot && a.resolved_path === b.resolved_path && a.approval_state === b.approval_state &&
  a.time_or_budget === b.time_or_budget

// Each reporting evaluator's inputs as it decided and as they read now, on the transformed arguments.
const comparedOf = (state: Transformed): Effect.Effect<ReadonlyArray<ComparedInputs>> => {
  const kept = state.call.inputs
  if (kept === undefined) return Effect.succeed([])
  return Effect.forEach(
    kept,
    ([interceptor, decided]) =>
      Effect.map(inputsNow(state, interceptor), (current) =>
        trustedMake(ComparedInputs, {
          evaluator: interceptor.id,
          decided: decided ?? trustedMake(PolicyInputs, {}),
          ...(current === undefined || decided === undefined ? {} : { current })
        }))
  )
}

const reasonOf = (changed: boolean, compared: ReadonlyArray<ComparedInputs>): Recheck["reason"] => {
  if (changed) return "arguments_changed"
  if (compared.some(({ current, decided }) => current === undefined || !sameInputs(decided, current))) {
    return "inputs_changed"
  }
  if (compared.some(({ current, decided }) => decided.time_or_budget === true || current?.time_or_budget === true)) {
    return "time_or_budget_rule"
  }
  return compared.length > 0 ? "inputs_unchanged" : "arguments_unchanged"
}

/**
 * Stage 10: re-run every evaluator when the digest or any input an evaluator read changed, or an expiry or budget rule
 * applies; record why it ran or not, with the inputs compared.
 */
export const recheckWith = (
  interceptors: ReadonlyArray<Interceptor>,
  governed: IdGenerator.Service | undefined
): EffectStep<Transformed, void> => ({
  _tag: "Effect",
  stage: "recheck",
  detail:
    `re-run every security evaluator when the digest or a policy input changed, or a time or budget rule applies: ${
      interceptors.map((interceptor) => interceptor.id).join(", ")
    }`,
  run: (state) =>
    Effect.flatMap(comparedOf(state), (compared) => {
      const reason = reasonOf(state.digest !== state.before, compared)
      const ran = reason !== "arguments_unchanged" && reason !== "inputs_unchanged"
      state.call.recheck = trustedMake(Recheck, {
        ran,
        reason,
        evaluators: ran ? interceptors.map((interceptor) => interceptor.id) : [],
        digest_before: state.before,
        digest_after: state.digest,
        ...(compared.length === 0 ? {} : { compared })
      })
      return ran ? asEffect(decide(state, interceptors, "recheck", governed)) : Effect.succeed(undefined)
    })
})

const notRechecked = trustedMake(Recheck, { ran: false, reason: "no_transformation", evaluators: [] })

/** Stage 10 without transformers: nothing changed the arguments, and that is recorded. */
export const noRecheck: SyncStep<Digested, void> = {
  _tag: "Sync",
  stage: "recheck",
  detail: "no transformation: the evaluators' digest is unchanged",
  run: ({ call }) => {
    call.recheck = notRechecked
  }
}

/** `effect` raced against the call's deadline (the request's, or an earlier lease expiry) and its cancellation: whichever comes first interrupts it. */
export const untilStopped = <A, E>(
  call: Call,
  effect: Effect.Effect<A, E>,
  stopped: (by: "deadline" | "cancel") => A
): Effect.Effect<A, E> => {
  const deadline = call.deadline
  const cancel = call.cancel
  const cancelled = cancel === undefined
    ? effect
    : Effect.raceFirst(effect, Effect.zipRight(Deferred.await(cancel), Effect.sync(() => stopped("cancel"))))
  return deadline === undefined ? cancelled : Effect.raceFirst(
    cancelled,
    Effect.flatMap(Time.nowMicros, (now) =>
      Effect.zipRight(
        Effect.sleep(Duration.micros(BigInt(Math.max(0, Time.toMicros(deadline) - now)))),
        Effect.sync(() => stopped("deadline"))
      ))
  )
}

/**
 * Stages 5-11 until the request's deadline or cancellation, whichever comes first concluding the call (timed out or
 * cancelled, the callable never reached).
 */
export const bounded: WithinStep = {
  _tag: "Within",
  detail: "stages 5-11 stop at the request's deadline or cancellation",
  run: <A, E2>(call: Call, steps: Effect.Effect<A | ExecutionOutcome, E2>) =>
    call.deadline === undefined && call.cancel === undefined
      ? steps
      : untilStopped<A | ExecutionOutcome, E2>(call, steps, (by) =>
        by === "cancel"
          ? outcomeWith(Cancelled, call, { call_executed: false })
          : outcomeWith(TimedOut, call, { call_executed: false }))
}
