/**
 * The policy as executor interceptors: pin the exact snapshot the context names (stage 5), run
 * each gate's intrinsic guards (stage 6) and action policy (stage 7), and reduce hard, soft and
 * advisory gate results the seed's way; and its quota as a stage-3 capacity. A budget counts per
 * snapshot, rule, principal and window: a windowed one is quota, so a spent window defers the call
 * at stage 3 until the window ends (never a gate result, never an opened operation); one without a
 * window is a lifetime limit, and stage 7 denies once it is spent. Calls are charged on admission;
 * wall time, tokens and cost after the call (see ActionUsage), to the window in which it concluded,
 * so a call in flight may overrun a budget once. A failure inside the gate's own evaluation is an
 * evaluator error its gates' `on_error` maps (deny, or escalate to the approver).
 */
import { Effect, Either, Option } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import * as Approval from "../approval/Approval.ts"
import { Digest } from "../base/Digest.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import type { Admission, Capacity, Lease } from "../execution/Capacity.ts"
import type { Evaluation, Verdict } from "../execution/Interceptor.ts"
import * as Interceptor from "../execution/Interceptor.ts"
import { BudgetLedger, makeMemory } from "./BudgetLedger.ts"
import { hasWindowedBudget, makeBudgets } from "./internal/budget.ts"
import { makeDecisions } from "./internal/decide.ts"
import { makeEscalation } from "./internal/escalation.ts"
import { makeOnError } from "./internal/failure.ts"
import { makeInputs } from "./internal/inputs.ts"
import type { Pin } from "./internal/pin.ts"
import { makePinWith } from "./internal/pin.ts"
import type { AgentSubject, InvocationContext } from "./InvocationContext.ts"
import { currentInvocation } from "./InvocationContext.ts"
import type { Part, PolicyInput } from "./PolicyEvaluator.ts"
import { normalise, PathResolver } from "./PolicyPath.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"
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
  /**
   * A pin shared by executors over one PolicySnapshotStore (`makePin` over it), so a snapshot is verified and compiled once
   * per digest for all of them; by default each gate makes its own over the store in context.
   */
  readonly pin?: Pin
}

/** The MCP tool, secrets and environment variables an action declares: what its guards check. */
const declaredNeeds = ({ environment, mcp, secrets }: ActionDescriptor) => ({
  ...(mcp === undefined ? {} : { mcp }),
  ...(secrets === undefined ? {} : { secrets }),
  ...(environment === undefined ? {} : { environment })
})

/** What the evaluator sees of a call: its action, arguments, principal and origin, the time, and the resolved path. */
const inputFrom = (
  options: Options,
  evaluation: Evaluation,
  now: number,
  invocation: Option.Option<InvocationContext>,
  resolved_path: string | undefined
): PolicyInput => ({
  action: evaluation.descriptor.name,
  aliases: evaluation.descriptor.aliases,
  effects: evaluation.descriptor.effects,
  arguments: evaluation.arguments,
  principal: evaluation.context.authenticated_principal.id,
  now,
  ...(evaluation.context.tenant === undefined ? {} : { tenant: evaluation.context.tenant.id }),
  ...(invocation._tag === "None" ? {} : { invocation: invocation.value }),
  ...(resolved_path === undefined ? {} : { resolved_path }),
  ...(options.boundAgent === undefined ? {} : { bound_agent: options.boundAgent }),
  ...declaredNeeds(evaluation.descriptor)
})

const pathOf = (evaluation: Evaluation) =>
  typeof evaluation.arguments.path === "string" ? normalise(evaluation.arguments.path) : undefined

/** The evaluator's input, its `path` argument resolved by the PathResolver in context when there is one. */
const inputWith = (options: Options, paths: Option.Option<PathResolver.Service>) => {
  const inputOf = (evaluation: Evaluation, resolved_path: string | undefined) =>
    Effect.zipWith(
      Time.nowMicros,
      currentInvocation,
      (now, invocation) => inputFrom(options, evaluation, now, invocation, resolved_path)
    )
  return (evaluation: Evaluation): Effect.Effect<PolicyInput> => {
    const path = pathOf(evaluation)
    return path === undefined || Option.isNone(paths)
      ? inputOf(evaluation, undefined)
      : Effect.flatMap(paths.value.resolve(path), (resolved) => inputOf(evaluation, resolved))
  }
}

/** The evaluator's input synchronously; undefined when a path must be resolved first (the resolver does I/O). */
const inputNowWith =
  (options: Options, paths: Option.Option<PathResolver.Service>) =>
  (evaluation: Evaluation, moment: Interceptor.Moment): PolicyInput | undefined =>
    Option.isSome(paths) && pathOf(evaluation) !== undefined
      ? undefined
      : inputFrom(options, evaluation, moment.micros(), moment.invocation, undefined)

/** Read the exact snapshot a context names from the store in context, check it is active and recomputes to its digest, and compile it once. */
export const makePin: Effect.Effect<Pin, never, PolicySnapshotStore | Digest> = Effect.gen(function*() {
  return makePinWith(yield* PolicySnapshotStore, yield* Digest)
})

/** A policy gate as an executor takes it: its quota at stage 3, its interceptors at stages 5-7. */
export interface Gate {
  readonly capacity: Capacity
  readonly interceptors: ReadonlyArray<Interceptor.Interceptor>
}

const unleased: Lease = { release: Effect.void }

const pinnedVerdict = (snapshot: PolicySnapshot): Verdict => ({
  ...Interceptor.allow("policy.pinned", `${snapshot.policy_id}@${snapshot.version}`),
  gates: []
})

