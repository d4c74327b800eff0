/**
 * The ActionExecutor: the only route to an action's callable. Each execution runs the compiled
 * plan's fourteen stages in the seed's order and concludes in exactly one typed outcome.
 */
import {
  Cause,
  Context,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  Layer,
  Option,
  Schema,
  SchemaAST
} from "effect"
import { captureFailure } from "./Action.ts"
import type { ActionDefinition } from "./Action.ts"
import type { ActionDescriptor } from "./ActionDescriptor.ts"
import { ActionExecutionBackend, uncontained } from "./ActionExecutionBackend.ts"
import { type ActionExecutionPlan, compile as compilePlan } from "./ActionExecutionPlan.ts"
import { ActionRegistry } from "./ActionRegistry.ts"
import type { ActionNotFoundError } from "./ActionRegistry.ts"
import type * as ActionUsage from "./ActionUsage.ts"
import { ActionAdmissionDecision } from "./AdmissionDecision.ts"
import * as Canonical from "./Canonical.ts"
import type { Capacity, Lease } from "./Capacity.ts"
import { Digest, sha256TextWith } from "./Digest.ts"
import type { AppendReceipt } from "./EvidenceStore.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import {
  Cancelled,
  Deferred as Deferral,
  type ExecutionOutcome,
  Failed,
  FailureSummary,
  Recheck,
  Succeeded,
  TimedOut
} from "./ExecutionOutcome.ts"
import type { Arguments, ExecutionRequest } from "./ExecutionRequest.ts"
import * as ExecutionScope from "./ExecutionScope.ts"
import { ExecutorRegistry } from "./ExecutorRegistry.ts"
import type { EvidenceWriter, GovernanceEvidenceError, OutcomeEvidenceError, TaskBoundary } from "./Governance.ts"
import { IdempotencyStore, keyOf } from "./IdempotencyStore.ts"
import { IdGenerator } from "./IdGenerator.ts"
import type { Concluded, Evaluation, Interceptor, Observer, Transformer, Verdict } from "./Interceptor.ts"
import type { Attempt, Compiled, StageResult } from "./internal/attempt.ts"
import { common, denied, describeParseError, outcomeOf, reason } from "./internal/attempt.ts"
import type { PersistError } from "./internal/durable.ts"
import { makeDurableStages } from "./internal/durable.ts"
import { makeGovernedStages } from "./internal/governed.ts"
import { refusing, stager } from "./internal/outbox.ts"
import { isRefusal, mint } from "./internal/token.ts"
import { trustedMake } from "./internal/trusted.ts"
import { meter, unmetered } from "./internal/usage.ts"
import type { AgentSubject } from "./InvocationContext.ts"
import type { InvocationTokenError } from "./InvocationTokenError.ts"
import * as Origin from "./Origin.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"
import type { ActionRef } from "./Refs.ts"
import { ProfileUnavailableError, type RuntimeProfile } from "./RuntimeProfile.ts"
import type { SecurityStage } from "./Stage.ts"
import { type Run, StateStore } from "./StateStore.ts"
import * as Time from "./Time.ts"

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

/** An evidence failure of a governed execution: an error, never an outcome. */
export type ExecutionError = GovernanceEvidenceError | OutcomeEvidenceError | PersistError

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

/** What a minimal-profile executor is built with. */
export interface Config {
  /** Stage 3: the capacities each call takes a lease on before any governed operation opens; a full one defers it. */
  readonly capacity?: ReadonlyArray<Capacity>
  readonly interceptors?: ReadonlyArray<Interceptor>
  readonly transformers?: ReadonlyArray<Transformer>
  readonly observers?: ReadonlyArray<Observer>
  /** How long an interrupted callable may take to tear down before the executor stops waiting. */
  readonly teardown?: Duration.DurationInput
  /** Governed profiles: pin the snapshot at stage 3 and commit evidence as control flow. */
  readonly governance?: Governor
  /** The real executing agent this executor acts as; an action's declared origins require the invocation's agent to be it. */
  readonly boundAgent?: AgentSubject
  /** Runs resolved at stage 3; in the durable profile also each attempt, outcome and outbox intent committed at stage 14 (governed profiles project evidence instead). */
  readonly state?: StateStore.Service
}

