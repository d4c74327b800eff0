/** One case's executor and memory stores (minimal or governed profile), and the steps of a call run through it. */
import { Context, Effect, Either, Layer, ManagedRuntime } from "effect"
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
import { Digest } from "../../../core/base/Digest.ts"
import * as IdGenerator from "../../../core/base/IdGenerator.ts"
import type * as Time from "../../../core/base/Time.ts"
import { EvidenceProjectionSource, EvidenceStore } from "../../../core/evidence/EvidenceStore.ts"
import { EvidenceWriter } from "../../../core/evidence/EvidenceWriter.ts"
import { ExecutorRegistry } from "../../../core/evidence/ExecutorRegistry.ts"
import * as Governance from "../../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../../core/execution/ExecutionOutcome.ts"
import * as Governed from "../../../core/execution/Governed.ts"
import * as IdempotencyStore from "../../../core/execution/IdempotencyStore.ts"
import * as Ingress from "../../../core/execution/Ingress.ts"
import type { AgentSubject } from "../../../core/policy/InvocationContext.ts"
import * as InvocationContext from "../../../core/policy/InvocationContext.ts"
import * as PolicyGate from "../../../core/policy/PolicyGate.ts"
import type { PolicySnapshot } from "../../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import * as AttemptStore from "../../../core/state/AttemptStore.ts"
import * as ProjectionStore from "../../../core/state/ProjectionStore.ts"
import * as RunStore from "../../../core/state/RunStore.ts"
import { StateStorage } from "../../../core/state/StateStorage.ts"
import type { Call } from "../Calls.ts"
import { buildInvocation } from "../Invocations.ts"
import { type Fault, fault, faulty, fixedClock } from "./faults.ts"
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
  /** The case's injected evidence fault (`Call.evidence_fault`, governed profile) fired during this attempt. */
  readonly faulted?: true
}

/** One attempt and what came of it: an outcome, or (governed) an evidence error and no outcome. */
export interface Step {
  readonly call: Attempt
  readonly outcome?: ExecutionOutcome
  readonly observed: Observed
}

/** What every case of one check shares: the actions, the snapshot, the executor's configuration, the shared services. */
export interface Prepared {
  readonly actions: ReadonlyArray<ActionDefinition>
  readonly snapshot: PolicySnapshot
  readonly config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance">
  readonly boundAgent: AgentSubject
  readonly approver: string
  readonly now: Time.Timestamp
  readonly counter: { ran: number }
  /** What holds no per-case state, built once per check: the registry, the policy store the snapshot is active in, the digest. */
  readonly shared: Context.Context<ActionRegistry.ActionRegistry | PolicySnapshotStore | Digest>
  /** The gate's pin over that store: the snapshot verified and compiled once per check, not once per case. */
  readonly pin: PolicyGate.Pin
  /** A host's decorator of the executor, checked in its place. */
  readonly wrap?: (executor: ActionExecutor.ActionExecutor.Service) => ActionExecutor.ActionExecutor.Service
}

/** What a check builds once and shares between cases: its registry, its policy store with the snapshot active, its pin. */
export const share = (actions: ReadonlyArray<ActionDefinition>, snapshot: PolicySnapshot, now: Time.Timestamp) =>
  Effect.gen(function*() {
    const registry = yield* ActionRegistry.make
    for (const action of actions) yield* registry.register(action)
    const policies = yield* MemoryPolicySnapshotStore.make
    // A fresh store holds no other version of the policy, so neither step can conflict or miss.
    yield* Effect.orDie(policies.put(snapshot))
    yield* Effect.catchTag(
      policies.activate(snapshot.policy_id, snapshot.version, "writ.testing", now),
      "PolicyNotFoundError",
      Effect.die
    )
    const pin = yield* Effect.provideService(PolicyGate.makePin, PolicySnapshotStore, policies)
    const shared = Context.make(ActionRegistry.ActionRegistry, registry).pipe(
      Context.add(PolicySnapshotStore, policies),
      Context.add(Digest, yield* Digest)
    )
    return { shared, pin }
  })

