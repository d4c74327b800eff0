/**
 * The only module that orders the stages. Each profile's table, read top to bottom, is the seed's D4 list; an
 * action's table is built and compiled once, and its plan is derived from the same entries, so it cannot drift.
 */
import type { Fiber } from "effect"
import { Clock, Context, Effect, Either, Option, Schema } from "effect"
import type { ActionDefinition } from "../../../action/Action.ts"
import type { ActionDescriptor } from "../../../action/ActionDescriptor.ts"
import type { Uuid } from "../../../base/IdGenerator.ts"
import type { ActionRef } from "../../../base/Refs.ts"
import type { AppendReceipt } from "../../../evidence/EvidenceStore.ts"
import { invocationOf } from "../../../policy/InvocationContext.ts"
import type { AttemptStore } from "../../../state/AttemptStore.ts"
import type { RunStore } from "../../../state/RunStore.ts"
import { ActionExecutionPlan, PlannedStage } from "../../ActionExecutionPlan.ts"
import { Cancelled, type ExecutionOutcome } from "../../ExecutionOutcome.ts"
import type { ExecutionRequest } from "../../ExecutionRequest.ts"
import type { Concluded, Moment, Observer } from "../../Interceptor.ts"
import type { RuntimeProfile } from "../../RuntimeProfile.ts"
import { type SecurityStage, type Stage, stages } from "../../Stage.ts"
import { isMinted } from "../mint.ts"
import {
  type Action,
  bindContextWith,
  capacityWith,
  containmentWith,
  deadline,
  type Digested,
  digestWith,
  type Normalised,
  normaliseWith,
  type Noted,
  noteDigestWith,
  probed,
  type Resolved
} from "./admit.ts"
import { boundaryWith, pinWith, stillOpenWith, trackWith } from "./bind.ts"
import { type Bindings, bindingsWith } from "./bindings.ts"
import { Call, denied, outcomeWith } from "./call.ts"
import { declaredFields, originsOf, strictDecoder } from "./definition.ts"
import { bindRunWith, commitWith, openRunWith } from "./durable.ts"
import type { Config, Env, ExecuteOptions, ExecutionError, Governor } from "./env.ts"
import { checkpointWith, operateWith, projectWith } from "./governed.ts"
import { idempotentWith, invokeWith, settle } from "./invoke.ts"
import { preflightWith } from "./preflight.ts"
import { bounded, noRecheck, recheckWith, revalidateWith, securityWith, transformWith } from "./secure.ts"
import { compile, type DecideStep, type Entry, flatten, type Steps, steps, type Table } from "./table.ts"

/** The profile an executor was built for, with the stores its stages use: chosen once, never per call. */
export type Profile =
  | { readonly _tag: "minimal" }
  | { readonly _tag: "durable"; readonly runs: RunStore.Service; readonly attempts: AttemptStore.Service }
  | {
    readonly _tag: "governed"
    readonly profile: "governed" | "certifiable"
    readonly governor: Governor
    readonly runs: RunStore.Service | undefined
    readonly attempts: AttemptStore.Service | undefined
    readonly bindings: Bindings
  }

/** The profile an executor's configuration selects. */
export const profileOf = ({ attempts, governance, runs }: Config): Profile =>
  governance !== undefined
    ? {
      _tag: "governed",
      profile: governance.profile,
      governor: governance,
      runs,
      attempts,
      bindings: bindingsWith(governance)
    }
    : runs !== undefined && attempts !== undefined
    ? { _tag: "durable", runs, attempts }
    : { _tag: "minimal" }

/** The runtime profile a Profile stands behind. */
export const runtimeProfile = (profile: Profile): RuntimeProfile =>
  profile._tag === "governed" ? profile.profile : profile._tag

/** An action compiled once per executor: its codecs, its table compiled to one function, and the plan of that table. */
export interface Compiled {
  readonly action: Action
  readonly plan: ActionExecutionPlan
  readonly run: (state: Resolved) => Effect.Effect<ExecutionOutcome, ExecutionError>
}

const securityStages: ReadonlyArray<SecurityStage> = ["authorise", "guard", "policy"]

