/** What the policy interceptors read besides the arguments, for stage 10 to compare after a transformation. */
import { Effect, Either, Option } from "effect"
import type * as Approval from "../../approval/Approval.ts"
import { PolicyInputs } from "../../execution/ExecutionOutcome.ts"
import type { Evaluation, Verdict } from "../../execution/Interceptor.ts"
import type { PolicyInput } from "../PolicyEvaluator.ts"
import { budgetsOf, namesOf } from "./budget.ts"
import type { Pinned } from "./reduce.ts"

/**
 * The snapshot a call is decided on (or the code of its refusal), its resolved path, the state of the approval it
 * presents, and whether an expiry or budget rule applies to it (its decision then depends on the clock or the ledger).
 */
export const makeInputs = (
  pinOf: (evaluation: Evaluation) => Effect.Effect<Either.Either<Pinned, Verdict>>,
  inputOf: (evaluation: Evaluation) => Effect.Effect<PolicyInput>,
  queue: Option.Option<Approval.ApprovalQueue.Service>
) => {
  const approvalState = (evaluation: Evaluation): Effect.Effect<string | undefined> => {
    const presented = evaluation.request.approval_id
    if (presented === undefined || Option.isNone(queue)) return Effect.succeed(undefined)
    return Effect.map(
      queue.value.list(),
      (records) => records.find((record) => record.request.approval_id === presented)?.state ?? "unknown"
    )
  }

  /** Only what the snapshot is: the pin interceptor reads nothing else. */
  const snapshotOf = (evaluation: Evaluation): Effect.Effect<PolicyInputs> =>
    Effect.map(pinOf(evaluation), (pinned) =>
      PolicyInputs.make({
        snapshot: Either.isLeft(pinned) ? pinned.left.code : pinned.right.snapshot.digest
      }))

  /** Everything the guards and the action policy read. */
  const inputsOf = (evaluation: Evaluation): Effect.Effect<PolicyInputs> =>
    Effect.flatMap(pinOf(evaluation), (pinned) => {
      if (Either.isLeft(pinned)) return Effect.succeed(PolicyInputs.make({ snapshot: pinned.left.code }))
      const snapshot = pinned.right.snapshot
      const time_or_budget = snapshot.compiled_rules.some((rule) => rule.kind === "expiry") ||
        budgetsOf(snapshot, namesOf(evaluation)).length > 0
      return Effect.zipWith(
        inputOf(evaluation),
        approvalState(evaluation),
        (input, approval_state) =>
          PolicyInputs.make({
            snapshot: snapshot.digest,
            ...(input.resolved_path === undefined ? {} : { resolved_path: input.resolved_path }),
            ...(approval_state === undefined ? {} : { approval_state }),
            time_or_budget
          })
      )
    })

  return { inputsOf, snapshotOf }
}
