/**
 * Stages 12 and 13: replay a stored success or release a one-use token and invoke exactly once, under the deadline
 * and cancellation; then normalise the callable's exit into an outcome.
 */
import { Cause, Deferred, Duration, Effect, Either, Exit, Fiber, identity, Option } from "effect"
import { captureFailure } from "../../../action/Action.ts"
import type { ActionBackendError } from "../../../action/ActionExecutionBackend.ts"
import type * as ActionUsage from "../../../action/ActionUsage.ts"
import { isIssued } from "../../../action/internal/backendFailure.ts"
import { refusing, stager } from "../../../action/internal/outbox.ts"
import { isRefusal, mint } from "../../../action/internal/token.ts"
import { meter, unmetered } from "../../../action/internal/usage.ts"
import type { InvocationTokenError } from "../../../action/InvocationTokenError.ts"
import * as Canonical from "../../../base/Canonical.ts"
import type { Sha256Hex } from "../../../base/Digest.ts"
import { Digest, sha256TextWith } from "../../../base/Digest.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import * as Time from "../../../base/Time.ts"
import * as FilesystemGrant from "../../../policy/FilesystemGrant.ts"
import * as NetworkGrant from "../../../policy/NetworkGrant.ts"
import type { ExecutionOutcome } from "../../ExecutionOutcome.ts"
import { Ambiguous, Cancelled, Failed, FailureSummary, Succeeded, TimedOut } from "../../ExecutionOutcome.ts"
import type { IdempotencyStore } from "../../IdempotencyStore.ts"
import { keyOf } from "../../IdempotencyStore.ts"
import type { Interceptor } from "../../Interceptor.ts"
import type { Normalised } from "./admit.ts"
import { digestWith } from "./admit.ts"
import { type Call, denied, describeParseError, outcomeWith, reason } from "./call.ts"
import type { Env, ExecutionError } from "./env.ts"
import type { Pinned } from "./preflight.ts"
import { type AroundStep, type EffectStep, isOutcome, type SyncStep } from "./table.ts"

/** After stage 12: how the one invocation ended. */
export interface Invoked extends Normalised {
  readonly exit: Exit.Exit<unknown, unknown>
}

type Stopped = { readonly _tag: "exit"; readonly exit: Exit.Exit<unknown, unknown> } | {
  readonly _tag: "stopped"
  readonly by: "deadline" | "cancel"
}

const byDeadline: Stopped = { _tag: "stopped", by: "deadline" }
const byCancel: Stopped = { _tag: "stopped", by: "cancel" }

/**
 * A value as an injective tree of tagged strings, which canonical JSON always takes: the idempotency binding of
 * arguments that have no canonical digest (a float), in a domain no canonical digest of an arguments object shares.
 */
const tagged = (value: unknown): unknown => {
  if (typeof value === "number") return ["n", Object.is(value, -0) ? "-0" : String(value)]
  if (typeof value === "string") return ["s", value]
  if (Array.isArray(value)) return ["a", ...value.map(tagged)]
  if (typeof value === "object" && value !== null) {
    const entries = value as Record<string, unknown>
    return ["o", ...Object.keys(entries).sort().map((key) => [key, tagged(entries[key])])]
  }
  return ["v", value ?? null]
}

/**
 * The digest a call's idempotency entry is bound to: the one its security stages decided on, else its canonical
 * digest, else (arguments canonical JSON refuses, such as a float) the digest of their tagged form.
 */
const argumentsDigestWith = (env: Env) => {
  const digest = digestWith(env)
  const fallback = (state: Normalised, refused: ExecutionOutcome) => {
    const encoded = state.action.encode(state.input)
    const text = Either.isRight(encoded) ? Canonical.stringify(tagged(encoded.right)) : undefined
    return text === undefined || Either.isLeft(text)
      ? Effect.succeed(refused)
      : Effect.orDie(sha256TextWith(env.digest, text.right))
  }
  return (state: Normalised): Effect.Effect<Sha256Hex | ExecutionOutcome, ExecutionError> => {
    if ("digest" in state && typeof state.digest === "string") return Effect.succeed(state.digest as Sha256Hex)
    const digested = digest._tag === "Sync" ? Effect.succeed(digest.run(state)) : digest.run(state)
    return Effect.flatMap(
      digested,
      (answer): Effect.Effect<Sha256Hex | ExecutionOutcome> =>
        isOutcome(answer) ? fallback(state, answer) : Effect.succeed(answer.digest)
    )
  }
}

