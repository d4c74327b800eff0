import { Effect, Either } from "effect"
import type { Usage } from "../../action/ActionUsage.ts"
import * as Time from "../../base/Time.ts"
import type { Deferral } from "../../execution/Capacity.ts"
import type { Allowed, Evaluation, Refused, Verdict } from "../../execution/Interceptor.ts"
import * as Interceptor from "../../execution/Interceptor.ts"
import type { BudgetLedger, BudgetWindow, Pending, PendingAdmission } from "../BudgetLedger.ts"
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

/** Whether any budget of a snapshot has a window (and so is quota, checked at stage 3). */
export const hasWindowedBudget = (snapshot: PolicySnapshot): boolean =>
  snapshot.compiled_rules.some((rule) => rule.kind === "budget" && rule.window_microseconds !== undefined)

// A budget without a window has one window, 0, for the policy's lifetime.
const indexOf = (rule: Budget, now: number) =>
  rule.window_microseconds === undefined ? 0 : Math.floor(now / rule.window_microseconds)

const windowOf = (snapshot: PolicySnapshot, rule: Budget, principal: string, now: number): BudgetWindow => ({
  snapshot_digest: snapshot.digest,
  rule_id: rule.rule_id,
  principal,
  window: indexOf(rule, now)
})

const spentDetail = (rule: Budget, consumed: number) =>
  `rule ${rule.rule_id}: ${consumed} of ${rule.limit} ${rule.budget_kind} ` +
  (rule.window_microseconds === undefined ? "(no window)" : `per ${rule.window_microseconds} µs`)

const exhausted = (rule: Budget, consumed: number): Refused =>
  Interceptor.deny("budget.exhausted", spentDetail(rule, consumed))

// Windows are fixed, so a spent window frees (its calls included) exactly when it ends.
const deferred = (rule: Budget, window_microseconds: number, consumed: number, now: number): Deferral => ({
  code: "budget.exhausted",
  detail: spentDetail(rule, consumed),
  retry_at: Time.fromMicros((Math.floor(now / window_microseconds) + 1) * window_microseconds)
})

/** Who is charged, when, for which action under which names. */
export interface Charge {
  readonly snapshot: PolicySnapshot
  readonly names: ReadonlyArray<string>
  readonly principal: string
  readonly now: number
}

type Spent = { readonly rule: Budget; readonly consumed: number }

/** What a check of budgets found: the first spent one, or the calls budgets' places the attempt is to take. */
type Checked =
  | { readonly spent: Spent; readonly pending?: undefined }
  | { readonly spent?: undefined; readonly pending: ReadonlyArray<{ rule: Budget; admission: PendingAdmission }> }

const none: Checked = { pending: [] }

const spentBy = (rule: Budget, consumed: number): Checked => ({ spent: { rule, consumed } })

/**
 * Stage 3 (windowed budgets), stage 7 (budgets without a window) and after the call: budgets kept in the ledger. Where
 * the ledger shares its database with the executor's evidence (`joint`), a calls budget's place is only read here, and
 * taken by the commit of the call's next records (`Pending`); elsewhere the ledger admits it in its own commit.
 */
export const makeBudgets = (ledger: BudgetLedger.Service, joint = false) => {
  // The first spent budget among `rules`: a wall-time, token or cost one whose consumed amount reached its limit, or
  // a calls one that has no place left for the attempt (which otherwise takes one in each, or is to take it).
  const check = Effect.fnUntraced(
    function*(charge: Charge, rules: ReadonlyArray<Budget>, attempt_id: string, carried: boolean) {
      for (const rule of rules) {
        if (rule.budget_kind === "calls") continue
        const consumed = yield* ledger.consumed(windowOf(charge.snapshot, rule, charge.principal, charge.now))
        if (consumed >= rule.limit) return spentBy(rule, consumed)
      }
      const pending: Array<{ rule: Budget; admission: PendingAdmission }> = []
      for (const rule of rules) {
        if (rule.budget_kind !== "calls") continue
        const window = windowOf(charge.snapshot, rule, charge.principal, charge.now)
        const admission = yield* (carried ? ledger.peek : ledger.admit)(window, attempt_id, rule.limit)
        if (!admission.admitted) return spentBy(rule, admission.count)
        if (carried) pending.push({ rule, admission: { window, attempt_id, limit: rule.limit } })
      }
      return pending.length === 0 ? none : { pending } satisfies Checked as Checked
    }
  )

  // The places to take with the call's next records, and the refusal for the one that finds its window full.
  const pendingOf = <R>(
    checked: Checked,
    refusal: (rule: Budget, consumed: number) => R
  ): Pending<R> | undefined => {
    const pending = checked.pending
    return pending === undefined || pending.length === 0 ? undefined : {
      admissions: pending.map((place) => place.admission),
      spent: (index, count) => refusal(pending[index]!.rule, count)
    }
  }

  /**
   * Stage 3: the deferral until the first spent windowed budget's window ends; else the places the call is to take
   * with its operation's start (joint), or none.
   */
  const quota = (
    charge: Charge,
    attempt_id: string
  ): Effect.Effect<Either.Either<Pending<Deferral> | undefined, Deferral>> => {
    const rules = budgetsOf(charge.snapshot, charge.names).filter((rule) => rule.window_microseconds !== undefined)
    if (rules.length === 0) return Effect.succeed(Either.right(undefined))
    const deferredBy = (rule: Budget, consumed: number) =>
      deferred(rule, rule.window_microseconds ?? 0, consumed, charge.now)
    return Effect.map(
      check(charge, rules, attempt_id, joint),
      (checked) =>
        checked.spent === undefined
          ? Either.right(pendingOf(checked, deferredBy))
          : Either.left(deferredBy(checked.spent.rule, checked.spent.consumed))
    )
  }

  /**
   * Stage 7: an allowed verdict, unless a budget without a window is spent; metered when a wall-time, token or cost
   * budget binds the action; carrying the places it is to take with its gate records (joint).
   */
  const admit = (charge: Charge, attempt_id: string, allowed: Allowed): Effect.Effect<Verdict> => {
    const rules = budgetsOf(charge.snapshot, charge.names)
    if (rules.length === 0) return Effect.succeed(allowed)
    const lifetime = rules.filter((rule) => rule.window_microseconds === undefined)
    const denied = (rule: Budget, consumed: number): Refused => {
      const refused = exhausted(rule, consumed)
      return Interceptor.withGates(refused, [...(allowed.gates ?? []), refusal("writ.budget", refused.code)])
    }
    // Only a verdict with gate results has records at stage 11 to carry its places; any other admits them here.
    const carried = joint && (allowed.gates === undefined || allowed.gates.length > 0)
    return Effect.map(check(charge, lifetime, attempt_id, carried), (checked): Verdict => {
      if (checked.spent !== undefined) return denied(checked.spent.rule, checked.spent.consumed)
      const metered = rules.some((rule) => rule.budget_kind !== "calls")
        ? Object.assign({}, allowed, { metered: true })
        : allowed
      const admissions = pendingOf(checked, denied)
      return admissions === undefined ? metered : Object.assign({}, metered, { admissions })
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

  /** Whether any budget binds the action under one of its names (and stage 7 must ask the ledger). */
  const binds = (snapshot: PolicySnapshot, names: ReadonlyArray<string>) => budgetsOf(snapshot, names).length > 0

  return { admit, binds, consume, quota }
}

/** The evaluation's action under each of its names. */
export const namesOf = (evaluation: Evaluation) => [evaluation.descriptor.name, ...evaluation.descriptor.aliases]