// The span of every execute captures no stack trace, as Effect's own per-request spans (HTTP client, SQL, RPC) do:
// Effect would take one on every call to keep the one frame that called withSpan, this line, the same every time
// and named by the span already; taking it cost about 5 µs of a minimal execute's 25-30.
const executeSpan = { captureStackTrace: false } as const

/** Stages 5-11 under the request's deadline and cancellation. */
const secured = <C extends Digested>(
  table: Steps<C>,
  env: Env,
  action: Action,
  governed: boolean,
  checkpoint?: DecideStep<C, void>
) =>
  table.within(bounded, (stages) => {
    let secure: Steps<C> = stages
    for (const stage of securityStages) {
      const here = action.interceptors.filter((interceptor) => interceptor.stage === stage)
      secure = secure.when(here.length > 0, () =>
        securityWith(stage, here, governed ? env.ids : undefined, env.transformers.length > 0))
    }
    const checked = env.transformers.length === 0
      ? secure.sync(noRecheck)
      : secure.effect(transformWith(env)).effect(revalidateWith(digestWith(env))).effect(
        recheckWith(action.interceptors, governed ? env.ids : undefined)
      )
    return checkpoint === undefined ? checked : checked.step(checkpoint)
  })

/** Stages 12-13: the one invocation, behind the caller's idempotency key where a store keeps them. */
const invocation = <C extends Normalised>(table: Steps<C>, env: Env, stages: boolean) =>
  Option.match(env.idempotency, {
    onNone: () => table.effect(invokeWith(env, stages)).conclude(settle),
    onSome: (store) =>
      table.around(idempotentWith(env, store), (invoke) => invoke.effect(invokeWith(env, stages)).conclude(settle))
  })

/** Whether an action's calls are evaluated, and so bound to their arguments' digest. */
const evaluated = (env: Env, action: Action, governed: boolean) =>
  governed || action.interceptors.length > 0 || env.transformers.length > 0

/** The minimal profile: nothing kept, no evidence. */
const minimalTable = (env: Env, action: Action): Table => {
  const admit = <C extends Normalised>(table: Steps<C>) =>
    table
      .sync(bindContextWith(env, false, false))
      .when(probed(env, action), () => containmentWith(env))
      .effect(deadline)
  const capacity = env.capacities.length > 0
  return evaluated(env, action, false)
    ? admit(steps<Resolved>().sync(normaliseWith(env)).step(digestWith(env)))
      .aroundIf(
        capacity,
        () => capacityWith(env),
        (leased) => invocation(secured(leased, env, action, false), env, false)
      )
    : admit(steps<Resolved>().sync(normaliseWith(env)))
      .aroundIf(capacity, () => capacityWith(env), (leased) => invocation(leased, env, false))
}

/** The durable profile: every attempt in a Run committed with its outcome and outbox intents. */
const durableTable = (env: Env, action: Action, { attempts, runs }: Extract<Profile, { _tag: "durable" }>): Table => {
  const admit = <C extends Noted>(table: Steps<C>, invoke: (leased: Steps<C>) => Table) =>
    table
      .sync(bindContextWith(env, true, true))
      .effect(bindRunWith(runs, attempts, env.running))
      .around(commitWith(env, attempts), (committed) =>
        committed
          .when(probed(env, action), () => containmentWith(env))
          .effect(deadline)
          .aroundIf(env.capacities.length > 0, () => capacityWith(env), invoke))
  return evaluated(env, action, false)
    ? admit(
      steps<Resolved>().sync(normaliseWith(env)).step(digestWith(env)),
      (leased) => invocation(secured(leased, env, action, false).effect(openRunWith(runs)), env, true)
    )
    : admit(
      steps<Resolved>().sync(normaliseWith(env)).effect(noteDigestWith(env)),
      (leased) => invocation(leased.effect(openRunWith(runs)), env, true)
    )
}

