/**
 * Stages 1-3: resolve the action, normalise and digest its arguments, bind the trusted context, and admit the call
 * (containment, deadline, capacity).
 */
import type { ParseResult } from "effect"
import { Effect, Either, Exit, Schema } from "effect"
import type { ActionDefinition } from "../../../action/Action.ts"
import type { ContainmentKind } from "../../../action/Action.ts"
import type { ActionDescriptor } from "../../../action/ActionDescriptor.ts"
import { type ActionBackendCapabilityReport, remotelyClaimed } from "../../../action/ActionExecutionBackend.ts"
import * as Canonical from "../../../base/Canonical.ts"
import type { Sha256Hex } from "../../../base/Digest.ts"
import { sha256TextWith } from "../../../base/Digest.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import * as StrictJson from "../../../base/StrictJson.ts"
import * as Time from "../../../base/Time.ts"
import type { ContainmentOptIns } from "../../../policy/PermissionPolicy.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import { DecisionReason } from "../../AdmissionDecision.ts"
import type { Admission, Capacity, Lease } from "../../Capacity.ts"
import { ContainmentWaiver, Deferred as Deferral, type ExecutionOutcome, TimedOut } from "../../ExecutionOutcome.ts"
import type { Arguments } from "../../ExecutionRequest.ts"
import * as ExecutionScope from "../../ExecutionScope.ts"
import type { Interceptor } from "../../Interceptor.ts"
import { AdmissionLease } from "../../Preflight.ts"
import { type Call, denied, describeParseError, outcomeWith, reason } from "./call.ts"
import type { Env, ExecutionError } from "./env.ts"
import { type AroundStep, type EffectStep, isOutcome, type State, type SyncStep } from "./table.ts"

/** An action compiled once per executor: its identity, Schema codecs and evaluators. */
export interface Action {
  readonly definition: ActionDefinition
  readonly descriptor: ActionDescriptor
  /** The security evaluators for this action, in stage order: the executor's, after any the action itself declares. */
  readonly interceptors: ReadonlyArray<Interceptor>
  readonly decode: (u: unknown) => Either.Either<unknown, ParseResult.ParseError>
  readonly encode: (a: unknown) => Either.Either<unknown, ParseResult.ParseError>
  readonly encodeOutput: (a: unknown) => Either.Either<unknown, ParseResult.ParseError>
  /** The field names the input schema declares: the only argument keys evidence may name (others are data). */
  readonly fields: ReadonlySet<string>
}

/** After stage 1: the action the call resolved to. */
export interface Resolved extends State {
  readonly action: Action
}

/** After stage 2: the decoded input. */
export interface Normalised extends Resolved {
  input: unknown
}

/** The canonical arguments and their digest, which every security decision is bound to. */
export interface Digested extends Normalised {
  args: Arguments
  digest: Sha256Hex
}

/** A durable call's arguments digest, when they have one (no float). */
export interface Noted extends Normalised {
  args?: Arguments
  digest?: Sha256Hex
}

/** Stage 2 (and 9): decode the arguments by Schema; no handler code runs. */
export const decodeWith = (call: Call, action: Action, args: unknown) => {
  let decoded: ReturnType<Action["decode"]>
  try {
    decoded = action.decode(args)
  } catch {
    return denied(call, "arguments.unreadable", "arguments: a part could not be read (a getter or a proxy threw)")
  }
  return Either.isLeft(decoded)
    ? denied(call, "schema.invalid", describeParseError(decoded.left, "arguments"))
    : { input: decoded.right }
}

/**
 * Stage 2: bound the request's arguments before anything reads them (too deep, too large, an own `__proto__` key:
 * denied naming where), then decode them.
 */
export const normaliseWith = (env: Env): SyncStep<Resolved, { input: unknown }> => {
  const limits = env.argumentLimits
  return {
    _tag: "Sync",
    stage: "normalise",
    detail: `bound the arguments (${limits.maxDepth} levels, size ${limits.maxSize}, no __proto__ key), ` +
      "then decode them with the action's input Schema",
    run: ({ action, call }) => {
      const args = call.request.arguments
      const refused = StrictJson.violation(args, limits)
      return refused === undefined
        ? decodeWith(call, action, args)
        : denied(call, `arguments.${refused.reason}`, `arguments${refused.path.slice(1)}: ${refused.detail}`)
    }
  }
}

