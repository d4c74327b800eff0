/**
 * The demo: a scripted agent session run through the executor, one call for each way an action
 * can end, optionally inside one durable Run and one task boundary. Runtime-agnostic; the CLI
 * composes the stores and renders it.
 */
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryPolicySnapshotStore from "../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../core/action/Action.ts"
import { ActionExecutionBackend } from "../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import { ApprovalQueue } from "../core/approval/Approval.ts"
import type { Uuid } from "../core/base/IdGenerator.ts"
import { PrincipalRef } from "../core/base/Refs.ts"
import type { PolicySnapshotRef } from "../core/base/Refs.ts"
import * as Time from "../core/base/Time.ts"
import type { TaskBoundary } from "../core/evidence/Governance.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../core/execution/ExecutionOutcome.ts"
import type { ExecutionScopeRef } from "../core/execution/ExecutionScope.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import * as InvocationContext from "../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../core/policy/PolicySnapshotStore.ts"
import type { Run } from "../core/state/StateStore.ts"

const notes: Record<string, string> = { todo: "ship the executor", ideas: "policy snapshots" }

/** The demo's tool set. */
export const actions: ReadonlyArray<Action.ActionDefinition> = [
  Action.make({
    name: "notes.read",
    description: "Read a note by id",
    input: Schema.Struct({ id: Schema.String }),
    output: Schema.NullOr(Schema.String),
    effects: ["memory.read"],
    handler: ({ id }) => notes[id] ?? null
  }),
  Action.make({
    name: "calc.add",
    aliases: ["add"],
    description: "Add two integers",
    input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
    output: Schema.Int,
    handler: ({ a, b }) => a + b
  }),
  Action.make({
    name: "weather.fetch",
    description: "Fetch the weather (its upstream is down, and its error holds a token)",
    input: Schema.Struct({ city: Schema.String }),
    output: Schema.String,
    effects: ["network.connect"],
    handler: async () => {
      throw new Error("upstream 503 (api_key=sk-demo-not-a-real-key)")
    }
  }),
  Action.make({
    name: "report.compile",
    description: "Compile a report: 100 ms a page",
    input: Schema.Struct({ pages: Schema.Int }),
    output: Schema.String,
    handler: ({ pages }) => Effect.as(Effect.sleep(pages * 100), `${pages} pages`)
  }),
  Action.make({
    name: "index.rebuild",
    description: "Rebuild the search index (slow)",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.sleep("10 seconds")
  }),
  Action.make({
    name: "shell.exec",
    description: "Run a shell command (simulated: the demo runs nothing)",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => `(simulated) ${command}: README.md core adapters runtime`
  }),
  Action.make({
    name: "files.write",
    description: "Write a file; requires filesystem containment",
    input: Schema.Struct({ path: Schema.String, text: Schema.String }),
    output: Schema.Void,
    effects: ["filesystem.write"],
    containment: ["filesystem"],
    handler: () => undefined
  })
]

/** The demo's policy: reads and arithmetic allowed (three sums a minute), shell escalated to a maintainer
 * (dangerous commands denied), notes touched only on a user's behalf. */
export const policy: PermissionPolicy.PermissionPolicyEncoded = {
  policy_id: "demo-agent",
  version: "1",
  mode: "safe",
  approver_class: "maintainer",
  rules: [
    { kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] },
    {
      kind: "budget",
      effect: "limit",
      action_patterns: ["calc.*"],
      budget_kind: "calls",
      // No window: a limit for the policy's lifetime, which denies once spent (a windowed one would defer).
      limit: 3
    }
  ]
}

/** The agent the demo's executor acts as. */
export const agent = InvocationContext.agent("demo-agent")

const principal = PrincipalRef.make({ id: "demo-user" })

/** The maintainer who approves escalations in the demo. */
export const maintainer = { id: "demo-maintainer", approver_class: "maintainer" }

