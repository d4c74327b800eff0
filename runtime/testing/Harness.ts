/**
 * The property-test harness: generated calls against a user's actions, each run through a real executor on fresh
 * memory stores (minimal and governed profiles, seeded ids, a test clock), checked by plain predicates over
 * (call, outcome); a failure is the shrunk call with its outcome and decision trail, as a regression test.
 */
import { Effect, type Layer } from "effect"
import fc from "fast-check"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import type { ActionCollisionError } from "../../core/action/ActionRegistry.ts"
import type { CanonicalJsonError } from "../../core/base/Canonical.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as Time from "../../core/base/Time.ts"
import type * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import type { AgentSubject } from "../../core/policy/InvocationContext.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import type { Call } from "./Calls.ts"
import { calls } from "./Calls.ts"
import type { Attempt, Observed, Prepared, Profile, Step } from "./internal/env.ts"
import { runCase, share } from "./internal/env.ts"
import { checkSequences, type SequenceProperty } from "./internal/sequences.ts"
import { type PropertyViolation, summary, violation } from "./Report.ts"

export type { Attempt, Observed, Profile, Step } from "./internal/env.ts"
export type { SequenceProperty } from "./internal/sequences.ts"

/** A plain predicate over one attempt and its outcome; `compare` also runs each call under another policy. */
export interface Property {
  readonly name: string
  readonly holds: (call: Attempt, outcome: ExecutionOutcome, observed: Observed & Compared) => boolean
  /** For an attempt that came to an evidence error instead of an outcome (governed profile). */
  readonly holdsOnError?: (call: Attempt, observed: Observed) => boolean
  readonly compare?: Policy
}

/** What the same call came to under the property's `compare` policy, in the same step. */
export interface Compared {
  readonly compared?: Step
}

/** A policy as a user holds it: decoded, its declaration in wire form, or a compiled snapshot (as a store returns it). */
export type Policy =
  | PermissionPolicy.PermissionPolicy
  | PermissionPolicy.PermissionPolicyEncoded
  | PolicySnapshot.PolicySnapshot

/** A property from a name and a predicate over (call, outcome, observed). */
export const property = (name: string, holds: Property["holds"]): Property => ({ name, holds })

/** What to check: the policy, the user's actions, the properties, and how many calls from which seed. */
export interface Options {
  readonly policy: Policy
  readonly actions: ReadonlyArray<ActionDefinition>
  readonly properties?: ReadonlyArray<Property>
  /** Properties over a sequence of calls on one executor, generated as a fast-check command model. */
  readonly sequences?: ReadonlyArray<SequenceProperty>
  readonly runs?: number
  readonly seed?: number
  readonly profiles?: ReadonlyArray<Profile>
  /** Interceptors, transformers and observers of the user's own, as the executor is built with them. */
  readonly config?: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance">
  /** The agent the executor acts as (`agent-a` by default): a SELF call from another agent is refused. */
  readonly boundAgent?: AgentSubject
  /** The test approver that approves escalations (`writ.test-approver`). */
  readonly approver?: string
  /** The test clock's time when each case starts (2026-01-01T00:00:00Z). */
  readonly now?: Time.Timestamp
  /** The digest layer (WebCrypto, every runtime, by default). */
  readonly digest?: Layer.Layer<Digest>
  /**
   * A host's decorator of the executor (a retry, a cache, a facade), checked in the executor's place: the laws then
   * hold of what the host does, not only of writ's executor. The harness still counts every run of the callable.
   */
  readonly wrap?: (executor: ActionExecutor.ActionExecutor.Service) => ActionExecutor.ActionExecutor.Service
}

/** What a check ran: calls, the steps checked, and how many outcomes of each kind and reason code. */
export interface Report {
  readonly seed: number
  readonly runs: number
  readonly steps: number
  readonly outcomes: Readonly<Record<string, number>>
}

/** Why a check could not start: the policy does not decode, compile or activate, or two actions collide. */
export type SetupError = PermissionPolicy.PolicyValidationError | CanonicalJsonError | ActionCollisionError

