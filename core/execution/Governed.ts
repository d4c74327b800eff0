/**
 * The governed and certifiable executors: the policy pinned at stage 3, the operation opened
 * with `policy_bound` and `operation_started` at stage 4, every gate result committed as it is
 * produced, and one terminal record per operation, all through the EvidenceStore in context.
 */
import { Cause, Effect, Either, Layer, Option } from "effect"
import * as EvidenceProjector from "../evidence/EvidenceProjector.ts"
import { EvidenceProjectionSource, EvidenceStore } from "../evidence/EvidenceStore.ts"
import { ExecutorRegistry } from "../evidence/ExecutorRegistry.ts"
import { EvidenceWriter } from "../evidence/Governance.ts"
import { BudgetLedger } from "../policy/BudgetLedger.ts"
import * as PolicyGate from "../policy/PolicyGate.ts"
import type { InterceptorBinding } from "../policy/PolicyRule.ts"
import { PolicySnapshotStore } from "../policy/PolicySnapshotStore.ts"
import { AttemptStore } from "../state/AttemptStore.ts"
import { ProjectionStore } from "../state/ProjectionStore.ts"
import { RunStore } from "../state/RunStore.ts"
import * as ActionExecutor from "./ActionExecutor.ts"
import type { Interceptor } from "./Interceptor.ts"
import { bindingOf } from "./Interceptor.ts"
import * as RuntimeProfile from "./RuntimeProfile.ts"

/** A profile this composition cannot stand behind, such as certifiable on a store that forgets. */
export { ProfileUnavailableError } from "./RuntimeProfile.ts"

/** A configured interceptor without an identity, or with a configuration that has no canonical JSON. */
export { InterceptorIdentityError } from "./Interceptor.ts"

/** How a governed executor is bound: its agent, and whether it claims the certifiable profile. */
export interface Options extends PolicyGate.Options {
  /** Certifiable needs durable evidence and policy snapshot stores: its certificates must verify after a restart. */
  readonly certifiable?: boolean
}

/**
 * Build a governed executor over the policy, evidence and approval stores in context; with a RunStore in context,
 * Run scopes bind to their Run, and with a ProjectionStore and projection source too, a call's attempt is projected
 * into its Run before it returns. It is registered in the ExecutorRegistry in context until the scope closes, so
 * recovery never takes its running operations for a crash's orphans.
 */
export const make = (
  config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance"> = {},
  options: Options = {}
) =>
  Effect.gen(function*() {
    const store = yield* EvidenceStore
    const profile = options.certifiable === true ? "certifiable" as const : "governed" as const
    if (profile === "certifiable" && !store.durable) {
      return yield* new RuntimeProfile.ProfileUnavailableError({ profile, detail: "the evidence store is not durable" })
    }
    // A certificate names its policy by (id, version) and is verified by re-reading it: a store that forgets on restart
    // would turn every certificate into missing_policy.
    if (profile === "certifiable" && !(yield* PolicySnapshotStore).durable) {
      return yield* new RuntimeProfile.ProfileUnavailableError({
        profile,
        detail: "the policy snapshot store is not durable"
      })
    }
    const pin = options.pin ?? (yield* PolicyGate.makePin)
    const writer = yield* EvidenceWriter
    // A ledger kept in the database the evidence store commits to: a call's budget places ride on its evidence (a
    // writer over another store refuses them, fail-closed).
    const ledger = yield* Effect.serviceOption(BudgetLedger)
    const database = Option.isSome(ledger) ? ledger.value.database : undefined
    const joint = database !== undefined && database === store.appendAll.admitting?.ledger
    const gate = yield* PolicyGate.make(options, pin, joint)
    const identities = yield* identify(gate.interceptors, config.interceptors ?? [])
    const runs = yield* Effect.serviceOption(RunStore)
    const attempts = yield* Effect.serviceOption(AttemptStore)
    const projection = yield* Effect.serviceOption(ProjectionStore)
    const source = yield* Effect.serviceOption(EvidenceProjectionSource)
    const project = Option.isSome(runs) && Option.isSome(projection) && Option.isSome(source)
      ? yield* projectRuns.pipe(
        Effect.provideService(ProjectionStore, projection.value),
        Effect.provideService(EvidenceProjectionSource, source.value)
      )
      : undefined
    yield* (yield* ExecutorRegistry).register
    return yield* ActionExecutor.make({
      ...config,
      ...(Option.isSome(runs) ? { runs: runs.value } : {}),
      ...(Option.isSome(attempts) ? { attempts: attempts.value } : {}),
      ...(options.boundAgent === undefined ? {} : { boundAgent: options.boundAgent }),
      capacity: [...(config.capacity ?? []), gate.capacity],
      interceptors: [...gate.interceptors, ...(config.interceptors ?? [])],
      governance: {
        profile,
        pin: (context) => Effect.map(pin.read(context), Either.map((pinned) => pinned.snapshot)),
        writer,
        identities,
        ...(project === undefined ? {} : { project })
      }
    })
  })

/**
 * Every interceptor by its identity: the policy's own are bound by the snapshot itself; a configured one's
 * configuration is digested here, once, and the pinned snapshot must bind it (seed D5: no out-of-band executable rule).
 */
const identify = (own: ReadonlyArray<Interceptor>, configured: ReadonlyArray<Interceptor>) =>
  Effect.gen(function*() {
    const identities = new Map<Interceptor, InterceptorBinding | "snapshot">(own.map((it) => [it, "snapshot"]))
    for (const interceptor of configured) identities.set(interceptor, yield* bindingOf(interceptor))
    return identities
  })

/**
 * Stage 14 for governed calls in durable Runs: a drain of the projector shared by the executor's calls, so a call's
 * attempt is in its Run when the call returns. A drain that fails (or dies: the call's outcome stands either way)
 * leaves the projection to the next one or to recovery, and is logged: a conflict or integrity failure needs an operator.
 */
const projectRuns = Effect.map(
  EvidenceProjector.makeShared(),
  (shared) =>
    Effect.matchCauseEffect(shared, {
      onFailure: (cause) =>
        Effect.as(
          (Cause.isDie(cause) ? Effect.logError : Effect.logWarning)(
            "a governed call's projection into its Run is pending",
            cause
          ),
          false
        ),
      onSuccess: () => Effect.succeed(true)
    })
)

/** The governed (or certifiable) executor as a layer; it shares the EvidenceWriter in context with task boundaries. */
export const layer = (
  config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance"> = {},
  options: Options = {}
) => Layer.scoped(ActionExecutor.ActionExecutor, make(config, options))
