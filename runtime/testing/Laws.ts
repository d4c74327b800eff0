/** The executor's own laws as properties, for any policy: `Testing.check({ policy, actions, properties: Testing.laws() })`. */
import type { ExecutionError } from "../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Origin from "../../core/policy/Origin.ts"
import type { Policy, Property } from "./Harness.ts"

/** Denial codes that name an explicit refusal (a deny rule, an origin rule, a guard), not a missing grant. */
export const explicitDenials: ReadonlySet<string> = new Set([
  "policy.denied",
  "policy.expired",
  "filesystem.denied",
  "subprocess.denied",
  "network.denied",
  "mcp.denied",
  "secret.denied",
  "environment.denied",
  "shell.control_operator",
  ...Origin.OriginDenial.literals
])

const succeeded = (outcome: ExecutionOutcome) => outcome._tag === "succeeded" && outcome.replay_of === undefined

/** Deny dominates: an attempt any evaluator denied is denied, and its callable never runs. */
export const denyDominates: Property = {
  name: "deny dominates",
  holds: (_call, outcome, observed) =>
    !outcome.decisions.some((d) => d.disposition === "deny") || (outcome._tag === "denied" && observed.ran === 0)
}

/** An escalation never runs the callable. */
export const escalationNeverRuns: Property = {
  name: "an escalation never runs the callable",
  holds: (_call, outcome, observed) => outcome._tag !== "escalated" || observed.ran === 0
}

/** Nothing runs after a pre-call evidence failure: an attempt that ended in an evidence error before the call ran nothing. */
export const nothingAfterEvidenceFailure: Property = {
  name: "nothing runs after a pre-call evidence failure",
  holds: () => true,
  holdsOnError: (_call, observed) => observed.error === undefined || observed.ran === 0 || !preCall(observed.error)
}

const PRE_CALL = new Set([
  "policy_bound",
  "operation_started",
  "gate_evaluated",
  "exception_granted",
  "operation_denied"
])

// A record the executor commits before it reaches the callable; a terminal record failing comes after.
const preCall = (error: ExecutionError) => error._tag === "GovernanceEvidenceError" && PRE_CALL.has(error.record_type)

/** A child never allows what its parent denies: a call the parent refuses explicitly never succeeds under the child. */
export const childWithinParent = (parent: Policy): Property => ({
  name: "a child never allows what its parent denies",
  compare: parent,
  holds: (_call, outcome, observed) => {
    const byParent = observed.compared?.outcome
    return byParent === undefined || byParent._tag !== "denied" || !explicitDenials.has(byParent.reason.code) ||
      !succeeded(outcome)
  }
})

/** The laws that hold for every policy, plus `childWithinParent` when a parent is given. */
export const laws = (options: { readonly parent?: Policy } = {}): ReadonlyArray<Property> => [
  denyDominates,
  escalationNeverRuns,
  nothingAfterEvidenceFailure,
  ...(options.parent === undefined ? [] : [childWithinParent(options.parent)])
]