/** The durable profile could not commit an attempt. */
export { PersistError } from "./internal/durable.ts"

/** What a governed executor adds: the profile it claims, the snapshot pin, and the evidence writer. */
export interface Governor {
  readonly profile: "governed" | "certifiable"
  readonly pin: (context: ExecutionContext, attempt_id: string) => Effect.Effect<Either.Either<PolicySnapshot, Verdict>>
  readonly writer: EvidenceWriter.Service
  /** Stage 14 for a call in a durable Run: project its committed evidence into the Run now (true), or leave it (false). */
  readonly project?: Effect.Effect<boolean>
}

type Invoked =
  | { readonly _tag: "exit"; readonly exit: Exit.Exit<unknown, unknown> }
  | { readonly _tag: "stopped"; readonly by: "deadline" | "cancel"; readonly teardown: "completed" | "abandoned" }

const securityOrder: ReadonlyArray<SecurityStage> = ["authorise", "guard", "policy"]

/** A decoder that refuses unknown fields, including for `Schema.Struct({})`, which Effect reads as "any object". */
const strictDecoder = (schema: Schema.Schema<any, any>) => {
  const decode = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })
  const ast = SchemaAST.encodedAST(schema.ast)
  const empty = SchemaAST.isTypeLiteral(ast) && ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0
  if (!empty) return decode
  const nothing = Schema.decodeUnknownEither(Schema.Record({ key: Schema.String, value: Schema.Never }))
  return (input: unknown) => Either.flatMap(nothing(input), () => decode(input))
}

