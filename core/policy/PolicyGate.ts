/**
 * The policy as executor interceptors: pin the exact snapshot the context names (stage 5), run
 * each gate's intrinsic guards (stage 6) and action policy with budgets (stage 7), and reduce
 * hard, soft and advisory gate results the seed's way. A budget counts per snapshot, rule,
 * principal and window: calls are charged at stage 7; wall time, tokens and cost are charged
 * after the call (see ActionUsage), to the window in which it concluded, so stage 7 denies once
 * the window's consumed amount has reached the limit and a call in flight may overrun it once.
 */
import { Effect, Either, Option } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import type { Usage } from "../action/ActionUsage.ts"
import * as Approval from "../approval/Approval.ts"
import { Digest } from "../base/Digest.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import type { Evaluation } from "../execution/Interceptor.ts"
import * as Interceptor from "../execution/Interceptor.ts"
import { BudgetLedger, makeMemory } from "./BudgetLedger.ts"
import { makeBudgets, namesOf } from "./internal/budget.ts"
import { makeEscalation } from "./internal/escalation.ts"
import type { Pin } from "./internal/pin.ts"
import { makePinWith } from "./internal/pin.ts"
import type { Pinned, Reduced } from "./internal/reduce.ts"
import { reduce } from "./internal/reduce.ts"
import type { AgentSubject } from "./InvocationContext.ts"
import { currentInvocation } from "./InvocationContext.ts"
import type { Part, PolicyInput } from "./PolicyEvaluator.ts"
import { normalise, PathResolver } from "./PolicyPath.ts"
import { PolicySnapshotStore } from "./PolicySnapshotStore.ts"

export type { Pin } from "./internal/pin.ts"
export type { Pinned, Reduced } from "./internal/reduce.ts"
export {
  /** Stage by stage: the guards, then the action policy; the first refusal stands. */
  explain,
  /** Compile a snapshot for evaluation. */
  pinned,
  /** Reduce gate results in gate order: hard deny denies; soft deny escalates when an approver is named; advisory deny is recorded. */
  reduce
} from "./internal/reduce.ts"

/** How the gate is bound to its host. */
export interface Options {
  /** The real executing agent this executor acts as; origin rules require the invocation's agent to be it. */
  readonly boundAgent?: AgentSubject
}

/** The MCP tool, secrets and environment variables an action declares: what its guards check. */
const declaredNeeds = ({ environment, mcp, secrets }: ActionDescriptor) => ({
  ...(mcp === undefined ? {} : { mcp }),
  ...(secrets === undefined ? {} : { secrets }),
  ...(environment === undefined ? {} : { environment })
})

/** What the evaluator sees of a call: its action, arguments, principal and origin, the time, and the resolved path. */
const inputWith = (options: Options, paths: Option.Option<PathResolver.Service>) => (evaluation: Evaluation) =>
  Effect.gen(function*() {
    const invocation = yield* currentInvocation
    const path = typeof evaluation.arguments.path === "string" ? normalise(evaluation.arguments.path) : undefined
    const resolved_path = path === undefined || Option.isNone(paths) ? undefined : yield* paths.value.resolve(path)
    const input: PolicyInput = {
      action: evaluation.descriptor.name,
      aliases: evaluation.descriptor.aliases,
      effects: evaluation.descriptor.effects,
      arguments: evaluation.arguments,
      principal: evaluation.context.authenticated_principal.id,
      now: yield* Time.nowMicros,
      ...(evaluation.context.tenant === undefined ? {} : { tenant: evaluation.context.tenant.id }),
      ...(invocation._tag === "None" ? {} : { invocation: invocation.value }),
      ...(resolved_path === undefined ? {} : { resolved_path }),
      ...(options.boundAgent === undefined ? {} : { bound_agent: options.boundAgent }),
      ...declaredNeeds(evaluation.descriptor)
    }
    return input
  })

/** Read the exact snapshot a context names from the store in context, check it is active and recomputes to its digest, and compile it once. */
export const makePin: Effect.Effect<Pin, never, PolicySnapshotStore | Digest> = Effect.gen(function*() {
  return makePinWith(yield* PolicySnapshotStore, yield* Digest)
})

