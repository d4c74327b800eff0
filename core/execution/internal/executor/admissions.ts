/**
 * A governed call's budget places taken by its own evidence commits (where the ledger shares the evidence's database):
 * those of stage 3 with its operation's start, those of stage 7 with its gate records at stage 11; and the call's
 * conclusion when one of them found its window full, nothing of that commit written.
 */
import { trustedMake } from "../../../base/internal/trusted.ts"
import type { BudgetSpentError, Pending, PendingAdmission } from "../../../policy/BudgetLedger.ts"
import { ActionAdmissionDecision } from "../../AdmissionDecision.ts"
import type { Deferral } from "../../Capacity.ts"
import { Deferred, type ExecutionOutcome } from "../../ExecutionOutcome.ts"
import type { Refused } from "../../Interceptor.ts"
import { type Call, outcomeOf, outcomeWith, type Produced, reason } from "./call.ts"

/** No admission to carry. */
export const noAdmissions: ReadonlyArray<PendingAdmission> = Object.freeze([])

// The pending whose admissions hold the flat index, and the index within it.
const locate = <P extends Pending<unknown>>(pendings: ReadonlyArray<P>, index: number) => {
  let at = index
  for (const [i, pending] of pendings.entries()) {
    if (at < pending.admissions.length) return { i, at }
    at -= pending.admissions.length
  }
  return { i: 0, at: 0 }
}

/** Stage 4: the places its start takes, taken from the call. */
export const startAdmissions = (call: Call) => {
  const pendings = call.admissions ?? []
  call.admissions = undefined
  return pendings
}

/** Every admission of `pendings`, in order. */
export const flat = (pendings: ReadonlyArray<Pending<unknown>>): ReadonlyArray<PendingAdmission> =>
  pendings.length === 0 ? noAdmissions : pendings.flatMap((pending) => pending.admissions)

/** Stage 4 lost its window's last place: the call is deferred until that window ends, with no evidence written. */
export const deferredBy = (call: Call, pendings: ReadonlyArray<Pending<Deferral>>, spent: BudgetSpentError) => {
  const { at, i } = locate(pendings, spent.index)
  const { code, detail, retry_at } = pendings[i]!.spent(at, spent.count)
  return outcomeWith(Deferred, call, { reason: reason(code, detail), ...(retry_at === undefined ? {} : { retry_at }) })
}

/** Stage 11: the places the verdicts produced since the last checkpoint take, each with the verdict's position. */
export const carriedBy = (produced: ReadonlyArray<Produced> | undefined) => {
  const carried: Array<Pending<Refused> & { readonly position: number }> = []
  for (const [position, { verdict }] of (produced ?? []).entries()) {
    if (verdict.disposition === "allow" && verdict.admissions !== undefined) {
      carried.push(Object.assign({}, verdict.admissions, { position }))
    }
  }
  return carried
}

/**
 * Stage 11 lost a window's last place: the verdict that allowed the call becomes its denial, whose gate records the
 * terminal's commit carries (the verdicts are handed back to the call), and the call concludes denied.
 */
export const deniedBy = (
  call: Call,
  produced: ReadonlyArray<Produced>,
  carried: ReturnType<typeof carriedBy>,
  spent: BudgetSpentError
): ExecutionOutcome => {
  const { at, i } = locate(carried, spent.index)
  const { position } = carried[i]!
  const { result_ids: _, ...allowed } = produced[position]!
  const verdict = carried[i]!.spent(at, spent.count)
  call.produced = produced.map((entry, n) => n === position ? Object.assign({}, allowed, { verdict }) : entry)
  const decision = trustedMake(ActionAdmissionDecision, {
    disposition: "deny",
    reason: reason(verdict.code, verdict.detail),
    evaluator: allowed.evaluator,
    stage: allowed.stage,
    arguments_digest: allowed.arguments_digest,
    evidence: []
  })
  // The allow it replaces was never committed: the call's decisions say what its evidence will.
  const decisions = call.decisions ?? []
  const replaced = decisions.findLastIndex((d) => d.evaluator === allowed.evaluator && d.disposition === "allow")
  call.decisions = replaced === -1
    ? [...decisions, decision]
    : decisions.map((d, n) => n === replaced ? decision : d)
  return outcomeOf(call, "deny", decision)
}
