/**
 * A failure inside the policy gate's own evaluation (its path resolver, approval queue or budget ledger failing or
 * throwing) is an evaluator error of the gates that apply to the call, never an ordinary deny: each gate's `on_error`
 * decides. Any gate on `deny` (the default) denies fail-closed; when every one is on `escalate` and the snapshot
 * names an approver, the call escalates to it like a soft deny (an approval presented passes it as an exception).
 */
import { Cause, Effect } from "effect"
import type { Evaluation, GateOutcome, Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import { defaultApprovalLifetime } from "../PermissionPolicy.ts"
import type { Part, PolicyInput } from "../PolicyEvaluator.ts"
import type { makeBudgets } from "./budget.ts"
import { namesOf } from "./budget.ts"
import type { makeEscalation } from "./escalation.ts"
import type { Pinned } from "./reduce.ts"

const code = "control.evaluator_error"

const failedGate = (gate_id: string, level: GateOutcome["level"]): GateOutcome => ({
  gate_id,
  level,
  decision: "deny",
  reason_code: code,
  matched_rules: [],
  evaluator_error: true
})

// Interruption (a deadline, a cancellation) is not an evaluator error: it stops the call as it would anyway.
const recover = <A>(effect: Effect.Effect<A>, recovered: () => Effect.Effect<A>) =>
  Effect.catchAllCause(effect, (cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : recovered())

/** The policy gate's evaluation of `part` with its failures mapped by each applicable gate's `on_error` (budgets admitted at the policy part). */
export const makeOnError = (
  budgets: ReturnType<typeof makeBudgets>,
  escalate: ReturnType<typeof makeEscalation>,
  inputOf: (evaluation: Evaluation) => Effect.Effect<PolicyInput>
) => {
  const failed = (part: Part, pinned: Pinned, evaluation: Evaluation): Effect.Effect<Verdict> => {
    const applicable = pinned.gates.filter((gate) => gate.tools.some((tool) => tool.test(evaluation.descriptor.name)))
    const gates = applicable.length === 0
      ? [failedGate("writ.evaluation", "hard")]
      : applicable.map(({ gate }) => failedGate(gate.gate_id, gate.level))
    const denied: Verdict = Interceptor.withGates(Interceptor.deny(code, "the policy gate's evaluation failed"), gates)
    const approver = pinned.approver
    if (
      approver === undefined || applicable.length === 0 || applicable.some(({ gate }) => gate.on_error !== "escalate")
    ) {
      return Effect.succeed(denied)
    }
    const detail = `the policy gate's evaluation failed; gates ${gates.map((gate) => gate.gate_id).join(",")} escalate`
    const escalated = Effect.flatMap(inputOf(evaluation), (input) =>
      Effect.flatMap(
        escalate(
          pinned,
          evaluation,
          input,
          Object.assign({}, Interceptor.escalate(code, { detail }), {
            approver_class: approver,
            expires_after: defaultApprovalLifetime,
            soft_deny: true,
            approval_gates: [],
            gates
          })
        ),
        (verdict) =>
          verdict.disposition !== "allow" || part === "guard" ? Effect.succeed(verdict) : budgets.admit(
            {
              snapshot: pinned.snapshot,
              names: namesOf(evaluation),
              principal: evaluation.context.authenticated_principal.id,
              now: input.now
            },
            evaluation.attempt_id,
            verdict
          )
      ))
    return recover(escalated, () => Effect.succeed(denied))
  }

  return (
    part: Part,
    pinned: Pinned,
    evaluation: Evaluation,
    evaluated: Effect.Effect<Verdict>
  ): Effect.Effect<Verdict> => recover(evaluated, () => failed(part, pinned, evaluation))
}
