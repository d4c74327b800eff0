/** One case's executor and memory stores (minimal or governed profile), and the steps of a call run through it. */
import { Effect, Either, Layer, ManagedRuntime, TestClock, TestContext } from "effect"
import * as InProcessBackend from "../../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../../../adapters/memory/MemoryStateStore.ts"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../../../core/action/ActionRegistry.ts"
import { ApprovalQueue } from "../../../core/approval/Approval.ts"
import type { Digest } from "../../../core/base/Digest.ts"
import * as IdGenerator from "../../../core/base/IdGenerator.ts"
import * as Time from "../../../core/base/Time.ts"
import * as Governance from "../../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../../core/execution/ExecutionOutcome.ts"
import * as Governed from "../../../core/execution/Governed.ts"
import * as IdempotencyStore from "../../../core/execution/IdempotencyStore.ts"
import * as Ingress from "../../../core/execution/Ingress.ts"
import type { AgentSubject } from "../../../core/policy/InvocationContext.ts"
import * as InvocationContext from "../../../core/policy/InvocationContext.ts"
import type { PolicySnapshot } from "../../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import type { Call } from "../Calls.ts"
import { buildInvocation } from "../Invocations.ts"
import { principals } from "./pools.ts"

/** The profiles a case runs in. */
export type Profile = "minimal" | "governed"

/** Which attempt of a case a step is: the call, its approved resubmission, or a replay. */
export type StepKind = "call" | "approved" | "replayed"

/** One attempt as sent: the generated call, and the approval id it presented. */
export interface Attempt extends Call {
  readonly step: StepKind
  readonly approval_id?: string
}

/** What the harness saw around one attempt: the profile, how often the callable ran, an evidence error if any. */
export interface Observed {
  readonly profile: Profile
  readonly ran: number
  readonly error?: ActionExecutor.ExecutionError
}

/** One attempt and what came of it: an outcome, or (governed) an evidence error and no outcome. */
export interface Step {
  readonly call: Attempt
  readonly outcome?: ExecutionOutcome
  readonly observed: Observed
}

/** What every case of one check shares: the instrumented actions, the snapshot, the executor's configuration. */
export interface Prepared {
  readonly actions: ReadonlyArray<ActionDefinition>
  readonly snapshot: PolicySnapshot
  readonly config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance">
  readonly boundAgent: AgentSubject
  readonly approver: string
  readonly now: Time.Timestamp
  readonly digest: Layer.Layer<Digest>
  readonly counter: { ran: number }
}

/** The in-process backend, counting each invocation that reaches it in `counter`: how a law sees the callable run. */
export const countingBackend = (counter: { ran: number }): Layer.Layer<ActionExecutionBackend> =>
  Layer.succeed(ActionExecutionBackend, {
    ...InProcessBackend.make,
    invoke: (token, invocation) => {
      counter.ran++
      return InProcessBackend.make.invoke(token, invocation)
    }
  })

const baseLayer = (prepared: Prepared) =>
  Layer.mergeAll(
    ActionRegistry.layerWith(prepared.actions),
    countingBackend(prepared.counter),
    IdempotencyStore.layerMemory
  ).pipe(Layer.provideMerge(Layer.merge(IdGenerator.layerSeeded("writ.testing"), prepared.digest)))

/** A fresh minimal-profile, policy-gated executor over fresh memory stores, seeded ids and the check's digest. */
export const minimalLayer = (prepared: Prepared) =>
  ActionExecutor.layerPolicyGated(prepared.config, { boundAgent: prepared.boundAgent }).pipe(
    Layer.provideMerge(Layer.mergeAll(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer)),
    Layer.provideMerge(baseLayer(prepared))
  )

/** A fresh governed executor over fresh memory stores (evidence, state, policies, approvals, executors). */
export const governedLayer = (prepared: Prepared) =>
  Governed.layer(prepared.config, { boundAgent: prepared.boundAgent }).pipe(
    Layer.provideMerge(Governance.layerWriter),
    Layer.provideMerge(
      Layer.mergeAll(
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer,
        MemoryExecutorRegistry.layer,
        MemoryStateStore.layer,
        MemoryEvidenceStore.layer
      )
    ),
    Layer.provideMerge(baseLayer(prepared))
  )

/** Put and activate the snapshot in the case's store, and set the test clock. */
export const install = (prepared: Prepared) =>
  Effect.gen(function*() {
    yield* TestClock.setTime(Math.floor(Time.toMicros(prepared.now) / 1000))
    const store = yield* PolicySnapshotStore
    const { snapshot } = prepared
    yield* store.put(snapshot)
    yield* store.activate(snapshot.policy_id, snapshot.version, "writ.testing", prepared.now)
  })