// The canonical text of the decoded input, or the denial that it has none.
const canonicalText = (state: Normalised) => {
  const encoded = state.action.encode(state.input)
  if (Either.isLeft(encoded)) {
    return denied(state.call, "schema.invalid", describeParseError(encoded.left, "arguments"))
  }
  const text = Canonical.stringify(encoded.right)
  if (Either.isLeft(text)) {
    return denied(state.call, "arguments.not_canonical", `arguments${text.left.path.slice(1)}: ${text.left.reason}`)
  }
  return { args: encoded.right as Arguments, text: text.right }
}

const digestDetail = "bind the arguments to the SHA-256 of their canonical JSON"

/** Stage 2 (and 9): the digest every decision binds to, synchronously where the Digest layer hashes synchronously. */
export const digestWith = (env: Env): SyncStep<Normalised, Digested> | EffectStep<Normalised, Digested> => {
  const sync = env.digest.sha256TextSync
  if (sync !== undefined) {
    return {
      _tag: "Sync",
      stage: "normalise",
      detail: digestDetail,
      run: (state) => {
        const canonical = canonicalText(state)
        return "text" in canonical ? { args: canonical.args, digest: sync(canonical.text) } as Digested : canonical
      }
    }
  }
  return {
    _tag: "Effect",
    stage: "normalise",
    detail: digestDetail,
    run: (state) => {
      const canonical = canonicalText(state)
      if (!("text" in canonical)) return Effect.succeed(canonical)
      return Effect.map(
        sha256TextWith(env.digest, canonical.text),
        (digest) => ({ args: canonical.args, digest }) as Digested
      )
    }
  }
}

/** Stage 2, durable without evaluators: the arguments' digest when they have one; a call without one still runs. */
export const noteDigestWith = (env: Env): EffectStep<Normalised, { args?: Arguments; digest?: Sha256Hex }> => {
  const digest = digestWith(env)
  return {
    _tag: "Effect",
    stage: "normalise",
    detail: "note the SHA-256 of the arguments' canonical JSON, when they have one",
    run: (state) => {
      const answer = digest._tag === "Sync" ? Effect.succeed(digest.run(state)) : digest.run(state)
      return Effect.map(answer, (noted) => isOutcome(noted) ? {} : noted)
    }
  }
}

/** Stage 3: bind the trusted context to the request; scope, principal and backend must agree. */
export const bindContextWith = (env: Env, runs: boolean, creates: boolean): SyncStep<Normalised, void> => ({
  _tag: "Sync",
  stage: "bind_context",
  detail: "bind the trusted context: scope, principal claim and backend must agree",
  run: ({ call }) => {
    const { context, request } = call
    if (!ExecutionScope.equals(request.execution_scope, context.execution_scope)) {
      return denied(call, "context.scope_mismatch", "the request's scope is not the context's scope")
    }
    if ("operation_context" in request.metadata) {
      return denied(call, "context.operation_context_supplied", "an operation context is derived, never supplied")
    }
    if (request.principal_claim !== undefined && request.principal_claim.id !== context.authenticated_principal.id) {
      return denied(call, "context.principal_mismatch", "the principal claim is not the authenticated principal")
    }
    if (request.execution_scope._tag === "durable_run" && !runs) {
      return denied(call, "scope.run_unavailable", `the ${env.profile} profile has no Run repository`)
    }
    if (call.newRun !== undefined && !creates) {
      return denied(call, "scope.run_unavailable", `the ${env.profile} profile creates no Run`)
    }
    if (call.newRun !== undefined && request.execution_scope._tag === "durable_run") {
      return denied(call, "scope.run_conflict", "a call inside a Run cannot also open a new one")
    }
    if (request.execution_scope._tag === "ephemeral_operation" && creates && call.newRun === undefined) {
      return denied(call, "scope.run_required", "the durable profile executes inside a Run")
    }
    if (
      context.effect_backend.id !== env.backend.ref.id || context.effect_backend.version !== env.backend.ref.version
    ) {
      return denied(call, "context.backend_mismatch", `the executor's backend is ${env.backend.ref.id}`)
    }
  }
})