/** Build an executor over the registry, backend, digest and id generator in context; minimal unless `config.governance` is set. */
export const make = (config: Config = {}) =>
  Effect.gen(function*() {
    const registry = yield* ActionRegistry
    const backend = yield* ActionExecutionBackend
    const digest = yield* Digest
    const ids = yield* IdGenerator
    const idempotency = yield* Effect.serviceOption(IdempotencyStore)
    const interceptors = [...(config.interceptors ?? [])].sort(
      (a, b) => securityOrder.indexOf(a.stage) - securityOrder.indexOf(b.stage)
    )
    const transformers = [...(config.transformers ?? [])]
    const capacities = [...(config.capacity ?? [])]
    const observers = [...(config.observers ?? [])]
    const teardown = Duration.decode(config.teardown ?? Duration.seconds(1))
    const governor = config.governance
    const runs = config.state
    const state = governor === undefined ? runs : undefined
    const profile: RuntimeProfile = governor?.profile ?? (state === undefined ? "minimal" : "durable")
    const evaluates = interceptors.length > 0 || transformers.length > 0 || governor !== undefined

    /** Stage 5 for an action that declares its origins: the invocation must come from one of them. */
    const originsOf = (definition: ActionDefinition): Interceptor => ({
      id: "action.origins",
      stage: "authorise",
      evaluate: (evaluation) =>
        Effect.map(
          Origin.authorize({
            restriction: definition.origins,
            boundAgent: config.boundAgent,
            principal: evaluation.context.authenticated_principal,
            action_type: definition.name
          }),
          (check): Verdict =>
            check._tag === "origin_denied"
              ? { disposition: "deny", code: check.code, detail: check.detail }
              : { disposition: "allow", code: check.code }
        )
    })
    const compiledPlans = new WeakMap<ActionDefinition, Compiled>()

    const compile = (definition: ActionDefinition, descriptor: ActionDescriptor): Compiled => {
      const cached = compiledPlans.get(definition)
      if (cached !== undefined) return cached
      const withOrigins = definition.origins === undefined ? interceptors : [originsOf(definition), ...interceptors]
      const compiled: Compiled = Object.freeze({
        definition,
        descriptor,
        plan: compilePlan({ descriptor, backend: backend.ref, interceptors: withOrigins, transformers, profile }),
        interceptors: withOrigins,
        ref: { name: definition.name, version: definition.version },
        decode: strictDecoder(definition.input),
        encode: Schema.encodeUnknownEither(definition.input),
        encodeOutput: Schema.encodeUnknownEither(definition.output),
        fields: declaredFields(definition.input)
      })
      compiledPlans.set(definition, compiled)
      return compiled
    }

    /** Stage 1: resolve the reference to a digest-pinned descriptor and its compiled plan. */
    const resolve = (attempt: Attempt): StageResult => {
      const resolved = registry.resolve(attempt.request.action)
      if (Either.isLeft(resolved)) return denied(attempt, "action.not_found", resolved.left.message)
      attempt.compiled = compile(resolved.right.definition, resolved.right.descriptor)
      attempt.action = attempt.compiled.ref
    }

    /** Stages 2 and 9: decode arguments by Schema (no handler code runs). */
    const normalise = (attempt: Attempt, compiled: Compiled, args: unknown): StageResult => {
      const decoded = compiled.decode(args)
      if (Either.isLeft(decoded)) {
        return denied(attempt, "schema.invalid", describeParseError(decoded.left, "arguments"))
      }
      attempt.input = decoded.right
    }

    /** The canonical arguments and their digest, which every security decision is bound to. */
    const bindDigest = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      const encoded = compiled.encode(attempt.input)
      if (Either.isLeft(encoded)) {
        return denied(attempt, "schema.invalid", describeParseError(encoded.left, "arguments"))
      }
      const text = Canonical.stringify(encoded.right)
      if (Either.isLeft(text)) {
        return denied(attempt, "arguments.not_canonical", `arguments${text.left.path.slice(1)}: ${text.left.reason}`)
      }
      attempt.args = encoded.right as Arguments
      attempt.digest = yield* sha256TextWith(digest, text.right)
      return undefined
    })

    /** A durable attempt records its arguments' digest even when nothing evaluates them, when they have one (no float). */
    const noteDigest = (attempt: Attempt, compiled: Compiled) => Effect.as(bindDigest(attempt, compiled), undefined)

    /** Stage 3: bind the trusted context to the request; scope, principal and backend must agree. */
    const bindContext = (attempt: Attempt): StageResult => {
      const { context, request } = attempt
      if (!ExecutionScope.equals(request.execution_scope, context.execution_scope)) {
        return denied(attempt, "context.scope_mismatch", "the request's scope is not the context's scope")
      }
      if ("operation_context" in request.metadata) {
        return denied(attempt, "context.operation_context_supplied", "an operation context is derived, never supplied")
      }
      if (request.principal_claim !== undefined && request.principal_claim.id !== context.authenticated_principal.id) {
        return denied(attempt, "context.principal_mismatch", "the principal claim is not the authenticated principal")
      }
      if (request.execution_scope._tag === "durable_run" && runs === undefined) {
        return denied(attempt, "scope.run_unavailable", `the ${profile} profile has no Run repository`)
      }
      if (attempt.newRun !== undefined && state === undefined) {
        return denied(attempt, "scope.run_unavailable", `the ${profile} profile creates no Run`)
      }
      if (attempt.newRun !== undefined && request.execution_scope._tag === "durable_run") {
        return denied(attempt, "scope.run_conflict", "a call inside a Run cannot also open a new one")
      }
      if (
        request.execution_scope._tag === "ephemeral_operation" && state !== undefined && attempt.newRun === undefined
      ) {
        return denied(attempt, "scope.run_required", "the durable profile executes inside a Run")
      }
      if (context.effect_backend.id !== backend.ref.id || context.effect_backend.version !== backend.ref.version) {
        return denied(attempt, "context.backend_mismatch", `the executor's backend is ${backend.ref.id}`)
      }
    }

    /** Stage 3: the backend must prove every kind of containment the action requires. */
    const admitContainment = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      const report = yield* backend.probe
      const missing = uncontained(report, compiled.definition.containment)
      return missing.length === 0
        ? undefined
        : denied(attempt, "containment.unsupported", `${report.backend.id} cannot contain ${missing.join(", ")}`)
    })

    /** Stage 3: deadline admission; a deadline already past concludes before the callable. */
    const admitDeadline = Effect.fnUntraced(function*(attempt: Attempt, deadline: Time.Timestamp) {
      return (yield* Time.nowMicros) >= Time.toMicros(deadline)
        ? trustedMake(TimedOut, { ...common(attempt), call_executed: false })
        : undefined
    })

    /** Stage 3, once the context (and any Run) is bound: the containment the action needs, and its deadline. */
    const admitCall = (attempt: Attempt, compiled: Compiled): Effect.Effect<StageResult> =>
      compiled.definition.containment.length === 0 && attempt.request.deadline === undefined
        ? Effect.succeed(undefined)
        : Effect.gen(function*() {
          return (compiled.definition.containment.length > 0
            ? yield* admitContainment(attempt, compiled)
            : undefined) ??
            (attempt.request.deadline !== undefined
              ? yield* admitDeadline(attempt, attempt.request.deadline)
              : undefined)
        })

    /**
     * Stage 3: a lease on every capacity, held while `body` runs, or the deferral of the first one that is full; the
     * leases taken are released however the attempt ends, an admission that dies included.
     */
    const leased = <E>(attempt: Attempt, body: Effect.Effect<ExecutionOutcome, E>) =>
      capacities.length === 0 ? body : Effect.uninterruptibleMask((restore) => {
        const leases: Array<Lease> = []
        const admission = {
          request: attempt.request,
          context: attempt.context,
          descriptor: attempt.compiled!.descriptor
        }
        return Effect.gen(function*() {
          for (const capacity of capacities) {
            const admitted = yield* capacity.admit(admission)
            if (Either.isLeft(admitted)) {
              const { code, detail, retry_at } = admitted.left
              return trustedMake(Deferral, {
                ...common(attempt),
                reason: reason(code, detail),
                ...(retry_at === undefined ? {} : { retry_at })
              })
            }
            leases.push(admitted.right)
          }
          return yield* restore(body)
        }).pipe(Effect.ensuring(Effect.forEach(leases, (lease) => lease.release, { discard: true })))
      })

    const governed = governor === undefined ? undefined : makeGovernedStages(governor, backend, digest, ids)
    const durable = makeDurableStages(digest)

    const evaluation = (attempt: Attempt): Evaluation => ({
      attempt_id: attempt.attempt_id,
      request: attempt.request,
      context: attempt.context,
      descriptor: attempt.compiled!.descriptor,
      arguments: attempt.args!,
      arguments_digest: attempt.digest!
    })

    /** Stages 5-7 (and 10): run each security interceptor in fixed order, bound to the current digest. */
    const authorise = Effect.fnUntraced(function*(attempt: Attempt, recheck: boolean) {
      for (const interceptor of attempt.compiled!.interceptors) {
        const stage = recheck ? "recheck" : interceptor.stage
        attempt.stage = stage
        const exit = yield* Effect.exit(Effect.suspend(() => interceptor.evaluate(evaluation(attempt))))
        const verdict: Verdict = Exit.isSuccess(exit)
          ? exit.value
          : { disposition: "deny", code: "control.evaluator_error" }
        const decision = trustedMake(ActionAdmissionDecision, {
          disposition: verdict.disposition,
          reason: reason(verdict.code, verdict.detail),
          evaluator: interceptor.id,
          stage,
          arguments_digest: attempt.digest!,
          evidence: [],
          ...(verdict.retry_at === undefined ? {} : { retry_at: verdict.retry_at }),
          ...(verdict.approval === undefined ? {} : { approval: verdict.approval })
        })
        ;(attempt.decisions ??= []).push(decision)
        if (verdict.metered === true && interceptor.charge !== undefined) {
          const meters = attempt.meters ??= []
          if (!meters.includes(interceptor)) meters.push(interceptor)
        }
        if (attempt.operation !== undefined) {
          yield* governed!.recordVerdict(attempt.operation, attempt, interceptor.id, verdict)
        }
        if (verdict.disposition !== "allow") {
          return outcomeOf(attempt, verdict.disposition, decision)
        }
      }
      return undefined
    })

    /** Stages 8-10: transform, revalidate, and recheck every evaluator when the digest changed. */
    const transform = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      attempt.stage = "transform"
      const before = attempt.digest!
      let args = attempt.args!
      for (const transformer of transformers) {
        const exit = yield* Effect.exit(
          Effect.suspend(() => transformer.transform({ ...evaluation(attempt), arguments: args }))
        )
        if (Exit.isFailure(exit)) return denied(attempt, "transform.failed", `transformer ${transformer.id} failed`)
        args = exit.value
      }
      attempt.stage = "revalidate"
      const invalid = normalise(attempt, compiled, args) ?? (yield* bindDigest(attempt, compiled))
      if (invalid !== undefined) return invalid
      attempt.stage = "recheck"
      const changed = attempt.digest !== before
      attempt.recheck = trustedMake(Recheck, {
        ran: changed,
        reason: changed ? "arguments_changed" : "arguments_unchanged",
        evaluators: changed ? compiled.interceptors.map((interceptor) => interceptor.id) : [],
        digest_before: before,
        digest_after: attempt.digest!
      })
      return changed ? yield* authorise(attempt, true) : undefined
    })

    /** Stage 12: release a one-use token and invoke exactly once, under the deadline and cancellation if any. */
    const invoke = (attempt: Attempt, compiled: Compiled, cancel?: Deferred.Deferred<void>) => {
      attempt.stage = "invoke"
      const meters = attempt.meters
      const usage = meters === undefined ? undefined : meter()
      const deadline = attempt.request.deadline
      const service = usage?.service ?? unmetered
      const once = deadline !== undefined || cancel !== undefined
        ? invokeGuarded(attempt, compiled, service, deadline, cancel)
        : invokeOnly(attempt, compiled, service)
      return usage === undefined ? once : charged(attempt, once, usage.close, meters!)
    }

    const invokeOnly = (attempt: Attempt, compiled: Compiled, usage: ActionUsage.ActionUsage.Service) => {
      attempt.invoked = true
      return Effect.map(Effect.exit(call(attempt, compiled, usage)), (exit) => settle(attempt, compiled, exit))
    }

    /** The invocation's wall time by the Clock, with what its callable reported, charged to each meter however it ended. */
    const charged = (
      attempt: Attempt,
      once: Effect.Effect<ExecutionOutcome>,
      close: (wall_microseconds: number) => ActionUsage.Usage,
      meters: ReadonlyArray<Interceptor>
    ) =>
      Effect.flatMap(Time.nowMicros, (started) =>
        Effect.onExit(once, () =>
          Effect.flatMap(Time.nowMicros, (ended) => {
            const usage = close(ended - started)
            if (!attempt.invoked) return Effect.void
            const evaluated = evaluation(attempt)
            return Effect.forEach(meters, (interceptor) => interceptor.charge!(evaluated, usage), { discard: true })
          })))

    const call = (attempt: Attempt, compiled: Compiled, usage: ActionUsage.ActionUsage.Service) => {
      const outbox = attempt.profile === "durable" ? (attempt.outbox = stager()) : undefined
      const invoked = backend.invoke(mint(compiled.definition), {
        definition: compiled.definition,
        input: attempt.input,
        context: { request_id: attempt.request.request_id, attempt_id: attempt.attempt_id },
        usage,
        outbox: outbox?.service ?? refusing
      })
      // Staging ends with the invocation: a fiber its handler left running stages nothing after it.
      return outbox === undefined ? invoked : Effect.ensuring(invoked, Effect.sync(outbox.close))
    }

    const invokeGuarded = Effect.fnUntraced(function*(
      attempt: Attempt,
      compiled: Compiled,
      usage: ActionUsage.ActionUsage.Service,
      deadline: Time.Timestamp | undefined,
      cancel: Deferred.Deferred<void> | undefined
    ) {
      if (cancel !== undefined && (yield* Deferred.isDone(cancel))) {
        return trustedMake(Cancelled, { ...common(attempt), call_executed: false })
      }
      // A deadline that passed during the pre-call stages stops the call before the token is released.
      const remaining = deadline === undefined ? undefined : Time.toMicros(deadline) - (yield* Time.nowMicros)
      if (remaining !== undefined && remaining <= 0) {
        return trustedMake(TimedOut, { ...common(attempt), call_executed: false })
      }
      attempt.invoked = true
      const fiber = yield* Effect.forkDaemon(call(attempt, compiled, usage))
      const racers: Array<Effect.Effect<Invoked>> = [
        Effect.map(Fiber.await(fiber), (exit): Invoked => ({ _tag: "exit", exit }))
      ]
      if (remaining !== undefined) racers.push(Effect.as(Effect.sleep(Duration.micros(BigInt(remaining))), byDeadline))
      if (cancel !== undefined) racers.push(Effect.as(Deferred.await(cancel), byCancel))
      const first = yield* Effect.raceAll(racers).pipe(Effect.onInterrupt(() => Fiber.interruptFork(fiber)))
      attempt.outbox?.close()
      if (first._tag === "exit") return settle(attempt, compiled, first.exit)
      const stopped = yield* Effect.either(Effect.timeout(Fiber.interrupt(fiber), teardown))
      const fields = {
        ...common(attempt),
        call_executed: true,
        teardown: Either.isRight(stopped) ? "completed" as const : "abandoned" as const
      }
      return first.by === "deadline" ? trustedMake(TimedOut, fields) : trustedMake(Cancelled, fields)
    })

    /** Stage 13: normalise the callable's exit into an outcome; failures are captured and redacted. */
    const settle = (attempt: Attempt, compiled: Compiled, exit: Exit.Exit<unknown, unknown>): ExecutionOutcome => {
      attempt.stage = "outcome"
      if (Exit.isSuccess(exit)) {
        const encoded = compiled.encodeOutput(exit.value)
        return Either.isRight(encoded)
          ? trustedMake(Succeeded, { ...common(attempt), result: encoded.right })
          : trustedMake(Failed, {
            ...common(attempt),
            failure: trustedMake(FailureSummary, {
              code: "output.invalid",
              message: describeParseError(encoded.left, "result")
            })
          })
      }
      const refused = Cause.failureOption(exit.cause).pipe(Option.filter(isRefusal))
      if (Option.isSome(refused)) {
        attempt.invoked = false
        attempt.stage = "invoke"
        return denied(attempt, "invoke.token_refused", (refused.value as InvocationTokenError).reason)
      }
      if (Cause.isInterruptedOnly(exit.cause)) {
        return trustedMake(Cancelled, { ...common(attempt), call_executed: true })
      }
      return trustedMake(Failed, {
        ...common(attempt),
        failure: trustedMake(FailureSummary, captureFailure(exit.cause))
      })
    }

    const notify = (outcome: ExecutionOutcome, receipt?: AppendReceipt) => {
      const event: Concluded = receipt === undefined
        ? { _tag: "concluded", outcome }
        : {
          _tag: "concluded",
          outcome,
          evidence: { chain_id: receipt.chain_id, record_id: receipt.record_id, head_hash: receipt.head_hash }
        }
      // Suspended: an observer that throws while building its effect changes nothing either.
      return Effect.forEach(observers, (observer) => Effect.exit(Effect.suspend(() => observer.observe(event))), {
        discard: true
      })
    }

    /** Stages 1-14 in order; a governed profile opens its operation at stage 4 and closes it at stage 13. */
    const run = Effect.fnUntraced(function*(
      attempt: Attempt,
      cancel?: Deferred.Deferred<void>,
      boundary?: TaskBoundary
    ) {
      const unresolved = resolve(attempt)
      if (unresolved !== undefined) return unresolved
      const compiled = attempt.compiled!
      attempt.stage = "normalise"
      const stop = normalise(attempt, compiled, attempt.request.arguments) ??
        (evaluates
          ? yield* bindDigest(attempt, compiled)
          : state !== undefined
          ? yield* noteDigest(attempt, compiled)
          : undefined)
      if (stop !== undefined) return stop
      attempt.stage = "bind_context"
      const unbound = bindContext(attempt)
      if (unbound !== undefined) return unbound
      const scope = attempt.request.execution_scope
      if (runs !== undefined && scope._tag === "durable_run") {
        const unbound = yield* durable.bindRun(runs, attempt, scope.run_id)
        if (unbound !== undefined) return unbound
        attempt.run_id = scope.run_id
      }
      // From here an attempt in a Run belongs to it (a one-shot call's once its Run is created on admission): in the
      // durable profile, whatever concludes it is committed; a one-shot call refused before admission has no Run.
      if (state !== undefined && (attempt.run_id !== undefined || attempt.newRun !== undefined)) {
        const commit = (outcome: ExecutionOutcome) =>
          attempt.run_id === undefined
            ? Effect.succeed(outcome)
            : durable.persist(state, attempt, attempt.run_id, outcome)
        return yield* admitCall(attempt, compiled).pipe(
          Effect.flatMap((refused) =>
            refused === undefined ? leased(attempt, operate(attempt, compiled, cancel)) : Effect.succeed(refused)
          ),
          Effect.flatMap(commit),
          Effect.onInterrupt(() =>
            Effect.exit(commit(trustedMake(Cancelled, { ...common(attempt), call_executed: attempt.invoked })))
          )
        )
      }
      const refused = yield* admitCall(attempt, compiled)
      if (refused !== undefined) return refused
      if (governed === undefined) return yield* leased(attempt, operate(attempt, compiled, cancel))
      const outcome = yield* leased(
        attempt,
        governed.govern(attempt, compiled, boundary, operate(attempt, compiled, cancel))
      )
      // The outcome is committed: a deadline or cancellation now only leaves its projection to the projector.
      const within = (projection: Effect.Effect<boolean>) => untilStopped(attempt, projection, cancel, () => false)
      return yield* governed.project(attempt, outcome, within)
    })

    /** Stages 5-11: the security interceptors, then transformation and recheck; an outcome when one refuses. */
    const secure = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      if (compiled.interceptors.length > 0) {
        const refused = yield* authorise(attempt, false)
        if (refused !== undefined) {
          return refused
        }
      }
      if (transformers.length > 0) {
        return yield* transform(attempt, compiled)
      }
      if (evaluates) {
        attempt.recheck = trustedMake(Recheck, { ran: false, reason: "no_transformation", evaluators: [] })
      }
      return undefined
    })

    /** `effect` raced against the request's deadline and its cancellation: whichever comes first interrupts it. */
    const untilStopped = <A, E>(
      attempt: Attempt,
      effect: Effect.Effect<A, E>,
      cancel: Deferred.Deferred<void> | undefined,
      stopped: (by: "deadline" | "cancel") => A
    ): Effect.Effect<A, E> => {
      const deadline = attempt.request.deadline
      const cancelled = cancel === undefined
        ? effect
        : Effect.raceFirst(
          effect,
          Effect.zipRight(
            Deferred.await(cancel),
            Effect.sync(() => stopped("cancel"))
          )
        )
      return deadline === undefined ? cancelled : Effect.raceFirst(
        cancelled,
        Effect.flatMap(Time.nowMicros, (now) =>
          Effect.zipRight(
            Effect.sleep(Duration.micros(BigInt(Math.max(0, Time.toMicros(deadline) - now)))),
            Effect.sync(() => stopped("deadline"))
          ))
      )
    }

    /**
     * The pre-call stages until the request's deadline or cancellation, whichever comes first concluding the attempt
     * (timed out or cancelled, the callable never reached).
     */
    const bounded = <E>(
      attempt: Attempt,
      stages: Effect.Effect<StageResult, E>,
      cancel: Deferred.Deferred<void> | undefined
    ): Effect.Effect<StageResult, E> =>
      untilStopped(attempt, stages, cancel, (by) =>
        by === "cancel"
          ? trustedMake(Cancelled, { ...common(attempt), call_executed: false })
          : trustedMake(TimedOut, { ...common(attempt), call_executed: false }))

    /** Stages 5-12: security interceptors, transformation and recheck, then the one invocation. */
    const operate = Effect.fnUntraced(function*(
      attempt: Attempt,
      compiled: Compiled,
      cancel: Deferred.Deferred<void> | undefined
    ) {
      const refused = yield* bounded(attempt, secure(attempt, compiled), cancel)
      if (refused !== undefined) return refused
      if (attempt.newRun !== undefined && state !== undefined) yield* durable.openRun(state, attempt, attempt.newRun)
      const key = attempt.request.idempotency_key
      if (key === undefined || Option.isNone(idempotency)) return yield* invoke(attempt, compiled, cancel)
      return yield* invokeOnce(idempotency.value, key, attempt, compiled, cancel)
    })

    /** After every security stage allowed the call: replay a stored success for this caller and key, or invoke and store. */
    const invokeOnce = Effect.fnUntraced(function*(
      store: IdempotencyStore.Service,
      idempotency_key: string,
      attempt: Attempt,
      compiled: Compiled,
      cancel?: Deferred.Deferred<void>
    ) {
      const key = yield* Effect.orDie(
        Effect.provideService(keyOf(attempt.context, compiled.ref, idempotency_key), Digest, digest)
      )
      const stored = yield* store.get(key)
      if (Option.isSome(stored)) {
        attempt.stage = "invoke"
        return trustedMake(Succeeded, {
          ...common(attempt),
          result: stored.value.result,
          replay_of: stored.value.attempt_id
        })
      }
      const outcome = yield* invoke(attempt, compiled, cancel)
      if (outcome._tag === "succeeded") yield* store.put(key, outcome)
      return outcome
    })

    const execute = (request: ExecutionRequest, options: ExecuteOptions) =>
      Effect.flatMap(ids.uuid, (attempt_id) => {
        const attempt: Attempt = {
          request,
          context: options.context,
          attempt_id,
          action: request.action,
          stage: "resolve",
          invoked: false,
          profile,
          ...(options.newRun === undefined ? {} : { newRun: options.newRun })
        }
        if (observers.length === 0) return run(attempt, options.cancel, options.boundary)
        return run(attempt, options.cancel, options.boundary).pipe(
          Effect.tap((outcome) => notify(outcome, attempt.receipt)),
          // Told in the background: the interrupted caller waits for no observer. An attempt whose conclusion is
          // committed (a governed operation, or one bound to a durable Run) is told only the outcome that was.
          Effect.onInterrupt(() => {
            const told = attempt.committed ?? (attempt.operation !== undefined || attempt.run_id !== undefined
              ? undefined
              : trustedMake(Cancelled, { ...common(attempt), call_executed: attempt.invoked }))
            return told === undefined ? Effect.void : Effect.asVoid(Effect.forkDaemon(notify(told, attempt.receipt)))
          })
        )
      })

    const plan = (ref: ActionRef) =>
      Effect.map(registry.resolve(ref), (resolved) => compile(resolved.definition, resolved.descriptor).plan)

    return ActionExecutor.of({ profile, execute, plan })
  })