const DEFAULT_NOW = Time.fromMicros(Date.UTC(2026, 0, 1) * 1000)

/** A decoded policy and its compiled snapshot. */
export const compilePolicy = (policy: Policy, digest: Layer.Layer<Digest> = WebCryptoDigest.layer) =>
  Effect.gen(function*() {
    if (policy instanceof PolicySnapshot.PolicySnapshot) return policy
    const decoded = yield* PermissionPolicy.decode(policy)
    return yield* Effect.provide(PolicySnapshot.compile(decoded), digest)
  })

/**
 * Everything the cases of one check share, built once: the snapshot compiled, verified and active in a policy store,
 * and the registry of the actions. Each case still gets a fresh executor and fresh approval, budget, idempotency,
 * evidence and state stores.
 */
export const prepare = (
  options: Omit<Options, "properties">,
  policy: Policy = options.policy
): Effect.Effect<Prepared, SetupError> =>
  Effect.gen(function*() {
    const digest = options.digest ?? WebCryptoDigest.layer
    const snapshot = yield* compilePolicy(policy, digest)
    const now = options.now ?? DEFAULT_NOW
    const { pin, shared } = yield* Effect.provide(share(options.actions, snapshot, now), digest)
    return {
      actions: options.actions,
      snapshot,
      config: options.config ?? {},
      boundAgent: options.boundAgent ?? InvocationContext.agent("agent-a"),
      approver: options.approver ?? "writ.test-approver",
      now,
      counter: { ran: 0 },
      shared,
      pin,
      ...(options.wrap === undefined ? {} : { wrap: options.wrap })
    }
  })

const comparedStep = (steps: ReadonlyArray<Step> | undefined, step: Step) =>
  steps?.find((s) => s.call.step === step.call.step)

/** The first property one step breaks, or undefined. */
const broken = (
  properties: ReadonlyArray<Property>,
  step: Step,
  compared: ReadonlyMap<Property, ReadonlyArray<Step>>
): Property | undefined =>
  properties.find((p) => {
    if (step.outcome === undefined) return p.holdsOnError !== undefined && !p.holdsOnError(step.call, step.observed)
    const other = comparedStep(compared.get(p), step)
    return !p.holds(
      step.call,
      step.outcome,
      other === undefined ? step.observed : { ...step.observed, compared: other }
    )
  })

/** Run a call on every profile; the first step and property that breaks, if any, and every step. */
const judge = async (
  prepared: Prepared,
  references: ReadonlyMap<Property, Prepared>,
  options: Options,
  call: Call
) => {
  const all: Array<Step> = []
  for (const profile of options.profiles ?? ["minimal", "governed"]) {
    const steps = await Effect.runPromise(runCase(prepared, profile, call))
    const compared = new Map<Property, ReadonlyArray<Step>>()
    for (const [p, other] of references) compared.set(p, await Effect.runPromise(runCase(other, profile, call)))
    all.push(...steps)
    for (const step of steps) {
      const failed = broken(options.properties ?? [], step, compared)
      if (failed !== undefined) return { failed, step, all }
    }
  }
  return { all }
}

/** The calls a check of this seed judges, in fast-check's order, drawn in one synchronous pass. */
const draw = (arbitrary: fc.Arbitrary<Call>, runs: number, seed: number): ReadonlyArray<Call> => {
  const drawn: Array<Call> = []
  fc.check(fc.property(arbitrary, (call) => void drawn.push(call)), { numRuns: runs, seed })
  return drawn
}

/**
 * Judge drawn calls in order, up to the first that breaks a property: fast-check's asynchronous runner interleaved with
 * the cases costs about a fifth of a check, so it is used only to shrink from a failing run, replayed by its path.
 */
const judgeInOrder = async (
  drawn: ReadonlyArray<Call>,
  judgeCall: (call: Call) => ReturnType<typeof judge>,
  count: (step: Step) => void
) => {
  for (const [index, call] of drawn.entries()) {
    const judged = await judgeCall(call)
    for (const step of judged.all) count(step)
    if (judged.failed !== undefined) return { index, call, judged }
  }
  return undefined
}

