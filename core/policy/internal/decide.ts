/**
 * The gate's decisions on a pinned snapshot: the guard part (a soft deny escalating), the policy part (recorded once
 * per gate, budgets admitted once it allows) and the charge of what a call consumed.
 */
import { Effect, Either } from "effect"
import type { Usage } from "../../action/ActionUsage.ts"
import * as Time from "../../base/Time.ts"
import type { Evaluation, Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import type { PolicyInput } from "../PolicyEvaluator.ts"
import type { makeBudgets } from "./budget.ts"
import { namesOf } from "./budget.ts"
import type { makeEscalation } from "./escalation.ts"
import type { Pinned, Reduced } from "./reduce.ts"
import { reduce } from "./reduce.ts"

/** The decisions over budgets, escalation and the pin of the gate that makes them. */
export const makeDecisions = (
  budgets: ReturnType<typeof makeBudgets>,
  escalate: ReturnType<typeof makeEscalation>,
  pinOf: (evaluation: Evaluation) => Effect.Effect<Either.Either<Pinned, Verdict>>
) => {
  const chargeOf = (pinned: Pinned, evaluation: Evaluation, now: number) => ({
    snapshot: pinned.snapshot,
    names: namesOf(evaluation),
    principal: evaluation.context.authenticated_principal.id,
    now
  })

  /** After the call: charge what it consumed to each matching wall-time, token and cost budget. */
  const chargeUsage = Effect.fnUntraced(function*(evaluation: Evaluation, usage: Usage) {
    const pinned = yield* pinOf(evaluation)
    if (Either.isLeft(pinned)) return
    yield* budgets.consume(chargeOf(pinned.right, evaluation, yield* Time.nowMicros), usage)
  })

  const charged = (pinned: Pinned, input: PolicyInput, evaluation: Evaluation, allowed: Interceptor.Allowed) =>
    budgets.admit(chargeOf(pinned, evaluation, input.now), evaluation.attempt_id, allowed)

  const passed = (guarded: Verdict): Verdict =>
    guarded.disposition === "allow"
      ? Interceptor.withGates(guarded, (guarded.gates ?? []).filter((gate) => gate.decision === "deny"))
      : guarded

  // A gate's result is recorded once: at the policy stage, unless its guard part already refused. A soft guard deny
  // escalates here, and an approval presented for it lets the call go on.
  const guard = (pinned: Pinned, evaluation: Evaluation, input: PolicyInput): Effect.Effect<Verdict> => {
    const result = reduce(pinned, "guard", input)
    return result.disposition === "escalate"
      ? Effect.map(escalate(pinned, evaluation, input, result), passed)
      : Effect.succeed(passed(result))
  }

  /** The guard part's verdict synchronously; undefined when it escalates (the approval queue decides). */
  const guardNow = (pinned: Pinned, input: PolicyInput): Verdict | undefined => {
    const result = reduce(pinned, "guard", input)
    return result.disposition === "escalate" ? undefined : passed(result)
  }

  // A gate whose guard part denied was recorded at the guard stage: its policy part adds no second result (only an
  // advisory gate's guard deny, or a soft one an approval resolved, lets the call get here).
  const policyResult = (pinned: Pinned, input: PolicyInput): Reduced => {
    const result = reduce(pinned, "policy", input)
    const guarded = pinned.guardsPass ? reduce(pinned, "guard", input).gates ?? [] : []
    if (!guarded.some((gate) => gate.decision === "deny")) return result
    const recorded = new Set(guarded.flatMap((gate) => gate.decision === "deny" ? [gate.gate_id] : []))
    return Interceptor.withGates(result, (result.gates ?? []).filter((gate) => !recorded.has(gate.gate_id)))
  }

  const policy = (pinned: Pinned, evaluation: Evaluation, input: PolicyInput): Effect.Effect<Verdict> =>
    settled(pinned, input, evaluation, policyResult(pinned, input))

  /** The policy part's verdict synchronously; undefined when it escalates or a budget binds the action (a ledger decides). */
  const policyNow = (pinned: Pinned, evaluation: Evaluation, input: PolicyInput): Verdict | undefined => {
    const result = policyResult(pinned, input)
    if (result.disposition === "deny") return result
    if (result.disposition === "escalate") return undefined
    return budgets.binds(pinned.snapshot, namesOf(evaluation)) ? undefined : result
  }

  const settled = (
    pinned: Pinned,
    input: PolicyInput,
    evaluation: Evaluation,
    result: Reduced
  ): Effect.Effect<Verdict> => {
    if (result.disposition === "deny") return Effect.succeed(result)
    if (result.disposition !== "escalate") return charged(pinned, input, evaluation, result)
    return Effect.flatMap(
      escalate(pinned, evaluation, input, result),
      (escalated) =>
        escalated.disposition === "allow" ? charged(pinned, input, evaluation, escalated) : Effect.succeed(escalated)
    )
  }

  return { chargeUsage, guard, guardNow, policy, policyNow }
}
