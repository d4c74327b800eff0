/**
 * writ's MCP server, its message handling only: JSON-RPC 2.0, one message a line, with the protocol version
 * negotiated as the client asks. `tools/list` lists the registry's actions as tools (input schemas as JSON Schema);
 * `tools/call` runs one through the ActionExecutor with a context built from the server's configuration, never from
 * anything the client sends. A bad message is a JSON-RPC error naming what was wrong; a denial is a tool result with
 * `isError` and its reason code. The transport (stdio, a loopback bridge) is the runtime's.
 */
import type { Effect } from "effect"
import type { ActionExecutionBackend } from "../action/ActionExecutionBackend.ts"
import type { ActionRegistry } from "../action/ActionRegistry.ts"
import type { IdGenerator } from "../base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../base/Refs.ts"
import type * as StrictJson from "../base/StrictJson.ts"
import type { ActionExecutor } from "../execution/ActionExecutor.ts"
import type { CallbackDecision, CallbackRecord, ToolCall } from "../harness/HarnessAdapter.ts"
import type { AgentSubject, ExecutionCaller } from "../policy/InvocationContext.ts"
import * as internal from "./internal/server.ts"

/** The protocol versions writ speaks, newest first: a client asking for another gets the newest. */
export const protocolVersions: ReadonlyArray<string> = internal.protocolVersions

/** JSON-RPC 2.0's error codes as writ answers them. */
export const ErrorCode = internal.ErrorCode

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

/** An MCP action name's tool name: `.` becomes `_` (Claude and Gemini refuse dots in a tool's name). */
export const toolName: (action: string) => string = internal.toolName

/** A server for one session over the registry, executor and backend in context. */
export const make: (
  config: Config
) => Effect.Effect<McpServer, never, ActionRegistry | ActionExecutor | ActionExecutionBackend | IdGenerator> =
  internal.make