/** One scripted step: what the agent asked for, and how. */
export interface Step {
  readonly action: string
  readonly arguments: Record<string, unknown>
  readonly note: string
  /** Who the call is for: a user's request (default) or the agent's own initiative. */
  readonly origin?: "USER" | "SELF"
  readonly deadlineMillis?: number
  readonly cancelAfterMillis?: number
  /** The maintainer approves the last escalation, and the step resubmits with that approval. */
  readonly withApproval?: boolean
}

/** The scripted session. */
export const script: ReadonlyArray<Step> = [
  { action: "notes.read", arguments: { id: "todo" }, note: "allowed: a user asked" },
  { action: "add", arguments: { a: 2, b: 40 }, note: "an alias resolves to calc.add" },
  { action: "calc.add", arguments: { a: "two", b: 40 }, note: "schema-invalid arguments" },
  { action: "shell.exec", arguments: { command: "rm -rf /" }, note: "denied by the policy" },
  { action: "shell.exec", arguments: { command: "ls" }, note: "escalated to a maintainer; no one waits" },
  {
    action: "shell.exec",
    arguments: { command: "ls" },
    note: "approved: a new attempt uses it once",
    withApproval: true
  },
  { action: "notes.read", arguments: { id: "ideas" }, note: "the agent's own initiative", origin: "SELF" },
  { action: "calc.add", arguments: { a: 1, b: 1 }, note: "second sum this minute" },
  { action: "calc.add", arguments: { a: 1, b: 2 }, note: "third sum this minute" },
  { action: "calc.add", arguments: { a: 2, b: 2 }, note: "fourth sum: over the budget of 3" },
  { action: "weather.fetch", arguments: { city: "Oslo" }, note: "a handler failure, redacted" },
  { action: "report.compile", arguments: { pages: 50 }, note: "a deadline of 200 ms", deadlineMillis: 200 },
  { action: "index.rebuild", arguments: {}, note: "cancelled by the agent after 100 ms", cancelAfterMillis: 100 },
  {
    action: "files.write",
    arguments: { path: "/work/out.txt", text: "hi" },
    note: "containment the backend cannot prove"
  },
  { action: "net.scan", arguments: {}, note: "an action nobody registered" }
]

/** A step and the outcome the executor gave it. */
export interface Row {
  readonly step: Step
  readonly outcome: ExecutionOutcome
}

/** The demo's layers: the demo actions, the in-process backend, in-memory policy and approval stores, and an
 * executor whose stages 5-7 enforce the policy pinned in each call's context. */
export const layerWith = <E = never>(
  config: ActionExecutor.Config = {},
  backend: Layer.Layer<ActionExecutionBackend, E> = InProcessBackend.layer as Layer.Layer<ActionExecutionBackend, E>,
  tools: ReadonlyArray<Action.ActionDefinition> = actions
) =>
  ActionExecutor.layerPolicyGated(config, { boundAgent: agent }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        ActionRegistry.layerWith(tools),
        backend,
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer
      )
    )
  )

/** The demo's layers with the in-process backend. */
export const layer = layerWith()

/** The demo's actions and a backend (the in-process one by default), for an executor composed elsewhere (needs a Digest). */
export const toolsWith = <E>(
  backend: Layer.Layer<ActionExecutionBackend, E> = InProcessBackend.layer,
  tools: ReadonlyArray<Action.ActionDefinition> = actions
) => Layer.merge(ActionRegistry.layerWith(tools), backend)

/** The demo's actions and the in-process backend, for an executor composed elsewhere (needs a Digest). */
export const tools = toolsWith()

/**
 * Compile, store and activate a demo policy (unless a database retired it: then the executor refuses what pins it,
 * `policy.not_active`); the reference a context pins.
 */
export const install = (declared: PermissionPolicy.PermissionPolicyEncoded) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const declaration = yield* Effect.orDie(PermissionPolicy.decode(declared))
    const snapshot = yield* Effect.orDie(PolicySnapshot.compile(declaration))
    yield* Effect.orDie(store.put(snapshot))
    const stored = yield* Effect.orDie(store.get(snapshot.policy_id, snapshot.version))
    if (stored.release_state !== "retired") {
      yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "demo", yield* Time.now))
    }
    return { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
  })

