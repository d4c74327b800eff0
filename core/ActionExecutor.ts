/**
 * The ActionExecutor: the only route to an action's callable. Each execution runs the compiled
 * plan's fourteen stages in the seed's order and concludes in exactly one typed outcome.
 */
import { Context, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, ParseResult, Schema } from "effect"
import type { ActionDefinition, CapturedFailure } from "./Action.ts"
import type { ActionDescriptor } from "./ActionDescriptor.ts"
import { ActionExecutionBackend } from "./ActionExecutionBackend.ts"
import type { ActionExecutionPlan } from "./ActionExecutionPlan.ts"
import { compileMinimal } from "./ActionExecutionPlan.ts"
import type { ActionNotFoundError } from "./ActionRegistry.ts"
import { ActionRegistry } from "./ActionRegistry.ts"
import type { Disposition } from "./AdmissionDecision.ts"
import { ActionAdmissionDecision, DecisionReason } from "./AdmissionDecision.ts"
import * as Canonical from "./Canonical.ts"
import { Digest } from "./Digest.ts"
import type { Sha256Hex } from "./Digest.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import {
  Cancelled,
  Deferred as DeferredOutcome,
  Denied,
  Escalated,
  type ExecutionOutcome,
  Failed,
  FailureSummary,
  Recheck,
  Succeeded,
  TimedOut
} from "./ExecutionOutcome.ts"
import type { Arguments, ExecutionRequest } from "./ExecutionRequest.ts"
import * as ExecutionScope from "./ExecutionScope.ts"
import { IdGenerator } from "./IdGenerator.ts"
import type { Uuid } from "./IdGenerator.ts"
import type { Concluded, Evaluation, Interceptor, Observer, Transformer, Verdict } from "./Interceptor.ts"
import { mint } from "./internal/token.ts"
import type { InvocationTokenError } from "./InvocationTokenError.ts"
import { ActionRef } from "./Refs.ts"
import type { RuntimeProfile } from "./RuntimeProfile.ts"
import type { Stage } from "./Stage.ts"
import * as Time from "./Time.ts"

/** One execution's options: the trusted context, and a Deferred whose completion cancels it. */
export interface ExecuteOptions {
  readonly context: ExecutionContext
  readonly cancel?: Deferred.Deferred<void>
}

/** Executes actions; the only route to their callables. */
export class ActionExecutor extends Context.Tag("writ/ActionExecutor")<ActionExecutor, ActionExecutor.Service>() {}

/** The ActionExecutor service. */
export declare namespace ActionExecutor {
  /** Execute a request, or show the plan an action would run. */
  export interface Service {
    readonly profile: RuntimeProfile
    readonly execute: (request: ExecutionRequest, options: ExecuteOptions) => Effect.Effect<ExecutionOutcome>
    readonly plan: (ref: ActionRef) => Effect.Effect<ActionExecutionPlan, ActionNotFoundError>
  }
}

/** What a minimal-profile executor is built with. */
export interface Config {
  readonly interceptors?: ReadonlyArray<Interceptor>
  readonly transformers?: ReadonlyArray<Transformer>
  readonly observers?: ReadonlyArray<Observer>
  /** How long an interrupted callable may take to tear down before the executor stops waiting. */
  readonly teardown?: Duration.DurationInput
}

interface Compiled {
  readonly definition: ActionDefinition
  readonly descriptor: ActionDescriptor
  readonly plan: ActionExecutionPlan
  readonly ref: ActionRef
  readonly decode: (u: unknown) => Effect.Effect<unknown, ParseResult.ParseError>
  readonly encode: (a: unknown) => Effect.Effect<unknown, ParseResult.ParseError>
  readonly encodeOutput: (a: unknown) => Effect.Effect<unknown, ParseResult.ParseError>
}

interface Attempt {
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly attempt_id: Uuid
  action: ActionRef
  stage: Stage
  compiled?: Compiled
  input?: unknown
  args?: Arguments
  digest?: Sha256Hex
  decisions: Array<ActionAdmissionDecision>
  recheck?: Recheck
  invoked: boolean
}

class Conclusion {
  constructor(readonly outcome: ExecutionOutcome) {}
}

type Invoked =
  | { readonly _tag: "exit"; readonly exit: Exit.Exit<unknown, CapturedFailure | InvocationTokenError> }
  | { readonly _tag: "stopped"; readonly by: "deadline" | "cancel"; readonly teardown: "completed" | "abandoned" }

const noDecisions: ReadonlyArray<ActionAdmissionDecision> = Object.freeze([])
const trusted = { disableValidation: true } as const
const securityStages = ["authorise", "guard", "policy"] as const

