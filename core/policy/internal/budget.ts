import { Effect } from "effect"
import type { Usage } from "../../action/ActionUsage.ts"
import type { Allowed, Evaluation, Refused, Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import type { BudgetLedger, BudgetWindow } from "../BudgetLedger.ts"
import type { BudgetRule } from "../PolicyRule.ts"
import type { PolicySnapshot } from "../PolicySnapshot.ts"
import { glob } from "./glob.ts"
import { refusal } from "./reduce.ts"

type Budget = typeof BudgetRule.Type

/** The budgets that bind an action under any of its names: one written against an alias binds it as a deny does. */
export const budgetsOf = (snapshot: PolicySnapshot, names: ReadonlyArray<string>): ReadonlyArray<Budget> =>
  snapshot.compiled_rules.filter((rule): rule is Budget =>
    rule.kind === "budget" && rule.action_patterns.some((pattern) => names.some((name) => glob(pattern).test(name)))
  )

const windowOf = (snapshot: PolicySnapshot, rule: Budget, principal: string, now: number): BudgetWindow => ({
  snapshot_digest: snapshot.digest,
  rule_id: rule.rule_id,
  principal,
  window: Math.floor(now / rule.window_microseconds)
})

const exhausted = (rule: Budget, consumed: number): Refused =>
  Interceptor.deny(
    "budget.exhausted",
    `rule ${rule.rule_id}: ${consumed} of ${rule.limit} ${rule.budget_kind} per ${rule.window_microseconds} µs`
  )

/** Who is charged, when, for which action under which names. */
export interface Charge {
  readonly snapshot: PolicySnapshot
  readonly names: ReadonlyArray<string>
  readonly principal: string
  readonly now: number
}

/** Stage 7 and after the call: budgets enforced through the ledger. */
export const makeBudgets = (ledger: BudgetLedger.Service) => {
  // Deny when a wall-time, token or cost window is spent; otherwise give the attempt a place in each calls window.
  const refusalOf = (charge: Charge, rules: ReadonlyArray<Budget>, attempt_id: string) =>
    Effect.gen(function*() {
      for (const rule of rules) {
        if (rule.budget_kind === "calls") continue
        const consumed = yield* ledger.consumed(windowOf(charge.snapshot, rule, charge.principal, charge.now))
        if (consumed >= rule.limit) return exhausted(rule, consumed)
      }
      for (const rule of rules) {
        if (rule.budget_kind !== "calls") continue
        const window = windowOf(charge.snapshot, rule, charge.principal, charge.now)
        const admission = yield* ledger.admit(window, attempt_id, rule.limit)
        if (!admission.admitted) return exhausted(rule, admission.count)
      }
      return undefined
    })

  /** An allowed verdict, unless a budget is spent; metered when a wall-time, token or cost budget binds the action. */
  const admit = (charge: Charge, attempt_id: string, allowed: Allowed): Effect.Effect<Verdict> => {
    const rules = budgetsOf(charge.snapshot, charge.names)
    if (rules.length === 0) return Effect.succeed(allowed)
    return Effect.map(refusalOf(charge, rules, attempt_id), (spent): Verdict => {
      if (spent !== undefined) {
        return { ...spent, gates: [...(allowed.gates ?? []), refusal("writ.budget", spent.code)] }
      }
      return rules.some((rule) => rule.budget_kind !== "calls") ? { ...allowed, metered: true } : allowed
    })
  }

  /** After the call: charge what it consumed to each matching wall-time, token and cost budget. */
  const consume = (charge: Charge, usage: Usage) =>
    Effect.forEach(
      budgetsOf(charge.snapshot, charge.names),
      (rule) =>
        rule.budget_kind === "calls"
          ? Effect.void
          : ledger.charge(windowOf(charge.snapshot, rule, charge.principal, charge.now), usage[rule.budget_kind]),
      { discard: true }
    )

  return { admit, consume }
}

/** The evaluation's action under each of its names. */
export const namesOf = (evaluation: Evaluation) => [evaluation.descriptor.name, ...evaluation.descriptor.aliases]