/** The in-process backend, counting each invocation that reaches it in `counter`: how a law sees the callable run. */
export const countingBackend = (counter: { ran: number }): ActionExecutionBackend.Service => ({
  ...InProcessBackend.make,
  invoke: (token, invocation) => {
    counter.ran++
    return InProcessBackend.make.invoke(token, invocation)
  }
})

// Fresh per case: the ids are seeded anew, idempotency and approvals start empty; the backend counts into the check's
// counter. Services are built directly, not as layers: a layer costs a case more than most of its stores do.
const freshBase = (prepared: Prepared) =>
  Effect.map(MemoryApprovalQueue.make, (queue) =>
    prepared.shared.pipe(
      Context.add(IdGenerator.IdGenerator, IdGenerator.makeSeeded("writ.testing")),
      Context.add(ActionExecutionBackend, countingBackend(prepared.counter)),
      Context.add(IdempotencyStore.IdempotencyStore, IdempotencyStore.makeMemory()),
      Context.add(ApprovalQueue, queue)
    ))

const gateOptions = (prepared: Prepared) => ({ boundAgent: prepared.boundAgent, pin: prepared.pin })

/** A fresh minimal-profile, policy-gated executor over a fresh approval queue, budget ledger and idempotency store. */
export const minimalContext = (prepared: Prepared) =>
  Effect.gen(function*() {
    const base = yield* freshBase(prepared)
    const executor = yield* Effect.provide(ActionExecutor.makePolicyGated(prepared.config, gateOptions(prepared)), base)
    return Context.add(base, ActionExecutor.ActionExecutor, executor)
  })

// The Run, attempt and projection stores over one fresh memory storage, as MemoryStateStore.layer builds them.
const stateStores = Effect.gen(function*() {
  const storage = Context.make(StateStorage, yield* MemoryStateStore.makeStorage)
  return Context.make(RunStore.RunStore, yield* Effect.provide(RunStore.make, storage)).pipe(
    Context.add(AttemptStore.AttemptStore, yield* Effect.provide(AttemptStore.make, storage)),
    Context.add(ProjectionStore.ProjectionStore, yield* Effect.provide(ProjectionStore.make, storage))
  )
})

/** A fresh governed executor over fresh memory stores (evidence, state, approvals, executors), the evidence faulty if asked. */
export const governedContext = (prepared: Prepared, evidence?: Fault) =>
  Effect.gen(function*() {
    const base = yield* freshBase(prepared)
    const store = yield* Effect.provide(MemoryEvidenceStore.make, base)
    const stores = Context.merge(base, yield* Effect.provide(stateStores, base)).pipe(
      Context.add(ExecutorRegistry, yield* MemoryExecutorRegistry.make),
      Context.add(EvidenceStore, evidence === undefined ? store : faulty(store, evidence)),
      Context.add(EvidenceProjectionSource, store)
    )
    const withWriter = Context.add(stores, EvidenceWriter, yield* Effect.provide(Governance.makeWriter, stores))
    const executor = yield* Effect.provide(Governed.make(prepared.config, gateOptions(prepared)), withWriter)
    return Context.add(withWriter, ActionExecutor.ActionExecutor, executor)
  })

/** Open the task boundary a governed case's calls run in, under the check's snapshot. */
export const installGoverned = (prepared: Prepared) =>
  Governance.openBoundary({
    policy_id: prepared.snapshot.policy_id,
    version: prepared.snapshot.version,
    digest: prepared.snapshot.digest
  })

/** What one case's attempts run in: its task boundary (governed), and its evidence fault if it has one. */
export interface Session {
  readonly boundary?: Governance.TaskBoundary
  readonly fault?: Fault
}

const nextPrincipal = (principal: string) => principals[(principals.indexOf(principal) + 1) % principals.length]!

