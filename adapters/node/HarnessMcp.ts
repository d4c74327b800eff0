/**
 * writ's MCP server for one harness run: the given actions behind a policy-gated executor of their own (`make`) or,
 * under the governed profile, the governed executor over the run's own stores, each call its own governed operation
 * on the run's task boundary and in its Run (`makeGoverned`); every call pinned to the run's policy snapshot for the
 * run's principal (a user's request, by the harness's agent), whatever the client sends, and the permission tool
 * deciding by the same decider as the run's hook. Runtimes: Node.
 */
import type { Scope } from "effect"
import { Effect, Layer } from "effect"
import type { ActionDefinition } from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import type { TaskBoundary } from "../../core/evidence/TaskBoundary.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import type { CallbackDecision, ToolCall } from "../../core/harness/HarnessAdapter.ts"
import * as McpServer from "../../core/mcp/McpServer.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import type { PolicySnapshot } from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import * as InProcessBackend from "../memory/InProcessBackend.ts"
import * as MemoryPolicySnapshotStore from "../memory/MemoryPolicySnapshotStore.ts"

/** The agent a harness run's MCP calls are made by. */
export const agent = InvocationContext.agent("writ-harness")

/** What a run's MCP server is built from: its actions, the run's snapshot and principal, and the hook's decider. */
export interface Options {
  readonly actions: ReadonlyArray<ActionDefinition>
  readonly snapshot: PolicySnapshot
  readonly principal: string
  readonly decide: (call: ToolCall) => Effect.Effect<CallbackDecision>
  /** The permission tool's name (default: none listed). */
  readonly permissionTool?: string
}

/** A run's MCP server, its executor and stores private to it (actions that collide are a defect of the caller). */
export const make = (options: Options): Effect.Effect<McpServer.McpServer, never, Digest> =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const { snapshot } = options
    yield* Effect.orDie(store.put(snapshot))
    yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "harness", yield* Time.now))
    return yield* McpServer.make({
      principal: options.principal,
      origin: "USER",
      agent,
      policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
      ...(options.permissionTool === undefined
        ? {}
        : { permission: { name: options.permissionTool, decide: options.decide } })
    })
  }).pipe(
    Effect.provide(
      ActionExecutor.layerPolicyGated({}, { boundAgent: agent }).pipe(
        Layer.provideMerge(Layer.mergeAll(
          ActionRegistry.layerWith(options.actions),
          InProcessBackend.layer,
          MemoryPolicySnapshotStore.layer,
          IdGenerator.layerCrypto
        ))
      )
    ),
    Effect.orDie
  )

/** What a governed run's MCP server adds: the run's task boundary and its durable Run. */
export interface GovernedOptions extends Options {
  readonly boundary: TaskBoundary
  readonly run_id: IdGenerator.Uuid
}

const governedExecutor = (actions: ReadonlyArray<ActionDefinition>) =>
  Governed.layer({}, { boundAgent: agent }).pipe(
    Layer.provideMerge(Layer.mergeAll(ActionRegistry.layerWith(actions), InProcessBackend.layer))
  )

/**
 * A governed run's MCP server: the governed executor over the stores in context (the run's database, its snapshot
 * stored and active there), built in the caller's scope, every call on `boundary` in the Run's scope.
 */
export const makeGoverned = (
  options: GovernedOptions
): Effect.Effect<
  McpServer.McpServer,
  never,
  Scope.Scope | Layer.Layer.Context<ReturnType<typeof governedExecutor>>
> =>
  Effect.gen(function*() {
    const { snapshot } = options
    const context = yield* Layer.build(governedExecutor(options.actions))
    return yield* McpServer.make({
      principal: options.principal,
      origin: "USER",
      agent,
      policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
      boundary: options.boundary,
      execution_scope: DurableRun.make({ run_id: options.run_id }),
      ...(options.permissionTool === undefined
        ? {}
        : { permission: { name: options.permissionTool, decide: options.decide } })
    }).pipe(Effect.provide(context))
  }).pipe(Effect.orDie)