/** The check as an Effect (for `@effect/vitest`): fails with the first PropertyViolation, its call shrunk. */
export const checkEffect = (options: Options): Effect.Effect<Report, PropertyViolation | SetupError> =>
  Effect.gen(function*() {
    const prepared = yield* prepare(options)
    const references = new Map<Property, Prepared>()
    // The reference policy is judged by writ's own executor: a host's decorator is what is checked, not the oracle.
    const { wrap: _wrap, ...reference } = options
    for (const p of options.properties ?? []) {
      if (p.compare !== undefined) references.set(p, yield* prepare(reference, p.compare))
    }
    const seed = options.seed ?? Math.floor(Math.random() * 0x7fffffff)
    const runs = options.runs ?? 100
    const outcomes: Record<string, number> = {}
    let steps = 0
    const arbitrary = calls({
      actions: options.actions,
      snapshots: [prepared.snapshot, ...[...references.values()].map((r) => r.snapshot)],
      agent: prepared.boundAgent
    })
    const judgeCall = (call: Call) => judge(prepared, references, options, call)
    const first = yield* Effect.promise(() =>
      judgeInOrder(draw(arbitrary, runs, seed), judgeCall, (step) => {
        steps++
        const tag = step.outcome === undefined ? "evidence error" : summary(step.outcome)
        outcomes[tag] = (outcomes[tag] ?? 0) + 1
      })
    )
    if (first !== undefined) {
      const details = yield* Effect.promise(() =>
        fc.check(
          fc.asyncProperty(arbitrary, async (call) => (await judgeCall(call)).failed === undefined),
          { numRuns: runs, seed, path: String(first.index) }
        )
      )
      const counterexample = details.failed ? details.counterexample?.[0] : undefined
      const shrunk = counterexample === undefined ? undefined : {
        call: counterexample,
        judged: yield* Effect.promise(() => judgeCall(counterexample)),
        path: details.counterexamplePath ?? ""
      }
      // A property that did not fail again on replay is reported at the run that broke it, unshrunk.
      const { call, judged, path } = shrunk?.judged.failed !== undefined
        ? shrunk
        : { ...first, path: String(first.index) }
      if (judged.failed !== undefined) return yield* violation(judged.failed.name, call, judged.step, { seed, path })
    }
    if (options.sequences !== undefined && options.sequences.length > 0) {
      yield* checkSequences(prepared, options.sequences, { ...options, seed, runs, arbitrary })
    }
    return { seed, runs, steps, outcomes }
  })

/** The check as a Promise: resolves with the report, rejects with the first PropertyViolation, its call shrunk. */
export const check = (options: Options): Promise<Report> => Effect.runPromise(checkEffect(options))

/** Every step of one call on a fresh executor of the profile: what a pasted regression test replays. */
export const replay = (
  options: Omit<Options, "properties">,
  call: Call,
  profile: Profile = "minimal"
): Promise<ReadonlyArray<Step>> =>
  Effect.runPromise(Effect.flatMap(prepare(options), (prepared) => runCase(prepared, profile, call)))

/** The same as an Effect, for `@effect/vitest`'s `it.prop` over `Testing.calls`. */
export const replayEffect = (
  options: Omit<Options, "properties">,
  call: Call,
  profile: Profile = "minimal"
): Effect.Effect<ReadonlyArray<Step>, SetupError> =>
  Effect.flatMap(prepare(options), (prepared) => runCase(prepared, profile, call))

/** The calls a check generates for these options: for `it.prop`, or for sampling. */
export const callsFor = (options: Omit<Options, "properties">): Effect.Effect<fc.Arbitrary<Call>, SetupError> =>
  Effect.map(
    prepare(options),
    (prepared) => calls({ actions: options.actions, snapshots: [prepared.snapshot], agent: prepared.boundAgent })
  )
