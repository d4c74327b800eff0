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
import type { ActionExecutor } from "../execution/ActionExecutor.ts"
import * as internal from "./internal/server.ts"
import type { Config, McpServer } from "./McpSession.ts"

/** The protocol versions writ speaks, newest first: a client asking for another gets the newest. */
export const protocolVersions: ReadonlyArray<string> = internal.protocolVersions

/** JSON-RPC 2.0's error codes as writ answers them. */
export const ErrorCode = internal.ErrorCode

/** What a session runs as, and its handler (declared in McpSession). */
export type { Config, McpServer, PermissionTool } from "./McpSession.ts"

/** An MCP action name's tool name: `.` becomes `_` (Claude and Gemini refuse dots in a tool's name). */
export const toolName: (action: string) => string = internal.toolName

/** A server for one session over the registry, executor and backend in context. */
export const make: (
  config: Config
) => Effect.Effect<McpServer, never, ActionRegistry | ActionExecutor | ActionExecutionBackend | IdGenerator> =
  internal.make