/** The policy interceptors, reading snapshots from the PolicySnapshotStore and charging budgets to the BudgetLedger in context (a fresh in-memory one when none is). */
export const make = (options: Options = {}, pin?: Pin) =>
  Effect.gen(function*() {
    const digest = yield* Digest
    const ids = yield* IdGenerator
    const pinContext = pin ?? (yield* makePin)
    const queue = yield* Effect.serviceOption(Approval.ApprovalQueue)
    const paths = yield* Effect.serviceOption(PathResolver)
    const ledger = Option.getOrUndefined(yield* Effect.serviceOption(BudgetLedger)) ?? (yield* makeMemory)
    const budgets = makeBudgets(ledger)
    const escalate = makeEscalation(queue, digest, ids)

    const inputOf = inputWith(options, paths)

    const chargeOf = (pinned: Pinned, evaluation: Evaluation, now: number) => ({
      snapshot: pinned.snapshot,
      names: namesOf(evaluation),
      principal: evaluation.context.authenticated_principal.id,
      now
    })

    /** After the call: charge what it consumed to each matching wall-time, token and cost budget. */
    const chargeUsage = (evaluation: Evaluation, usage: Usage) =>
      Effect.gen(function*() {
        const pinned = yield* pinContext(evaluation.context, evaluation.attempt_id)
        if (Either.isLeft(pinned)) return
        yield* budgets.consume(chargeOf(pinned.right, evaluation, yield* Time.nowMicros), usage)
      })

    const charged = (pinned: Pinned, input: PolicyInput, evaluation: Evaluation, allowed: Interceptor.Allowed) =>
      budgets.admit(chargeOf(pinned, evaluation, input.now), evaluation.attempt_id, allowed)

    const run = (part: Part) => (evaluation: Evaluation) =>
      Effect.gen(function*() {
        const pinned = yield* pinContext(evaluation.context, evaluation.attempt_id)
        if (Either.isLeft(pinned)) {
          return pinned.left
        }
        const input = yield* inputOf(evaluation)
        const result = reduce(pinned.right, part, input)
        // A gate's result is recorded once: at the policy stage, unless its guard part already refused. A soft guard
        // deny escalates here, and an approval presented for it lets the call go on.
        if (part === "guard") {
          const guarded = result.disposition === "escalate"
            ? yield* escalate(pinned.right, evaluation, input, result)
            : result
          return guarded.disposition === "allow"
            ? {
              ...guarded,
              gates: (guarded.gates ?? []).filter((gate) => gate.decision === "deny")
            }
            : guarded
        }
        // A gate whose guard part denied was recorded at the guard stage: its policy part adds no second result (only
        // an advisory gate's guard deny, or a soft one an approval resolved, lets the call get here).
        const guarded = pinned.right.guardsPass ? reduce(pinned.right, "guard", input).gates ?? [] : []
        if (guarded.some((gate) => gate.decision === "deny")) {
          const recorded = new Set(guarded.flatMap((gate) => gate.decision === "deny" ? [gate.gate_id] : []))
          return yield* settled(pinned.right, input, evaluation, {
            ...result,
            gates: (result.gates ?? []).filter((gate) => !recorded.has(gate.gate_id))
          })
        }
        return yield* settled(pinned.right, input, evaluation, result)
      })

    const settled = (pinned: Pinned, input: PolicyInput, evaluation: Evaluation, result: Reduced) =>
      Effect.gen(function*() {
        if (result.disposition === "deny") return result
        if (result.disposition === "escalate") {
          const escalated = yield* escalate(pinned, evaluation, input, result)
          return escalated.disposition === "allow" ? yield* charged(pinned, input, evaluation, escalated) : escalated
        }
        return yield* charged(pinned, input, evaluation, result)
      })

    const interceptors: ReadonlyArray<Interceptor.Interceptor> = [
      {
        id: "policy.pin",
        stage: "authorise",
        evaluate: (evaluation) =>
          Effect.map(
            pinContext(evaluation.context, evaluation.attempt_id),
            Either.match({
              onLeft: (refused) => refused,
              onRight: ({ snapshot }) => ({
                ...Interceptor.allow("policy.pinned", `${snapshot.policy_id}@${snapshot.version}`),
                gates: []
              })
            })
          )
      },
      { id: "policy.guards", stage: "guard", evaluate: run("guard") },
      { id: "policy.rules", stage: "policy", evaluate: run("policy"), charge: chargeUsage }
    ]
    return interceptors
  })