/** The governed profiles: evidence as control flow, one operation per admitted call. */
const governedTable = (
  env: Env,
  action: Action,
  profile: Extract<Profile, { readonly _tag: "governed" }>
): Table => {
  const { attempts, bindings, governor, runs } = profile
  const project = governor.project
  return steps<Resolved>()
    .sync(normaliseWith(env))
    .step(digestWith(env))
    .sync(bindContextWith(env, runs !== undefined, false))
    .whenSome(runs, (store) => bindRunWith(store, attempts, env.running))
    .sync(boundaryWith(governor.writer))
    .around(trackWith(governor.writer), (tracked) =>
      tracked
        .effect(pinWith(env, governor, bindings))
        .effect(deadline)
        .aroundIf(env.capacities.length > 0, () =>
          capacityWith(env), (leased) =>
          leased.sync(stillOpenWith(governor.writer)).step(preflightWith(env)).around(
            operateWith(env, governor.writer),
            (operation) =>
              invocation(
                secured(operation, env, action, true, checkpointWith(env, governor.writer)),
                env,
                false
              )
          )))
    .afterSome(project, projectWith)
}

const resolveDetail = "refuse a context no ingress minted, resolve the reference to a digest-pinned descriptor"

const skipped: Record<Profile["_tag"], Partial<Record<Stage, string>>> = {
  minimal: {
    governed_start: "minimal profile: no governed operation, policy pin or evidence",
    evidence_checkpoint: "minimal profile: no pre-call evidence to commit",
    persist: "minimal profile: no Run, state store or outbox projection"
  },
  durable: {
    governed_start: "durable profile: no governed operation, policy pin or evidence",
    evidence_checkpoint: "durable profile: no pre-call evidence to commit"
  },
  governed: {
    persist: "governed: no Run repository or projection source, so durable state is left to the EvidenceProjector"
  }
}

const skippedDetail: Partial<Record<Stage, string>> = {
  authorise: "no authorization interceptors",
  guard: "no guard interceptors",
  policy: "no policy interceptors",
  transform: "no transformers",
  revalidate: "no transformation to revalidate",
  recheck: "no evaluators, so nothing to recheck"
}

/** The plan of an action's table: every stage, run when the table enters it, with what it does there. */
const planOf = (
  env: Env,
  profile: Profile,
  action: Action,
  entries: ReadonlyArray<Entry>
): ActionExecutionPlan => {
  const entered = [{ stage: "resolve" as Stage, detail: resolveDetail }, ...flatten(entries)]
  for (let i = 1; i < entered.length; i++) {
    if (stages.indexOf(entered[i]!.stage) < stages.indexOf(entered[i - 1]!.stage)) {
      throw new Error(`stage table out of order: ${entered[i]!.stage} after ${entered[i - 1]!.stage}`)
    }
  }
  const evaluatorsOf = (stage: Stage): ReadonlyArray<string> => {
    switch (stage) {
      case "authorise":
      case "guard":
      case "policy":
        return action.interceptors.filter((interceptor) => interceptor.stage === stage).map((i) => i.id)
      case "transform":
        return env.transformers.map((transformer) => transformer.id)
      case "recheck":
        return env.transformers.length === 0 ? [] : action.interceptors.map((interceptor) => interceptor.id)
      default:
        return []
    }
  }
  return ActionExecutionPlan.make({
    action: action.descriptor,
    profile: runtimeProfile(profile),
    backend: env.backend.ref,
    stages: stages.map((stage) => {
      const details = [...new Set(entered.filter((entry) => entry.stage === stage).map((entry) => entry.detail))]
      return PlannedStage.make({
        stage,
        mode: details.length > 0 ? "run" : "skip",
        detail: details.length > 0
          ? details.join("; ")
          : skipped[profile._tag][stage] ?? skippedDetail[stage] ?? "not run in this profile",
        evaluators: evaluatorsOf(stage)
      })
    })
  })
}

/** Build and compile one action's table under a profile. */
const compileAction = (
  env: Env,
  profile: Profile,
  definition: ActionDefinition,
  descriptor: ActionDescriptor
): Compiled => {
  const action: Action = {
    definition,
    descriptor,
    interceptors: definition.origins === undefined
      ? env.interceptors
      : [originsOf(env, definition), ...env.interceptors],
    decode: strictDecoder(definition.input),
    encode: Schema.encodeUnknownEither(definition.input),
    encodeOutput: Schema.encodeUnknownEither(definition.output),
    fields: declaredFields(definition.input)
  }
  const table = profile._tag === "governed"
    ? governedTable(env, action, profile)
    : profile._tag === "durable"
    ? durableTable(env, action, profile)
    : minimalTable(env, action)
  return Object.freeze({ action, plan: planOf(env, profile, action, table.entries), run: compile(table.entries) })
}