/** Send one attempt through the executor in context: prepared by the ingress as a host would, under its origin. */
export const send = (prepared: Prepared, profile: Profile, call: Attempt, session: Session = {}) =>
  Effect.gen(function*() {
    const own = yield* ActionExecutor.ActionExecutor
    const executor = prepared.wrap === undefined ? own : prepared.wrap(own)
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
    const fired = session.fault?.fired === true
    const result = yield* Effect.either(InvocationContext.withInvocation(
      executor.execute(ingress.right.request, {
        context: ingress.right.context,
        ...(session.boundary === undefined ? {} : { boundary: session.boundary })
      }),
      invocation
    ))
    const observed: Observed = {
      profile,
      ran: prepared.counter.ran,
      ...(!fired && session.fault?.fired === true ? { faulted: true } : {})
    }
    return Either.isRight(result)
      ? { call, outcome: result.right, observed }
      : { call, observed: { ...observed, error: result.left } }
  })

/** A call's steps: the call; if it escalates and asks for it, approval and resubmission; then its replay, if any. */
export const steps = (prepared: Prepared, profile: Profile, call: Call, session: Session = {}) =>
  Effect.gen(function*() {
    const done: Array<Step> = []
    const first = yield* send(prepared, profile, { ...call, step: "call" }, session)
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
        const again = yield* send(prepared, profile, { ...call, step: "approved", approval_id }, session)
        if (again !== undefined) done.push(again)
      }
    }
    const replay: Attempt | undefined = call.replay === "approval_id" && approval_id !== undefined
      ? { ...call, step: "replayed", approval_id }
      : call.replay === "idempotency_key" && call.idempotency_key !== undefined
      ? { ...call, step: "replayed", principal: nextPrincipal(call.principal) }
      : undefined
    if (replay !== undefined) {
      const replayed = yield* send(prepared, profile, replay, session)
      if (replayed !== undefined) done.push(replayed)
    }
    return done
  })

/** Open a governed case's boundary, then arm its evidence fault: the calls' commits are counted, not the boundary's. */
const openGoverned = (prepared: Prepared, fault: Fault | undefined) =>
  Effect.map(installGoverned(prepared), (boundary): Session => {
    if (fault === undefined) return { boundary }
    fault.armed = true
    return { boundary, fault }
  })

/** Run one call's steps on a fresh executor and fresh stores of the profile, under a clock stopped at the check's time. */
export const runCase = (prepared: Prepared, profile: Profile, call: Call) => {
  const evidence = profile === "governed" && call.evidence_fault !== undefined ? fault(call.evidence_fault) : undefined
  const program = profile === "minimal"
    ? Effect.flatMap(minimalContext(prepared), (context) => Effect.provide(steps(prepared, profile, call), context))
    : Effect.flatMap(governedContext(prepared, evidence), (context) =>
      Effect.provide(
        Effect.flatMap(openGoverned(prepared, evidence), (session) => steps(prepared, profile, call, session)),
        context
      ))
  return program.pipe(Effect.scoped, Effect.withClock(fixedClock(prepared.now)), Effect.orDie)
}

/** One executor and its stores kept across calls (a sequence): send calls to it, then dispose of it. */
export const openSession = async (prepared: Prepared, profile: Profile) => {
  const clock = fixedClock(prepared.now)
  if (profile === "minimal") {
    const runtime = ManagedRuntime.make(Layer.effectContext(minimalContext(prepared)))
    return {
      send: (call: Call) => runtime.runPromise(Effect.withClock(steps(prepared, profile, call), clock)),
      dispose: runtime.dispose
    }
  }
  const runtime = ManagedRuntime.make(Layer.scopedContext(governedContext(prepared)))
  const boundary = await runtime.runPromise(Effect.withClock(installGoverned(prepared), clock))
  return {
    send: (call: Call) => runtime.runPromise(Effect.withClock(steps(prepared, profile, call, { boundary }), clock)),
    dispose: runtime.dispose
  }
}