/**
 * Stage 3: the quota of the snapshot pinned there (governed), else of the one the context names; one that does not
 * pin is left to stage 5 to deny. A call under a snapshot without a windowed budget has no quota to check.
 */
const quotaOf = (pins: Pin, budgets: ReturnType<typeof makeBudgets>): Capacity => {
  const windowedByDigest = new Map<string, boolean>()
  const windowed = (snapshot: PolicySnapshot) => {
    let answer = windowedByDigest.get(snapshot.digest)
    if (answer === undefined) {
      answer = hasWindowedBudget(snapshot)
      windowedByDigest.set(snapshot.digest, answer)
    }
    return answer
  }
  return {
    id: "policy.quota",
    applies: (admission) => admission.snapshot === undefined || windowed(admission.snapshot),
    admit: Effect.fnUntraced(function*(admission: Admission) {
      const pinned = yield* (admission.snapshot === undefined
        ? pins.read(admission.context)
        : pins.compiled(admission.snapshot))
      if (Either.isLeft(pinned)) return Either.right(unleased)
      const quota = yield* budgets.quota({
        snapshot: pinned.right.snapshot,
        names: [admission.descriptor.name, ...admission.descriptor.aliases],
        principal: admission.context.authenticated_principal.id,
        now: yield* Time.nowMicros
      }, admission.attempt_id)
      return Either.map(quota, (admissions) => admissions === undefined ? unleased : { ...unleased, admissions })
    })
  }
}

/**
 * The policy gate, reading snapshots from the PolicySnapshotStore and charging budgets to the BudgetLedger in context
 * (a fresh in-memory one when none is). `joint`: the executor's evidence commits take the ledger's admissions, so a
 * calls budget's place is read here and taken by the commit of the call's next records (Governed decides it).
 */
export const make = (options: Options = {}, pin?: Pin, joint = false) =>
  Effect.gen(function*() {
    const digest = yield* Digest
    const ids = yield* IdGenerator
    const pins = pin ?? options.pin ?? (yield* makePin)
    // A call the executor pinned at stage 3 is decided on that snapshot; any other reads the one its context names.
    const pinOf = (evaluation: Evaluation) =>
      evaluation.snapshot === undefined ? pins.read(evaluation.context) : pins.compiled(evaluation.snapshot)
    const queue = yield* Effect.serviceOption(Approval.ApprovalQueue)
    const paths = yield* Effect.serviceOption(PathResolver)
    const ledger = Option.getOrUndefined(yield* Effect.serviceOption(BudgetLedger)) ?? (yield* makeMemory)
    const budgets = makeBudgets(ledger, joint)
    const escalate = makeEscalation(queue, digest, ids)

    const inputOf = inputWith(options, paths)
    const { chargeUsage, guard, guardNow, policy, policyNow } = makeDecisions(budgets, escalate, pinOf)
    const { inputsOf, snapshotOf } = makeInputs(pinOf, inputOf, queue)
    // After a failure the call's input is taken without the resolved path: what an escalation binds to needs none.
    const onError = makeOnError(budgets, escalate, inputWith(options, Option.none()))

    const run = (part: Part) => (evaluation: Evaluation): Effect.Effect<Verdict> =>
      Effect.flatMap(pinOf(evaluation), (pinned) =>
        Either.isLeft(pinned)
          ? Effect.succeed(pinned.left)
          : onError(
            part,
            pinned.right,
            evaluation,
            Effect.flatMap(
              Effect.suspend(() => inputOf(evaluation)),
              (input) => (part === "guard" ? guard : policy)(pinned.right, evaluation, input)
            )
          ))

    // A call pinned at stage 3 whose snapshot is compiled is decided synchronously, unless a path must be resolved,
    // an approval queue asked or a budget charged; anything thrown leaves the decision to `evaluate`, whose failures
    // the gates' `on_error` map.
    const inputNow = inputNowWith(options, paths)
    const decideNow = (part: Part) => (evaluation: Evaluation, moment: Interceptor.Moment): Verdict | undefined => {
      try {
        const pinned = evaluation.snapshot === undefined ? undefined : pins.cached(evaluation.snapshot)
        const input = pinned === undefined ? undefined : inputNow(evaluation, moment)
        if (pinned === undefined || input === undefined) return undefined
        return part === "guard" ? guardNow(pinned, input) : policyNow(pinned, evaluation, input)
      } catch {
        return undefined
      }
    }

    const interceptors: ReadonlyArray<Interceptor.Interceptor> = [
      {
        id: "policy.pin",
        stage: "authorise",
        evaluate: (evaluation) =>
          Effect.map(
            pinOf(evaluation),
            Either.match({
              onLeft: (refused) => refused,
              onRight: ({ snapshot }) => pinnedVerdict(snapshot)
            })
          ),
        decide: (evaluation) => {
          const pinned = evaluation.snapshot === undefined ? undefined : pins.cached(evaluation.snapshot)
          return pinned === undefined ? undefined : pinnedVerdict(pinned.snapshot)
        },
        inputs: snapshotOf
      },
      { id: "policy.guards", stage: "guard", evaluate: run("guard"), decide: decideNow("guard"), inputs: inputsOf },
      {
        id: "policy.rules",
        stage: "policy",
        evaluate: run("policy"),
        decide: decideNow("policy"),
        charge: chargeUsage,
        inputs: inputsOf
      }
    ]

    return { capacity: quotaOf(pins, budgets), interceptors } satisfies Gate
  })