/** What a call's synchronous decisions read of the fiber executing it: its Clock, and the host's invocation context. */
const momentOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Moment => {
  const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
  return { micros: () => Number(clock.unsafeCurrentTimeNanos() / 1000n), invocation: invocationOf(fiber) }
}

/** An executor's `execute` and `plan` over its environment and profile. */
export const makeRunner = (env: Env, profile: Profile) => {
  const compiled = new WeakMap<ActionDefinition, Compiled>()
  const compiledFor = (definition: ActionDefinition, descriptor: ActionDescriptor): Compiled => {
    const made = compiled.get(definition) ?? compileAction(env, profile, definition, descriptor)
    compiled.set(definition, made)
    return made
  }

  /** Stage 1 (a context the ingress minted, the action resolved), then the action's compiled table. */
  const run = (call: Call): Effect.Effect<ExecutionOutcome, ExecutionError> => {
    call.enter("resolve")
    if (!isMinted(call.context)) return Effect.succeed(denied(call, "context.untrusted", "no ingress minted it"))
    const resolved = env.registry.resolve(call.request.action)
    if (Either.isLeft(resolved)) return Effect.succeed(denied(call, "action.not_found", resolved.left.message))
    const { definition, descriptor } = resolved.right
    const action = compiledFor(definition, descriptor)
    call.action = { name: definition.name, version: definition.version }
    return action.run({ call, action: action.action })
  }

  const notify = (outcome: ExecutionOutcome, receipt: AppendReceipt | undefined) => {
    const event: Concluded = {
      _tag: "concluded",
      outcome,
      ...(receipt === undefined
        ? {}
        : { evidence: { chain_id: receipt.chain_id, record_id: receipt.record_id, head_hash: receipt.head_hash } })
    }
    // Suspended: an observer that throws while building its effect changes nothing either.
    const tell = (observer: Observer) => Effect.exit(Effect.suspend(() => observer.observe(event)))
    return Effect.forEach(env.observers, tell, { discard: true })
  }

  const observed = (call: Call, outcome: Effect.Effect<ExecutionOutcome, ExecutionError>) =>
    outcome.pipe(
      Effect.tap((outcome) => notify(outcome, call.receipt)),
      // Told in the background: the interrupted caller waits for no observer. A call whose conclusion is committed
      // (a governed operation, or one bound to a durable Run) is told only the outcome that was.
      Effect.onInterrupt(() => {
        const told = call.committed ?? (call.operated || call.run_id !== undefined
          ? undefined
          : outcomeWith(Cancelled, call, { call_executed: call.invoked }))
        return told === undefined ? Effect.void : Effect.asVoid(Effect.forkDaemon(notify(told, call.receipt)))
      })
    )

  // A call bound to a Run is running in it until it concludes, however it concludes.
  const inRuns = profile._tag === "durable" || (profile._tag === "governed" && profile.runs !== undefined)
  const execute = (request: ExecutionRequest, options: ExecuteOptions) =>
    Effect.withSpan(
      Effect.withFiberRuntime<ExecutionOutcome, ExecutionError>((fiber) => {
        const moment = momentOf(fiber)
        const start = (attempt_id: Uuid) => {
          const call = new Call(
            request,
            options.context,
            attempt_id,
            env.profile,
            options.cancel,
            options.boundary,
            options.newRun,
            moment,
            env.trace
          )
          const outcome = env.observers.length === 0 ? run(call) : observed(call, run(call))
          return inRuns ? Effect.ensuring(outcome, Effect.sync(() => env.running.delete(attempt_id))) : outcome
        }
        return env.ids.uuidSync === undefined ? Effect.flatMap(env.ids.uuid, start) : start(env.ids.uuidSync())
      }),
      "ActionExecutor.execute",
      executeSpan
    )

  const plan = (ref: ActionRef) =>
    Effect.map(env.registry.resolve(ref), (resolved) => compiledFor(resolved.definition, resolved.descriptor).plan)

  return { execute, plan }
}
