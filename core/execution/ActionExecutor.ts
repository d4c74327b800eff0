/**
 * The ActionExecutor: the only route to an action's callable. Each execution runs its profile's stage table, the
 * seed's fourteen stages in order, and concludes in exactly one typed outcome.
 */
import { Context, Duration, Effect, Layer, Option } from "effect"
import { ActionExecutionBackend } from "../action/ActionExecutionBackend.ts"
import { ActionRegistry } from "../action/ActionRegistry.ts"
import type { ActionNotFoundError } from "../action/ActionRegistry.ts"
import { Digest } from "../base/Digest.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import type { ActionRef } from "../base/Refs.ts"
import * as StrictJson from "../base/StrictJson.ts"
import { ExecutorRegistry } from "../evidence/ExecutorRegistry.ts"
import * as PolicyGate from "../policy/PolicyGate.ts"
import { AttemptStore } from "../state/AttemptStore.ts"
import { RunStore } from "../state/RunStore.ts"
import type { ActionExecutionPlan } from "./ActionExecutionPlan.ts"
import type { ExecutionOutcome } from "./ExecutionOutcome.ts"
import type { ExecutionRequest } from "./ExecutionRequest.ts"
import { IdempotencyStore } from "./IdempotencyStore.ts"
import { type Config, type ExecuteOptions, type ExecutionError, StageTrace } from "./internal/executor/env.ts"
import { makeRunner, profileOf, runtimeProfile } from "./internal/executor/run.ts"
import { ProfileUnavailableError, type RuntimeProfile } from "./RuntimeProfile.ts"
import type { SecurityStage } from "./Stage.ts"

/** One execution's options: the trusted context, a Deferred whose completion cancels it, and for governed profiles the task boundary. */
export type { ExecuteOptions } from "./internal/executor/env.ts"

/** An evidence failure of a governed execution: an error, never an outcome. */
export type { ExecutionError } from "./internal/executor/env.ts"

/** What an executor is built with: capacities, interceptors, transformers, observers, teardown, governance, agent, Runs and attempts. */
export type { Config } from "./internal/executor/env.ts"

/** What a governed executor adds: the profile it claims, the snapshot pin, and the evidence writer. */
export type { Governor } from "./internal/executor/env.ts"

/** The durable profile could not commit an attempt. */
export { PersistError } from "./internal/executor/env.ts"

/** Executes actions; the only route to their callables. */
export class ActionExecutor extends Context.Tag("writ/ActionExecutor")<ActionExecutor, ActionExecutor.Service>() {}

/** The ActionExecutor service. */
export declare namespace ActionExecutor {
  /** Execute a request, or show the plan an action would run. */
  export interface Service {
    readonly profile: RuntimeProfile
    readonly execute: (
      request: ExecutionRequest,
      options: ExecuteOptions
    ) => Effect.Effect<ExecutionOutcome, ExecutionError>
    readonly plan: (ref: ActionRef) => Effect.Effect<ActionExecutionPlan, ActionNotFoundError>
  }
}

const securityOrder: ReadonlyArray<SecurityStage> = ["authorise", "guard", "policy"]

/** Build an executor over the registry, backend, digest and id generator in context; its profile is chosen here, once. */
export const make = (config: Config = {}) =>
  Effect.gen(function*() {
    const profile = profileOf(config)
    const env = {
      profile: runtimeProfile(profile),
      registry: yield* ActionRegistry,
      backend: yield* ActionExecutionBackend,
      digest: yield* Digest,
      ids: yield* IdGenerator,
      idempotency: yield* Effect.serviceOption(IdempotencyStore),
      interceptors: [...(config.interceptors ?? [])].sort(
        (a, b) => securityOrder.indexOf(a.stage) - securityOrder.indexOf(b.stage)
      ),
      transformers: [...(config.transformers ?? [])],
      capacities: [...(config.capacity ?? [])],
      observers: [...(config.observers ?? [])],
      teardown: Duration.decode(config.teardown ?? Duration.seconds(1)),
      argumentLimits: { ...StrictJson.defaultLimits, ...config.argumentLimits },
      boundAgent: config.boundAgent,
      containment: config.containment,
      trace: Option.getOrUndefined(yield* Effect.serviceOption(StageTrace)),
      identities: new Map(
        [...(config.governance?.identities?.entries() ?? [])].flatMap(([interceptor, identity]) =>
          identity === "snapshot" ? [] : [[interceptor.id, identity] as const]
        )
      ),
      running: new Map()
    }
    const { execute, plan } = makeRunner(env, profile)
    return ActionExecutor.of({ profile: env.profile, execute, plan })
  })

/** The minimal-profile executor: no Run, no durable evidence, no certificate claim, and it says so. */
export const layerMinimal = (config: Config = {}) => Layer.effect(ActionExecutor, make(config))

/**
 * The durable-ungoverned executor over the RunStore and AttemptStore in context: every attempt inside a running Run is committed.
 * With an ExecutorRegistry in context it is registered there while the layer lives, so recovery never takes a Run it
 * is running for one a crash left running.
 */
export const layerDurable = (config: Omit<Config, "runs" | "attempts" | "governance"> = {}) =>
  Layer.scoped(
    ActionExecutor,
    Effect.gen(function*() {
      const runs = yield* RunStore
      if (!runs.durable) {
        return yield* new ProfileUnavailableError({ profile: "durable", detail: "the state store is not durable" })
      }
      const registry = yield* Effect.serviceOption(ExecutorRegistry)
      if (Option.isSome(registry)) yield* registry.value.register
      return yield* make({ ...config, runs, attempts: yield* AttemptStore })
    })
  )

/** A minimal-profile executor whose stages 5-7 enforce the policy pinned by each call's context, and stage 3 its quota (PolicyGate). */
export const makePolicyGated = (config: Config = {}, options: PolicyGate.Options = {}) =>
  Effect.flatMap(PolicyGate.make(options), (gate) =>
    make({
      ...config,
      ...(options.boundAgent === undefined ? {} : { boundAgent: options.boundAgent }),
      capacity: [...(config.capacity ?? []), gate.capacity],
      interceptors: [...gate.interceptors, ...(config.interceptors ?? [])]
    }))

/** The policy-gated executor (`makePolicyGated`) as a layer. */
export const layerPolicyGated = (config: Config = {}, options: PolicyGate.Options = {}) =>
  Layer.effect(ActionExecutor, makePolicyGated(config, options))
