/**
 * What an executor is built with and closes over: its configuration, the services it took from context, and the
 * profile chosen once for it.
 */
import type { Deferred, Duration, Effect, Either, Option } from "effect"
import { Context, Schema } from "effect"
import type { ActionExecutionBackend } from "../../../action/ActionExecutionBackend.ts"
import type { ActionRegistry } from "../../../action/ActionRegistry.ts"
import type { Digest } from "../../../base/Digest.ts"
import type { IdGenerator } from "../../../base/IdGenerator.ts"
import type { Limits } from "../../../base/StrictJson.ts"
import type {
  EvidenceWriter,
  GovernanceEvidenceError,
  OutcomeEvidenceError,
  TaskBoundary
} from "../../../evidence/Governance.ts"
import type { AgentSubject } from "../../../policy/InvocationContext.ts"
import type { ContainmentOptIns } from "../../../policy/PermissionPolicy.ts"
import type { InterceptorBinding } from "../../../policy/PolicyRule.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import type { AttemptStore } from "../../../state/AttemptStore.ts"
import type { Run } from "../../../state/Run.ts"
import type { RunStore } from "../../../state/RunStore.ts"
import type { Capacity } from "../../Capacity.ts"
import type { ExecutionContext } from "../../ExecutionContext.ts"
import type { IdempotencyStore } from "../../IdempotencyStore.ts"
import type { Interceptor, Observer, Transformer, Verdict } from "../../Interceptor.ts"
import type { RuntimeProfile } from "../../RuntimeProfile.ts"
import type { Stage } from "../../Stage.ts"

/** One execution's options: the trusted context, a Deferred whose completion cancels it, and for governed profiles the task boundary. */
export interface ExecuteOptions {
  readonly context: ExecutionContext
  readonly cancel?: Deferred.Deferred<void>
  readonly boundary?: TaskBoundary
  /**
   * Durable profile, ephemeral scope: run the call as the one attempt of a new root Run that is created, started and
   * completed into this Deferred only once every pre-call stage admitted the invocation (spec/runs.md: a denied,
   * deferred or escalated invocation has no Run). The caller ends the Run. Without it, a durable call names its
   * already-running Run in its scope.
   */
  readonly newRun?: Deferred.Deferred<Run>
}

/** The durable profile could not commit an attempt; `call_executed` says whether the callable had run (it is never retried). */
export class PersistError extends Schema.TaggedError<PersistError>()("PersistError", {
  call_executed: Schema.Boolean,
  attempt_id: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `attempt ${this.attempt_id} not committed (call_executed: ${this.call_executed}): ${this.detail}`
  }
}

/** An evidence failure of a governed execution: an error, never an outcome. */
export type ExecutionError = GovernanceEvidenceError | OutcomeEvidenceError | PersistError

/** What a governed executor adds: the profile it claims, the snapshot pin, and the evidence writer. */
export interface Governor {
  readonly profile: "governed" | "certifiable"
  readonly pin: (context: ExecutionContext) => Effect.Effect<Either.Either<PolicySnapshot, Verdict>>
  readonly writer: EvidenceWriter.Service
  /** Stage 14 for a call in a durable Run: project its committed evidence into the Run now (true), or leave it (false). */
  readonly project?: Effect.Effect<boolean>
  /**
   * The interceptors it was built with, by identity: the policy's own are bound by the pinned snapshot itself
   * (`"snapshot"`); each call's snapshot must bind every other one (stage 3), and their gate records name it.
   */
  readonly identities?: ReadonlyMap<Interceptor, InterceptorBinding | "snapshot">
}

/** What an executor is built with; minimal unless `governance`, or `runs` with `attempts`, is set. */
export interface Config {
  /** Stage 3: the capacities each call takes a lease on before any governed operation opens; a full one defers it. */
  readonly capacity?: ReadonlyArray<Capacity>
  readonly interceptors?: ReadonlyArray<Interceptor>
  readonly transformers?: ReadonlyArray<Transformer>
  readonly observers?: ReadonlyArray<Observer>
  /** How long an interrupted callable may take to tear down before the executor stops waiting. */
  readonly teardown?: Duration.DurationInput
  /**
   * Stage 2: how deep and how large a request's arguments may be before they are decoded (`arguments.too_deep`,
   * `arguments.too_large`); each one not given is `StrictJson.defaultLimits`' (128 levels, a size of 1 MiB).
   */
  readonly argumentLimits?: Partial<Limits>
  /** Governed profiles: pin the snapshot at stage 3 and commit evidence as control flow. */
  readonly governance?: Governor
  /**
   * Profiles that pin no snapshot at stage 3 (minimal, durable): the containment opt-ins every call is admitted under,
   * as a policy declares them (the edge handler passes its one policy's); governed profiles read the pinned snapshot's.
   */
  readonly containment?: ContainmentOptIns
  /** The real executing agent this executor acts as; an action's declared origins require the invocation's agent to be it. */
  readonly boundAgent?: AgentSubject
  /** Runs resolved at stage 3 (and a one-shot call's Run created at stage 12, durable profile). */
  readonly runs?: RunStore.Service
  /** With `runs`, the durable profile: each attempt, outcome and outbox intent committed at stage 14 (governed profiles project evidence instead). */
  readonly attempts?: AttemptStore.Service
}

/** What every stage of one executor closes over. */
export interface Env {
  readonly profile: RuntimeProfile
  readonly registry: ActionRegistry.Service
  readonly backend: ActionExecutionBackend.Service
  readonly digest: Digest.Service
  readonly ids: IdGenerator.Service
  readonly idempotency: Option.Option<IdempotencyStore.Service>
  /** Configured interceptors, in stage order. */
  readonly interceptors: ReadonlyArray<Interceptor>
  readonly transformers: ReadonlyArray<Transformer>
  readonly capacities: ReadonlyArray<Capacity>
  readonly observers: ReadonlyArray<Observer>
  readonly teardown: Duration.Duration
  readonly argumentLimits: Limits
  readonly boundAgent: AgentSubject | undefined
  /** The configured containment opt-ins of a profile that pins no snapshot (Config.containment). */
  readonly containment: ContainmentOptIns | undefined
  /** Told of every stage each call enters. */
  readonly trace: StageTrace.Service | undefined
  /** Governed: the identity each configured interceptor's gate records name it by, by its id. */
  readonly identities: ReadonlyMap<string, InterceptorBinding>
  /** The attempts this executor is running in Runs (attempt id -> run id), until each concludes. */
  readonly running: Map<string, string>
}

/** Told of every stage each call enters, by attempt id: what the plan's conformance tests compare with the plan. */
export class StageTrace extends Context.Tag("writ/internal/StageTrace")<StageTrace, StageTrace.Service>() {}

/** The StageTrace service. */
export declare namespace StageTrace {
  /** Called as a call enters a stage. */
  export type Service = (attempt_id: string, stage: Stage) => void
}