const common = (attempt: Attempt) => ({
  request_id: attempt.request.request_id,
  attempt_id: attempt.attempt_id,
  action: attempt.action,
  profile: "minimal" as const,
  stage: attempt.stage,
  decisions: attempt.decisions.length === 0 ? noDecisions : attempt.decisions,
  ...(attempt.recheck === undefined ? {} : { recheck: attempt.recheck })
})

const reason = (code: string, detail?: string) =>
  new DecisionReason(detail === undefined ? { code } : { code, detail }, trusted)

const conclude = (outcome: ExecutionOutcome) => Effect.fail(new Conclusion(outcome))

const deny = (attempt: Attempt, code: string, detail?: string) =>
  conclude(new Denied({ ...common(attempt), reason: reason(code, detail) }, trusted))

const outcomeOf = (attempt: Attempt, disposition: Exclude<Disposition, "allow">, decision: ActionAdmissionDecision) => {
  switch (disposition) {
    case "deny":
      return new Denied({ ...common(attempt), reason: decision.reason }, trusted)
    case "defer":
      return new DeferredOutcome({
        ...common(attempt),
        reason: decision.reason,
        ...(decision.retry_at === undefined ? {} : { retry_at: decision.retry_at })
      }, trusted)
    case "escalate":
      return new Escalated({ ...common(attempt), reason: decision.reason }, trusted)
  }
}

const describeParseError = (error: ParseResult.ParseError, root: string): string => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  if (issue === undefined) return root
  const path = issue.path.length === 0 ? root : `${root}.${issue.path.join(".")}`
  const what = issue._tag === "Missing"
    ? "is missing"
    : issue._tag === "Unexpected"
    ? "is not an accepted field"
    : issue.message.replace(/, actual .*$/s, "")
  return `${path}: ${what}`
}