/**
 * After every security stage allowed the call: replay the stored success of this caller's key when it was called
 * with the same arguments, refuse the key when it was called with others, or invoke and store.
 */
export const idempotentWith = (env: Env, store: IdempotencyStore.Service): AroundStep<Normalised, unknown> => {
  const argumentsDigest = argumentsDigestWith(env)
  const replayOrInvoke = Effect.fnUntraced(function*<S extends Normalised>(
    state: S,
    inner: (state: S) => Effect.Effect<ExecutionOutcome, ExecutionError>
  ) {
    const call = state.call
    const idempotency_key = call.request.idempotency_key
    if (idempotency_key === undefined) return yield* inner(state)
    const digest = yield* argumentsDigest(state)
    if (typeof digest !== "string") return digest
    const key = yield* Effect.orDie(
      Effect.provideService(keyOf(call.context, call.action, idempotency_key), Digest, env.digest)
    )
    const stored = yield* store.get(key)
    if (Option.isSome(stored)) {
      const { arguments_digest, outcome } = stored.value
      if (arguments_digest !== digest) {
        return denied(
          call,
          "idempotency.key_reused",
          `the idempotency key was used with arguments ${arguments_digest}, not ${digest}`
        )
      }
      return outcomeWith(Succeeded, call, { result: outcome.result, replay_of: outcome.attempt_id })
    }
    const outcome = yield* inner(state)
    if (outcome._tag === "succeeded") yield* store.put(key, { arguments_digest: digest, outcome })
    return outcome
  })
  return {
    _tag: "Around",
    stage: "invoke",
    detail: "replay the stored success of this caller's idempotency key and arguments, or invoke and store it",
    skip: ({ call }) => call.request.idempotency_key === undefined,
    run: replayOrInvoke
  }
}

/** The invocation's exit; a token the backend refused means the callable was not reached, so nothing is charged for it. */
const ended = (state: Normalised, exit: Exit.Exit<unknown, unknown>) => {
  if (refusalOf(exit) !== undefined) state.call.invoked = false
  return { exit }
}

/** The token refusal an exit failed with, if it did. */
const refusalOf = (exit: Exit.Exit<unknown, unknown>): InvocationTokenError | undefined =>
  Exit.isFailure(exit)
    ? Option.getOrUndefined(Cause.failureOption(exit.cause).pipe(Option.filter(isRefusal)))
    : undefined

/**
 * Interrupt the callable's fiber and wait for its teardown at most `bound`: whether it finished in time. The wait runs
 * on a fiber of its own, so the bound holds even in the finalizer of an interrupted caller. A callable still stopping
 * after it is left to the call's `stopping`, which its leases wait for before they are released.
 */
const stopWithin = (call: Call, fiber: Fiber.RuntimeFiber<unknown, unknown>, bound: Duration.Duration) =>
  Effect.flatMap(
    Effect.forkDaemon(Effect.interruptible(Effect.isSuccess(Effect.timeout(Fiber.interrupt(fiber), bound)))),
    (waiting) =>
      Effect.tap(Fiber.join(waiting), (stopped) => {
        if (!stopped) call.stopping = Effect.asVoid(Fiber.await(fiber))
      })
  )