/** The string field names an input schema declares (none, when its type has no property signatures to read). */
const declaredFields = (input: Schema.Schema.Any): ReadonlySet<string> => {
  try {
    return new Set(
      SchemaAST.getPropertySignatures(SchemaAST.typeAST(input.ast)).flatMap((signature) =>
        typeof signature.name === "string" ? [signature.name] : []
      )
    )
  } catch {
    return new Set()
  }
}

const byDeadline: Invoked = { _tag: "stopped", by: "deadline", teardown: "completed" }
const byCancel: Invoked = { _tag: "stopped", by: "cancel", teardown: "completed" }

/** The minimal-profile executor: no Run, no durable evidence, no certificate claim, and it says so. */
export const layerMinimal = (config: Config = {}) => Layer.effect(ActionExecutor, make(config))

/**
 * The durable-ungoverned executor over the StateStore in context: every attempt inside a running Run is committed.
 * With an ExecutorRegistry in context it is registered there while the layer lives, so recovery never takes a Run it
 * is running for one a crash left running.
 */
export const layerDurable = (config: Omit<Config, "state" | "governance"> = {}) =>
  Layer.scoped(
    ActionExecutor,
    Effect.gen(function*() {
      const state = yield* StateStore
      if (!state.durable) {
        return yield* new ProfileUnavailableError({ profile: "durable", detail: "the state store is not durable" })
      }
      const registry = yield* Effect.serviceOption(ExecutorRegistry)
      if (Option.isSome(registry)) yield* registry.value.register
      return yield* make({ ...config, state })
    })
  )