/**
 * Why the backend cannot run the action as it requires: it cannot run it at all, or cannot contain it. A required
 * kind it does not enforce is waived only where the policy's opt-ins (governed) say so: covered by a `remote` claim
 * the policy accepts, or optional under the policy (degraded); the call then carries the waiver.
 */
export const containmentRefusal = (
  env: Env,
  call: Call,
  action: Action,
  report: ActionBackendCapabilityReport,
  optIns?: ContainmentOptIns
): ExecutionOutcome | undefined => {
  const unrunnable = env.backend.admits?.(action.definition)
  if (unrunnable !== undefined) return denied(call, "containment.unsupported", `${report.backend.id}: ${unrunnable}`)
  const missing: Array<ContainmentKind> = []
  const degraded: Array<ContainmentKind> = []
  const remote: Array<ContainmentKind> = []
  for (const kind of action.definition.containment) {
    if (report.containment[kind] === "enforced") continue
    if (optIns?.remote_claims?.includes(kind) === true && remotelyClaimed(report, kind)) remote.push(kind)
    else if (optIns?.degrade?.includes(kind) === true) degraded.push(kind)
    else missing.push(kind)
  }
  if (missing.length > 0) {
    return denied(call, "containment.unsupported", `${report.backend.id} cannot contain ${missing.join(", ")}`)
  }
  if (degraded.length > 0 || remote.length > 0) {
    const waiver: { -readonly [K in keyof ContainmentWaiver]: ContainmentWaiver[K] } = {}
    if (degraded.length > 0) waiver.degraded = degraded.sort()
    if (remote.length > 0) waiver.remote_claims = remote.sort()
    call.containment = trustedMake(ContainmentWaiver, waiver)
  }
  return undefined
}

/** Whether stage 3 must probe the backend for an action: it requires containment, or the backend runs only some. */
export const probed = (env: Env, action: Action) =>
  action.definition.containment.length > 0 || env.backend.admits !== undefined

/**
 * Stage 3: the backend must run the action and prove every kind of containment it requires, or the executor's
 * configured opt-ins waive it.
 */
export const containmentWith = (env: Env): EffectStep<Resolved, void> => ({
  _tag: "Effect",
  stage: "bind_context",
  detail: "probe the backend for the containment the action requires",
  run: ({ action, call }) =>
    Effect.map(env.backend.probe, (report) => containmentRefusal(env, call, action, report, env.containment))
})

/** Stage 3: deadline admission; a deadline already past concludes before the callable. */
export const deadline: EffectStep<State, void> = {
  _tag: "Effect",
  stage: "bind_context",
  detail: "deadline admission",
  skip: ({ call }) => call.request.deadline === undefined,
  run: ({ call }) => {
    const deadline = call.request.deadline
    if (deadline === undefined) return Effect.succeed(undefined)
    return Effect.map(
      Time.nowMicros,
      (now) =>
        now >= Time.toMicros(deadline)
          ? outcomeWith(TimedOut, call, { call_executed: false })
          : undefined
    )
  }
}

const isDeferral = Schema.is(Schema.Struct({
  code: DecisionReason.fields.code,
  detail: Schema.optional(Schema.String),
  retry_at: Schema.optional(Time.Timestamp)
}))

const isLease = Schema.is(Schema.Struct({
  lease_id: Schema.optional(Schema.String),
  expires_at: Schema.optional(Time.Timestamp),
  release: Schema.declare((value): value is Effect.Effect<void> => Effect.isEffect(value))
}))

// A lease's release is user code too: its failure cannot undo the call's outcome.
const release = (lease: Lease) => Effect.catchAllCause(Effect.suspend(() => lease.release), () => Effect.void)

// The capacities that bound a call, or the id of the first whose `applies` (user code) threw.
const boundingOf = (capacities: ReadonlyArray<Capacity>, admission: Admission): ReadonlyArray<Capacity> | string => {
  const bounding: Array<Capacity> = []
  for (const capacity of capacities) {
    try {
      if (capacity.applies === undefined || capacity.applies(admission) === true) bounding.push(capacity)
    } catch {
      return capacity.id
    }
  }
  return bounding
}