/** Install, then open the task boundary a governed case's calls run in. */
export const installGoverned = (prepared: Prepared) =>
  Effect.zipRight(
    install(prepared),
    Governance.openBoundary({
      policy_id: prepared.snapshot.policy_id,
      version: prepared.snapshot.version,
      digest: prepared.snapshot.digest
    })
  )

const nextPrincipal = (principal: string) => principals[(principals.indexOf(principal) + 1) % principals.length]!

/** Send one attempt through the executor in context: prepared by the ingress as a host would, under its origin. */
export const send = (prepared: Prepared, profile: Profile, call: Attempt, boundary?: Governance.TaskBoundary) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const { snapshot } = prepared
    const ingress = yield* Effect.either(Ingress.prepare({
      action: call.action,
      arguments: call.arguments,
      ...(call.idempotency_key === undefined ? {} : { idempotency_key: call.idempotency_key }),
      ...(call.approval_id === undefined ? {} : { approval_id: call.approval_id })
    }, {
      principal: call.principal,
      ...(call.tenant === undefined ? {} : { tenant: call.tenant }),
      effect_backend: InProcessBackend.make.ref,
      policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
    }))
    // The ingress refused the call (a malformed field): it never reached the executor, so there is nothing to check.
    if (Either.isLeft(ingress)) return undefined
    const invocation = yield* buildInvocation(call.origin)
    prepared.counter.ran = 0
    const result = yield* Effect.either(InvocationContext.withInvocation(
      executor.execute(ingress.right.request, {
        context: ingress.right.context,
        ...(boundary === undefined ? {} : { boundary })
      }),
      invocation
    ))
    const ran = prepared.counter.ran
    return Either.isRight(result)
      ? { call, outcome: result.right, observed: { profile, ran } }
      : { call, observed: { profile, ran, error: result.left } }
  })

/** A call's steps: the call; if it escalates and asks for it, approval and resubmission; then its replay, if any. */
export const steps = (prepared: Prepared, profile: Profile, call: Call, boundary?: Governance.TaskBoundary) =>
  Effect.gen(function*() {
    const done: Array<Step> = []
    const first = yield* send(prepared, profile, { ...call, step: "call" }, boundary)
    if (first === undefined) return done
    done.push(first)
    let approval_id: string | undefined
    const outcome = first.outcome
    if (call.approve === true && outcome?._tag === "escalated" && outcome.approval !== undefined) {
      approval_id = outcome.approval.approval_id
      const queue = yield* ApprovalQueue
      const approved = yield* Effect.either(
        queue.approve(approval_id, { id: prepared.approver, approver_class: outcome.approval.approver_class })
      )
      if (Either.isRight(approved)) {
        const again = yield* send(prepared, profile, { ...call, step: "approved", approval_id }, boundary)
        if (again !== undefined) done.push(again)
      }
    }
    const replay: Attempt | undefined = call.replay === "approval_id" && approval_id !== undefined
      ? { ...call, step: "replayed", approval_id }
      : call.replay === "idempotency_key" && call.idempotency_key !== undefined
      ? { ...call, step: "replayed", principal: nextPrincipal(call.principal) }
      : undefined
    if (replay !== undefined) {
      const replayed = yield* send(prepared, profile, replay, boundary)
      if (replayed !== undefined) done.push(replayed)
    }
    return done
  })

/** Run one call's steps on a fresh executor and fresh stores of the profile, under a test clock. */
export const runCase = (prepared: Prepared, profile: Profile, call: Call) => {
  const program = profile === "minimal"
    ? Effect.zipRight(install(prepared), steps(prepared, profile, call)).pipe(Effect.provide(minimalLayer(prepared)))
    : Effect.flatMap(installGoverned(prepared), (boundary) => steps(prepared, profile, call, boundary)).pipe(
      Effect.provide(governedLayer(prepared))
    )
  return program.pipe(Effect.provide(TestContext.TestContext), Effect.orDie)
}

/** One executor and its stores kept across calls (a sequence): send calls to it, then dispose of it. */
export const openSession = async (prepared: Prepared, profile: Profile) => {
  const test = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)
  if (profile === "minimal") {
    const runtime = ManagedRuntime.make(minimalLayer(prepared))
    await runtime.runPromise(test(install(prepared)))
    return { send: (call: Call) => runtime.runPromise(test(steps(prepared, profile, call))), dispose: runtime.dispose }
  }
  const runtime = ManagedRuntime.make(governedLayer(prepared))
  const boundary = await runtime.runPromise(test(installGoverned(prepared)))
  return {
    send: (call: Call) => runtime.runPromise(test(steps(prepared, profile, call, boundary))),
    dispose: runtime.dispose
  }
}
