/**
 * One session of writ's MCP server: what it runs each call as (set by whoever launches it, never by the client), the
 * permission-prompt tool it may list, and its message handler.
 */
import type { Effect } from "effect"
import type { PolicySnapshotRef } from "../base/Refs.ts"
import type * as StrictJson from "../base/StrictJson.ts"
import type { TaskBoundary } from "../evidence/TaskBoundary.ts"
import type { ExecutionScopeRef } from "../execution/ExecutionScope.ts"
import type { CallbackDecision, CallbackRecord, ToolCall } from "../harness/HarnessAdapter.ts"
import type { AgentSubject, ExecutionCaller } from "../policy/InvocationContext.ts"

/** The tool that answers a provider's permission prompts (Claude's `--permission-prompt-tool`), and its decider. */
export interface PermissionTool {
  readonly name: string
  readonly decide: (call: ToolCall) => Effect.Effect<CallbackDecision>
}

/** What the server runs each call as: set by whoever launches it, never by the client. */
export interface Config {
  /** The authenticated principal every call runs for. */
  readonly principal: string
  /** The policy snapshot every call's context pins. */
  readonly policy_snapshot?: PolicySnapshotRef
  /** Who the calls come from, for the policy's origin rules: a user's request, the agent's own, or another agent's. */
  readonly origin: ExecutionCaller
  /** The agent the calls are made by (default `mcp-client`). */
  readonly agent?: AgentSubject
  /** The task boundary every call's evidence goes on (a governed executor's), instead of one of its own per call. */
  readonly boundary?: TaskBoundary
  /** The scope every call runs in (a durable Run's, say); default: the harness run's it serves, else one per call. */
  readonly execution_scope?: ExecutionScopeRef
  /** A permission-prompt tool to list besides the actions. */
  readonly permission?: PermissionTool
  /** How deep and large one message may be (default: StrictJson's). */
  readonly limits?: StrictJson.Limits
  /** The name and version the server gives in `initialize`. */
  readonly info?: { readonly name: string; readonly version: string }
}

/** One MCP session's message handler. */
export interface McpServer {
  /** The answer to one message (a line of JSON), or undefined for a notification, which gets none. */
  readonly handle: (line: string) => Effect.Effect<string | undefined>
  /** The permission prompts answered so far, with their decisions. */
  readonly decisions: ReadonlyArray<CallbackRecord>
}