/** Build a minimal-profile executor over the registry, backend, digest and id generator in context. */
export const makeMinimal = (config: Config = {}) =>
  Effect.gen(function*() {
    const registry = yield* ActionRegistry
    const backend = yield* ActionExecutionBackend
    const digest = yield* Digest
    const ids = yield* IdGenerator
    const interceptors = [...(config.interceptors ?? [])].sort(
      (a, b) => securityStages.indexOf(a.stage) - securityStages.indexOf(b.stage)
    )
    const transformers = [...(config.transformers ?? [])]
    const observers = [...(config.observers ?? [])]
    const teardown = Duration.decode(config.teardown ?? Duration.seconds(1))
    const needsDigest = interceptors.length > 0 || transformers.length > 0
    const compiledPlans = new WeakMap<ActionDefinition, Compiled>()

    const compile = (definition: ActionDefinition, descriptor: ActionDescriptor): Compiled => {
      const cached = compiledPlans.get(definition)
      if (cached !== undefined) return cached
      const compiled: Compiled = Object.freeze({
        definition,
        descriptor,
        plan: compileMinimal({ descriptor, backend: backend.ref, interceptors, transformers }),
        ref: new ActionRef({ name: definition.name, version: definition.version }, trusted),
        decode: Schema.decodeUnknown(definition.input, { onExcessProperty: "error" }),
        encode: Schema.encodeUnknown(definition.input),
        encodeOutput: Schema.encodeUnknown(definition.output)
      })
      compiledPlans.set(definition, compiled)
      return compiled
    }

    const resolve = Effect.fnUntraced(function*(attempt: Attempt) {
      const resolved = yield* Effect.either(registry.resolve(attempt.request.action))
      if (Either.isLeft(resolved)) return yield* deny(attempt, "action.not_found", resolved.left.message)
      attempt.compiled = compile(resolved.right.definition, resolved.right.descriptor)
      attempt.action = attempt.compiled.ref
      return attempt.compiled
    })

    const normalise = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled, args: unknown) {
      const decoded = yield* Effect.either(compiled.decode(args))
      if (Either.isLeft(decoded)) {
        return yield* deny(attempt, "schema.invalid", describeParseError(decoded.left, "arguments"))
      }
      attempt.input = decoded.right
      if (!needsDigest) return
      const encoded = yield* Effect.either(compiled.encode(decoded.right))
      if (Either.isLeft(encoded)) {
        return yield* deny(attempt, "schema.invalid", describeParseError(encoded.left, "arguments"))
      }
      const text = Canonical.stringify(encoded.right)
      if (Either.isLeft(text)) {
        return yield* deny(attempt, "arguments.not_canonical", `${text.left.path}: ${text.left.reason}`)
      }
      attempt.args = encoded.right as Arguments
      attempt.digest = yield* digest.sha256(new TextEncoder().encode(text.right))
    })

    const bindContext = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      const { context, request } = attempt
      if (!ExecutionScope.equals(request.execution_scope, context.execution_scope)) {
        return yield* deny(attempt, "context.scope_mismatch", "the request's scope is not the context's scope")
      }
      if (request.principal_claim !== undefined && request.principal_claim.id !== context.authenticated_principal.id) {
        return yield* deny(
          attempt,
          "context.principal_mismatch",
          "the principal claim is not the authenticated principal"
        )
      }
      if (request.execution_scope._tag === "durable_run") {
        return yield* deny(attempt, "scope.run_unavailable", "the minimal profile has no Run repository")
      }
      if (context.effect_backend.id !== backend.ref.id || context.effect_backend.version !== backend.ref.version) {
        return yield* deny(attempt, "context.backend_mismatch", `the executor's backend is ${backend.ref.id}`)
      }
      if (compiled.definition.containment.length > 0) {
        const report = yield* backend.probe
        const missing = compiled.definition.containment.filter((kind) => report.containment[kind] !== "enforced")
        if (missing.length > 0) {
          return yield* deny(
            attempt,
            "containment.unsupported",
            `${report.backend.id} cannot contain ${missing.join(", ")}`
          )
        }
      }
      if (request.deadline !== undefined && (yield* Time.nowMicros) >= Time.toMicros(request.deadline)) {
        return yield* conclude(new TimedOut({ ...common(attempt), call_executed: false }, trusted))
      }
    })

    const evaluation = (attempt: Attempt): Evaluation => ({
      request: attempt.request,
      context: attempt.context,
      descriptor: attempt.compiled!.descriptor,
      arguments: attempt.args!,
      arguments_digest: attempt.digest!
    })

    const decide = Effect.fnUntraced(function*(attempt: Attempt, interceptor: Interceptor, stage: Stage) {
      const exit = yield* Effect.exit(interceptor.evaluate(evaluation(attempt)))
      const verdict: Verdict = Exit.isSuccess(exit)
        ? exit.value
        : { disposition: "deny", code: "control.evaluator_error" }
      const decision = new ActionAdmissionDecision({
        disposition: verdict.disposition,
        reason: reason(verdict.code, verdict.detail),
        evaluator: interceptor.id,
        stage,
        arguments_digest: attempt.digest!,
        ...(verdict.retry_at === undefined ? {} : { retry_at: verdict.retry_at })
      }, trusted)
      attempt.decisions.push(decision)
      if (verdict.disposition !== "allow") return yield* conclude(outcomeOf(attempt, verdict.disposition, decision))
    })

    const authorise = Effect.fnUntraced(function*(attempt: Attempt, stage: Stage) {
      for (const interceptor of interceptors) {
        if (stage !== "recheck") attempt.stage = interceptor.stage
        yield* decide(attempt, interceptor, stage === "recheck" ? stage : interceptor.stage)
      }
    })

    const transform = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled) {
      attempt.stage = "transform"
      const before = attempt.digest!
      let args = attempt.args!
      for (const transformer of transformers) {
        const exit = yield* Effect.exit(transformer.transform({ ...evaluation(attempt), arguments: args }))
        if (Exit.isFailure(exit)) {
          return yield* deny(attempt, "transform.failed", `transformer ${transformer.id} failed`)
        }
        args = exit.value
      }
      attempt.stage = "revalidate"
      yield* normalise(attempt, compiled, args)
      attempt.stage = "recheck"
      if (attempt.digest === before) {
        attempt.recheck = new Recheck({
          ran: false,
          reason: "arguments_unchanged",
          evaluators: [],
          digest_before: before,
          digest_after: before
        }, trusted)
        return
      }
      attempt.recheck = new Recheck({
        ran: true,
        reason: "arguments_changed",
        evaluators: interceptors.map((interceptor) => interceptor.id),
        digest_before: before,
        digest_after: attempt.digest!
      }, trusted)
      yield* authorise(attempt, "recheck")
    })

    const invoke = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled, cancel?: Deferred.Deferred<void>) {
      attempt.stage = "invoke"
      if (cancel !== undefined && (yield* Deferred.isDone(cancel))) {
        return yield* conclude(new Cancelled({ ...common(attempt), call_executed: false }, trusted))
      }
      const call = backend.invoke(mint(compiled.definition), {
        definition: compiled.definition,
        input: attempt.input,
        context: { request_id: attempt.request.request_id, attempt_id: attempt.attempt_id }
      })
      const deadline = attempt.request.deadline
      attempt.invoked = true
      if (deadline === undefined && cancel === undefined) {
        return { _tag: "exit", exit: yield* Effect.exit(call) } satisfies Invoked as Invoked
      }
      const fiber = yield* Effect.forkDaemon(call)
      const racers: Array<Effect.Effect<Invoked>> = [
        Effect.map(Fiber.await(fiber), (exit): Invoked => ({ _tag: "exit", exit }))
      ]
      if (deadline !== undefined) {
        const remaining = Time.toMicros(deadline) - (yield* Time.nowMicros)
        racers.push(Effect.as(Effect.sleep(Duration.micros(BigInt(Math.max(0, remaining)))), timedOutMarker))
      }
      if (cancel !== undefined) racers.push(Effect.as(Deferred.await(cancel), cancelledMarker))
      const first = yield* Effect.raceAll(racers).pipe(Effect.onInterrupt(() => Fiber.interruptFork(fiber)))
      if (first._tag === "exit") return first
      const stopped = yield* Effect.timeout(Fiber.interrupt(fiber), teardown).pipe(Effect.either)
      return {
        _tag: "stopped",
        by: first.by,
        teardown: Either.isRight(stopped) ? "completed" : "abandoned"
      } satisfies Invoked as Invoked
    })

    const outcome = Effect.fnUntraced(function*(attempt: Attempt, compiled: Compiled, invoked: Invoked) {
      if (invoked._tag === "stopped") {
        const fields = { ...common(attempt), call_executed: true, teardown: invoked.teardown }
        return invoked.by === "deadline" ? new TimedOut(fields, trusted) : new Cancelled(fields, trusted)
      }
      attempt.stage = "outcome"
      const exit = invoked.exit
      if (Exit.isSuccess(exit)) {
        const encoded = yield* Effect.either(compiled.encodeOutput(exit.value))
        return Either.isRight(encoded)
          ? new Succeeded({ ...common(attempt), result: encoded.right }, trusted)
          : new Failed({
            ...common(attempt),
            failure: new FailureSummary(
              { code: "output.invalid", message: describeParseError(encoded.left, "result") },
              trusted
            )
          }, trusted)
      }
      return failureOutcome(attempt, exit)
    })

    const failureOutcome = (attempt: Attempt, exit: Exit.Failure<unknown, CapturedFailure | InvocationTokenError>) => {
      const cause = exit.cause
      if (cause._tag === "Fail") {
        const error = cause.error
        if ("_tag" in error && error._tag === "InvocationTokenError") {
          attempt.invoked = false
          return new Denied({ ...common(attempt), reason: reason("invoke.token_refused", error.reason) }, trusted)
        }
        return new Failed(
          { ...common(attempt), failure: new FailureSummary(error as CapturedFailure, trusted) },
          trusted
        )
      }
      return new Cancelled({ ...common(attempt), call_executed: true }, trusted)
    }

    const notify = (outcome: ExecutionOutcome) => {
      if (observers.length === 0) return Effect.void
      const event: Concluded = { _tag: "concluded", outcome }
      return Effect.forEach(observers, (observer) => Effect.exit(observer.observe(event)), { discard: true })
    }

    const run = Effect.fnUntraced(function*(attempt: Attempt, cancel?: Deferred.Deferred<void>) {
      const compiled = yield* resolve(attempt)
      attempt.stage = "normalise"
      yield* normalise(attempt, compiled, attempt.request.arguments)
      attempt.stage = "bind_context"
      yield* bindContext(attempt, compiled)
      if (interceptors.length > 0) yield* authorise(attempt, "authorise")
      if (transformers.length > 0) yield* transform(attempt, compiled)
      else if (needsDigest) {
        attempt.recheck = new Recheck({ ran: false, reason: "no_transformation", evaluators: [] }, trusted)
      }
      const invoked = yield* invoke(attempt, compiled, cancel)
      return yield* outcome(attempt, compiled, invoked)
    })

    const execute = Effect.fn("ActionExecutor.execute")(function*(request: ExecutionRequest, options: ExecuteOptions) {
      const attempt: Attempt = {
        request,
        context: options.context,
        attempt_id: yield* ids.uuid,
        action: request.action,
        stage: "resolve",
        decisions: [],
        invoked: false
      }
      const result = yield* run(attempt, options.cancel).pipe(
        Effect.catchAll((conclusion: Conclusion) => Effect.succeed(conclusion.outcome)),
        Effect.onInterrupt(() => notify(new Cancelled({ ...common(attempt), call_executed: attempt.invoked }, trusted)))
      )
      yield* notify(result)
      return result
    })

    const plan = (ref: ActionRef) =>
      Effect.map(registry.resolve(ref), (resolved) => compile(resolved.definition, resolved.descriptor).plan)

    return ActionExecutor.of({ profile: "minimal", execute, plan })
  })

const timedOutMarker: Invoked = { _tag: "stopped", by: "deadline", teardown: "completed" }
const cancelledMarker: Invoked = { _tag: "stopped", by: "cancel", teardown: "completed" }

/** The minimal-profile executor: no Run, no durable evidence, no certificate claim, and it says so. */
export const layerMinimal = (config: Config = {}) => Layer.effect(ActionExecutor, makeMinimal(config))