/**
 * Stage 3: a lease on every capacity, held while the rest of the call runs, or the deferral of the first one that is
 * full; the leases taken are released however the call ends, an admission that dies included, and never before its
 * callable has stopped.
 */
const noLeases: ReadonlyArray<AdmissionLease> = Object.freeze([])

// A lease that expires before the call's deadline brings the deadline forward to its expiry.
const lapses = (call: Call, lease: Lease) => {
  const expires = lease.expires_at
  if (expires !== undefined && (call.deadline === undefined || Time.toMicros(expires) < Time.toMicros(call.deadline))) {
    call.deadline = expires
  }
}

// Stage 3's leases, taken in turn on each bounding capacity into `leases` (released by the caller however the call
// ends), or the outcome of the first that defers or fails; then the rest of the call, interruptible again.
const leaseAll = Effect.fnUntraced(function*<S extends Resolved>(
  state: S,
  bounding: ReadonlyArray<Capacity>,
  admission: Admission,
  leases: Array<Lease>,
  inner: (state: S & { leases: ReadonlyArray<AdmissionLease> }) => Effect.Effect<ExecutionOutcome, ExecutionError>,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
) {
  const held: Array<AdmissionLease> = []
  for (const capacity of bounding) {
    // A capacity is user code: whatever it throws, fails with or answers that is not an Either refuses the call.
    const exit = yield* Effect.exit(Effect.suspend(() => capacity.admit(admission)))
    const admitted = Exit.isSuccess(exit) && Either.isEither(exit.value) &&
        (Either.isRight(exit.value) ? isLease(exit.value.right) : isDeferral(exit.value.left))
      ? exit.value
      : undefined
    if (admitted === undefined) {
      return denied(state.call, "control.capacity_error", `capacity ${capacity.id} failed to admit the call`)
    }
    if (Either.isLeft(admitted)) {
      const { code, detail, retry_at } = admitted.left
      return outcomeWith(Deferral, state.call, {
        reason: reason(code, detail),
        ...(retry_at === undefined ? {} : { retry_at })
      })
    }
    leases.push(admitted.right)
    lapses(state.call, admitted.right)
    if (admitted.right.admissions !== undefined) (state.call.admissions ??= []).push(admitted.right.admissions)
    held.push(trustedMake(AdmissionLease, {
      capacity: capacity.id,
      lease_id: admitted.right.lease_id ?? null,
      expires_at: admitted.right.expires_at ?? null
    }))
  }
  return yield* restore(inner(Object.assign(state, { leases: held })))
})

export const capacityWith = (
  env: Env
): AroundStep<Resolved & { readonly snapshot?: PolicySnapshot }, { leases: ReadonlyArray<AdmissionLease> }> => ({
  _tag: "Around",
  stage: "bind_context",
  detail: `a lease on each capacity (${env.capacities.map((capacity) => capacity.id).join(", ")}), or defer`,
  run: (state, inner) => {
    const admission = {
      request: state.call.request,
      context: state.call.context,
      descriptor: state.action.descriptor,
      attempt_id: state.call.attempt_id,
      ...(state.snapshot === undefined ? {} : { snapshot: state.snapshot })
    }
    const bounding = boundingOf(env.capacities, admission)
    if (typeof bounding === "string") {
      return Effect.succeed(
        denied(state.call, "control.capacity_error", `capacity ${bounding} failed to decide whether it applies`)
      )
    }
    if (bounding.length === 0) return inner(Object.assign(state, { leases: noLeases }))
    return Effect.uninterruptibleMask((restore) => {
      const leases: Array<Lease> = []
      return leaseAll(state, bounding, admission, leases, inner, restore).pipe(Effect.ensuring(Effect.suspend(() => {
        // A callable the executor stopped waiting for holds its leases until it has stopped; the outcome goes on.
        const releaseAll = Effect.forEach(leases, release, { discard: true })
        const stopping = state.call.stopping
        return stopping === undefined
          ? releaseAll
          : Effect.asVoid(Effect.forkDaemon(Effect.zipRight(stopping, releaseAll)))
      })))
    })
  }
})