/** Install the demo policy (`install(policy)`). */
export const installPolicy = install(policy)

const invocationFor = (origin: "USER" | "SELF") =>
  origin === "SELF"
    ? InvocationContext.autonomous(agent, principal.id, {})
    : InvocationContext.user(InvocationContext.human("demo-user"), agent, principal.id, {})

/** How one step runs: the policy its context pins, an approval it spends, its scope (default: a fresh ephemeral
 * operation) and, for a governed executor, the task boundary it appends to. */
export interface StepOptions {
  readonly policy_snapshot?: PolicySnapshotRef
  readonly approval_id?: Uuid
  readonly execution_scope?: ExecutionScopeRef
  readonly boundary?: TaskBoundary
  /** Durable: run the step as a new Run's one attempt, the Run created only once the step is admitted. */
  readonly newRun?: Deferred.Deferred<Run>
}

/** Run one step as the demo agent, through the executor and on the backend in context, under the policy when one is given. */
export const runStep = (step: Step, index: number, options: StepOptions = {}) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const backend = yield* ActionExecutionBackend
    const now = yield* Time.nowMicros
    const { context, request } = yield* Ingress.prepare({
      request_id: `demo-${index + 1}`,
      action: step.action,
      arguments: step.arguments,
      principal_claim: principal.id,
      ...(step.deadlineMillis === undefined ? {} : { deadline: Time.fromMicros(now + step.deadlineMillis * 1000) }),
      ...(options.approval_id === undefined ? {} : { approval_id: options.approval_id })
    }, {
      principal: principal.id,
      effect_backend: backend.ref,
      ...(options.policy_snapshot === undefined ? {} : { policy_snapshot: options.policy_snapshot }),
      ...(options.execution_scope === undefined ? {} : { execution_scope: options.execution_scope })
    })
    const boundary = {
      ...(options.boundary === undefined ? {} : { boundary: options.boundary }),
      ...(options.newRun === undefined ? {} : { newRun: options.newRun })
    }
    const run = step.cancelAfterMillis === undefined
      ? executor.execute(request, { context, ...boundary })
      : Effect.gen(function*() {
        const cancel = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(executor.execute(request, { context, cancel, ...boundary }))
        yield* Effect.sleep(step.cancelAfterMillis!)
        yield* Deferred.succeed(cancel, undefined)
        return yield* Fiber.join(fiber)
      })
    return yield* InvocationContext.withInvocation(run, invocationFor(step.origin ?? "USER"))
  })

/** Where a session runs: one shared scope (default: a fresh ephemeral operation per step) and a task boundary. */
export interface SessionOptions {
  readonly execution_scope?: ExecutionScopeRef
  readonly boundary?: TaskBoundary
}

/** Run the whole scripted session under the policy `ref` pins; the maintainer approves where a step asks. */
export const sessionWith = (ref: PolicySnapshotRef, options: SessionOptions = {}) =>
  Effect.gen(function*() {
    const queue = yield* ApprovalQueue
    const rows: Array<Row> = []
    for (const [index, step] of script.entries()) {
      const last = rows.findLast((row) => row.outcome._tag === "escalated")?.outcome
      const approval = step.withApproval === true && last?._tag === "escalated" ? last.approval : undefined
      if (approval !== undefined) yield* Effect.orDie(queue.approve(approval.approval_id, maintainer))
      rows.push({
        step,
        outcome: yield* runStep(step, index, {
          ...options,
          policy_snapshot: ref,
          ...(approval === undefined ? {} : { approval_id: approval.approval_id })
        })
      })
    }
    return rows
  })

/** Install the demo policy and run the whole scripted session under it, each step in its own ephemeral scope. */
export const session = Effect.flatMap(installPolicy, (ref) => sessionWith(ref))