// The backend's answer: the Exit of a callable it ran at once, else the Effect that runs it.
const backendAnswer = (
  env: Env,
  stages: boolean,
  state: Normalised,
  usage: ActionUsage.ActionUsage.Service
): Effect.Effect<unknown, unknown> => {
  const outbox = stages ? (state.call.outbox = stager()) : undefined
  let invoked: Effect.Effect<unknown, unknown>
  // A governed call carries the snapshot stage 3 pinned: what it may connect to and touch comes from that policy.
  const pinned = (state as Partial<Pinned>).snapshot
  const filesystem = pinned === undefined ? undefined : FilesystemGrant.of(pinned, state.action.descriptor.name)
  try {
    invoked = env.backend.invoke(mint(state.action.definition), {
      definition: state.action.definition,
      input: state.input,
      context: { request_id: state.call.request.request_id, attempt_id: state.call.attempt_id },
      usage,
      outbox: outbox?.service ?? refusing,
      ...(pinned === undefined ? {} : { network: NetworkGrant.of(pinned, state.action.descriptor.name) }),
      ...(filesystem === undefined ? {} : { filesystem })
    })
  } catch (defect) {
    // A backend that throws instead of answering fails the call as a defect inside an Effect would.
    invoked = Exit.die(defect)
  }
  if (outbox === undefined) return invoked
  if (Exit.isExit(invoked)) {
    outbox.close()
    return invoked
  }
  // Staging ends with the invocation: a fiber its handler left running stages nothing after it.
  return Effect.ensuring(invoked, Effect.sync(outbox.close))
}

// The callable runs on its own fiber, watched by `watch`: an interruption of the caller stops it within the bound.
// One the backend ran at once needs no fiber: its Exit is `settled` as the watch would have seen it.
const supervised = <A>(
  env: Env,
  stages: boolean,
  state: Normalised,
  usage: ActionUsage.ActionUsage.Service,
  watch: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => Effect.Effect<A>,
  settled: (exit: Exit.Exit<unknown, unknown>) => A
) =>
  Effect.uninterruptibleMask(
    (restore): Effect.Effect<readonly [Fiber.RuntimeFiber<unknown, unknown> | undefined, A]> => {
      state.call.invoked = true
      const invoked = backendAnswer(env, stages, state, usage)
      if (Exit.isExit(invoked)) return Effect.succeed([undefined, settled(invoked)] as const)
      return Effect.flatMap(Effect.forkDaemon(restore(invoked)), (fiber) =>
        restore(watch(fiber)).pipe(
          Effect.onInterrupt(() => stopWithin(state.call, fiber, env.teardown)),
          Effect.map((watched) => [fiber, watched] as const)
        ))
    }
  )

/** Stage 12: release a one-use token and invoke exactly once, under the deadline and cancellation if any. */
export const invokeWith = (
  env: Env,
  stages: boolean
): EffectStep<Normalised, { exit: Exit.Exit<unknown, unknown> }> => {
  const once = (state: Normalised, usage: ActionUsage.ActionUsage.Service) =>
    Effect.map(supervised(env, stages, state, usage, Fiber.await, identity), ([, exit]) => ended(state, exit))

  const guarded = Effect.fnUntraced(function*(state: Normalised, usage: ActionUsage.ActionUsage.Service) {
    const { cancel, deadline } = state.call
    if (cancel !== undefined && (yield* Deferred.isDone(cancel))) {
      return outcomeWith(Cancelled, state.call, { call_executed: false })
    }
    // A deadline that passed during the pre-call stages stops the call before the token is released.
    const remaining = deadline === undefined ? undefined : Time.toMicros(deadline) - (yield* Time.nowMicros)
    if (remaining !== undefined && remaining <= 0) {
      return outcomeWith(TimedOut, state.call, { call_executed: false })
    }
    const [fiber, first] = yield* supervised(env, stages, state, usage, (fiber) => {
      const racers: Array<Effect.Effect<Stopped>> = [
        Effect.map(Fiber.await(fiber), (exit): Stopped => ({ _tag: "exit", exit }))
      ]
      if (remaining !== undefined) racers.push(Effect.as(Effect.sleep(Duration.micros(BigInt(remaining))), byDeadline))
      if (cancel !== undefined) racers.push(Effect.as(Deferred.await(cancel), byCancel))
      return Effect.raceAll(racers)
    }, (exit): Stopped => ({ _tag: "exit", exit }))
    state.call.outbox?.close()
    if (first._tag === "exit" || fiber === undefined) {
      return ended(state, (first as Extract<Stopped, { _tag: "exit" }>).exit)
    }
    const fields = {
      call_executed: true,
      teardown: (yield* Effect.uninterruptible(stopWithin(state.call, fiber, env.teardown)))
        ? "completed" as const
        : "abandoned" as const
    }
    return outcomeWith(first.by === "deadline" ? TimedOut : Cancelled, state.call, fields)
  })

  /** The invocation's wall time by the Clock, with what its callable reported, charged to each meter however it ended. */
  const charged = <A>(
    state: Normalised,
    charges: ReadonlyMap<Interceptor, (usage: ActionUsage.Usage) => Effect.Effect<void>>,
    run: (usage: ActionUsage.ActionUsage.Service) => Effect.Effect<A>
  ) => {
    const usage = meter()
    return Effect.flatMap(
      Time.nowMicros,
      (started) =>
        Effect.onExit(run(usage.service), () =>
          Effect.flatMap(Time.nowMicros, (ended) => {
            const used = usage.close(ended - started)
            if (!state.call.invoked) return Effect.void
            return Effect.forEach(charges.values(), (charge) => charge(used), { discard: true })
          }))
    )
  }

  return {
    _tag: "Effect",
    stage: "invoke",
    detail: "release the one-use invocation token and invoke exactly once",
    run: (state) => {
      const invoke = state.call.deadline !== undefined || state.call.cancel !== undefined ? guarded : once
      const charges = state.call.charges
      return charges === undefined ? invoke(state, unmetered) : charged(state, charges, (usage) => invoke(state, usage))
    }
  }
}

/** The failure a backend issued about its own run of the callable (never a handler's), if the exit is one. */
const backendFailureOf = (exit: Exit.Exit<unknown, unknown>): ActionBackendError | undefined =>
  Exit.isFailure(exit)
    ? Option.getOrUndefined(Cause.failureOption(exit.cause).pipe(Option.filter(isIssued)))
    : undefined

/** A backend failure as the outcome it names, its reason code `backend.<reason>`. */
const concludedBy = (call: Invoked["call"], error: ActionBackendError): ExecutionOutcome => {
  const code = `backend.${error.reason}`
  switch (error.outcome) {
    case "timed_out":
      return outcomeWith(TimedOut, call, { call_executed: error.started, teardown: "completed" as const })

    case "ambiguous":
      return outcomeWith(Ambiguous, call, { reason: reason(code, error.detail) })
    case "failed":
      return outcomeWith(Failed, call, { failure: trustedMake(FailureSummary, { code }) })
    case "denied":
      // A remote writ's own policy refused the call: nothing ran there, as with a refused token here.
      call.invoked = false
      call.stage = "invoke"
      return denied(call, code, error.detail)
  }
}

/** Stage 13: normalise the callable's exit into an outcome; failures are captured and redacted. */
export const settle: SyncStep<Invoked, never> = {
  _tag: "Sync",
  stage: "outcome",
  detail: "normalise the result or the captured failure into an outcome",
  run: ({ action, call, exit }) => {
    if (Exit.isSuccess(exit)) {
      const encoded = action.encodeOutput(exit.value)
      return Either.isRight(encoded)
        ? outcomeWith(Succeeded, call, { result: encoded.right })
        : outcomeWith(Failed, call, {
          failure: trustedMake(FailureSummary, {
            code: "output.invalid",
            message: describeParseError(encoded.left, "result")
          })
        })
    }
    const refused = refusalOf(exit)
    if (refused !== undefined) {
      call.invoked = false
      call.stage = "invoke"
      return denied(call, "invoke.token_refused", refused.reason)
    }
    if (Cause.isInterruptedOnly(exit.cause)) {
      return outcomeWith(Cancelled, call, { call_executed: true })
    }
    const backend = backendFailureOf(exit)
    if (backend !== undefined) return concludedBy(call, backend)
    return outcomeWith(Failed, call, { failure: trustedMake(FailureSummary, captureFailure(exit.cause)) })
  }
}
