import { Effect, Either, Option } from "effect"
import type { ActionDescriptor } from "../../action/ActionDescriptor.ts"
import { ActionExecutionBackend } from "../../action/ActionExecutionBackend.ts"
import { ActionRegistry } from "../../action/ActionRegistry.ts"
import * as Canonical from "../../base/Canonical.ts"
import { IdGenerator } from "../../base/IdGenerator.ts"
import * as StrictJson from "../../base/StrictJson.ts"
import { ActionExecutor } from "../../execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../execution/ExecutionOutcome.ts"
import { reasonCode } from "../../execution/ExecutionOutcome.ts"
import * as Ingress from "../../execution/Ingress.ts"
import type { CallbackRecord } from "../../harness/HarnessAdapter.ts"
import * as HarnessRun from "../../harness/HarnessRun.ts"
import * as InvocationContext from "../../policy/InvocationContext.ts"
import type { Config, McpServer } from "../McpSession.ts"

export const protocolVersions: ReadonlyArray<string> = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

export const ErrorCode = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603
} as const

export const toolName = (action: string) => action.replaceAll(".", "_")

type Id = string | number | null

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A message's text; a value with no canonical form (a float in an action's output) is refused, never guessed at. */
const text = (value: unknown) =>
  Either.getOrElse(
    Canonical.stringify(value),
    () => "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"the answer has no JSON form\"}}"
  )

const reply = (id: Id, result: unknown) => text({ jsonrpc: "2.0", id, result })

const fail = (id: Id, code: number, message: string) => text({ jsonrpc: "2.0", id, error: { code, message } })

/** A tool result: one text block, `isError` when the call did not succeed. */
const toolResult = (body: string, isError: boolean) => ({ content: [{ type: "text", text: body }], isError })

// A shown string is cut: an error names what was wrong, it never echoes a hostile value whole.
const shown = (value: string) => (value.length > 64 ? `${value.slice(0, 64)}...` : value)

/**
 * What an outcome tells the client: the result on success (as text, and as `structuredContent.result`: some clients
 * read a JSON text as structured content, which must be an object), else its tag and reason code.
 */
const outcomeResult = (outcome: ExecutionOutcome) =>
  outcome._tag === "succeeded"
    ? Either.match(Canonical.stringify(outcome.result ?? null), {
      onLeft: (e) => toolResult(`the action's result has no canonical JSON form (${e.reason})`, true),
      onRight: (body) => ({ ...toolResult(body, false), structuredContent: { result: outcome.result ?? null } })
    })
    : toolResult(`${outcome._tag}: ${reasonCode(outcome)}`, true)

const schemaOf = (descriptor: ActionDescriptor) => {
  const schema = descriptor.input_schema
  // MCP wants an object schema at the top: an action whose input is not one still gets a valid (empty) schema.
  if (isRecord(schema) && schema.type === "object") {
    const { $schema: _, ...rest } = schema
    return rest
  }
  return { type: "object", properties: {} }
}

const permissionSchema = {
  type: "object",
  properties: {
    tool_name: { type: "string" },
    input: { type: "object" },
    tool_use_id: { type: "string" }
  },
  required: ["tool_name", "input"]
}

interface Session {
  readonly config: Config
  readonly registry: ActionRegistry.Service
  readonly executor: ActionExecutor.Service
  readonly backend: ActionExecutionBackend.Service
  readonly ids: IdGenerator.Service
  readonly invocation: InvocationContext.EstablishedInvocation
  readonly decisions: Array<CallbackRecord>
  initialized: boolean
}

// --- tools: the registry's actions by tool name, then the permission tool ---

const tools = (session: Session) =>
  Effect.map(session.registry.list, (descriptors) => {
    const byName = new Map<string, ActionDescriptor>()
    for (const descriptor of descriptors) byName.set(toolName(descriptor.name), descriptor)
    if (session.config.permission !== undefined) byName.delete(session.config.permission.name)
    return byName
  })

const list = (session: Session) =>
  Effect.map(tools(session), (byName) => ({
    tools: [
      ...[...byName.values()].map((descriptor) => ({
        name: toolName(descriptor.name),
        description: descriptor.description,
        inputSchema: schemaOf(descriptor)
      })),
      ...(session.config.permission === undefined ? [] : [{
        name: session.config.permission.name,
        description: "writ's answer to a permission prompt: allow or deny one tool call by writ's policy",
        inputSchema: permissionSchema
      }])
    ]
  }))

// --- tools/call: a permission prompt, or an action through the executor ---

/** A permission prompt, answered allow only when writ's decider allows; anything malformed is a deny. */
const prompt = (session: Session, args: Record<string, unknown>) =>
  Effect.gen(function*() {
    const permission = session.config.permission!
    if (typeof args.tool_name !== "string" || args.tool_name === "") {
      return toolResult(text({ behavior: "deny", message: "writ: a permission prompt names no tool" }), false)
    }
    const call = {
      tool: args.tool_name,
      input: args.input ?? null,
      call_id: typeof args.tool_use_id === "string" ? args.tool_use_id : ""
    }
    const decision = yield* permission.decide(call)
    const run = yield* HarnessRun.current
    session.decisions.push(Option.isSome(run) ? { call, decision, run: run.value } : { call, decision })
    const answer = decision.decision === "allow"
      ? Canonical.stringify({ behavior: "allow", updatedInput: isRecord(args.input) ? args.input : {} })
      : Canonical.stringify({ behavior: "deny", message: `writ: ${decision.reason}` })
    return toolResult(
      Either.getOrElse(answer, () => text({ behavior: "deny", message: "writ: the tool input has no JSON form" })),
      false
    )
  })

/** One action called through the executor: the context is the configuration's, whatever the client sent. */
const call = (session: Session, id: Id, params: Record<string, unknown>) =>
  Effect.gen(function*() {
    const { config } = session
    if (typeof params.name !== "string") return fail(id, ErrorCode.invalidParams, "params.name must be a string")
    const args = params.arguments ?? {}
    if (!isRecord(args)) return fail(id, ErrorCode.invalidParams, "params.arguments must be an object")
    if (config.permission !== undefined && params.name === config.permission.name) {
      return reply(id, yield* prompt(session, args))
    }
    const descriptor = (yield* tools(session)).get(params.name)
    if (descriptor === undefined) return fail(id, ErrorCode.invalidParams, `unknown tool: ${shown(params.name)}`)
    // The configured scope, else the harness run's the server is serving in, else a fresh one per call.
    const scope = config.execution_scope ?? Option.getOrUndefined(Option.map(yield* HarnessRun.current, (r) => r.scope))
    const prepared = yield* Effect.either(
      Ingress.prepare({ action: descriptor.name, version: descriptor.version, arguments: args }, {
        principal: config.principal,
        effect_backend: session.backend.ref,
        ...(config.policy_snapshot === undefined ? {} : { policy_snapshot: config.policy_snapshot }),
        ...(scope === undefined ? {} : { execution_scope: scope })
      }).pipe(Effect.provideService(IdGenerator, session.ids))
    )
    if (Either.isLeft(prepared)) {
      return fail(id, ErrorCode.invalidParams, `the call cannot be prepared: ${prepared.left._tag}`)
    }
    const { context, request } = prepared.right
    const outcome = yield* Effect.either(
      InvocationContext.withInvocation(
        session.executor.execute(request, {
          context,
          ...(config.boundary === undefined ? {} : { boundary: config.boundary })
        }),
        session.invocation
      )
    )
    if (Either.isLeft(outcome)) {
      return fail(id, ErrorCode.internalError, `the executor could not record the call: ${outcome.left._tag}`)
    }
    return reply(id, outcomeResult(outcome.right))
  })

// --- dispatch: one request by its method ---

const dispatch = (session: Session, id: Id, method: string, params: Record<string, unknown>) =>
  Effect.gen(function*() {
    switch (method) {
      case "initialize": {
        const asked = params.protocolVersion
        if (typeof asked !== "string") {
          return fail(id, ErrorCode.invalidParams, "params.protocolVersion must be a string")
        }
        session.initialized = true
        return reply(id, {
          protocolVersion: protocolVersions.includes(asked) ? asked : protocolVersions[0],
          capabilities: { tools: { listChanged: false } },
          serverInfo: session.config.info ?? { name: "writ", version: "0.1.0" }
        })
      }
      case "ping":
        return reply(id, {})
      case "tools/list":
      case "tools/call": {
        if (!session.initialized) return fail(id, ErrorCode.invalidRequest, "the session is not initialized")
        return method === "tools/list" ? reply(id, yield* list(session)) : yield* call(session, id, params)
      }
      default:
        return fail(id, ErrorCode.methodNotFound, `method not found: ${shown(method)}`)
    }
  })

// --- one line: parsed strictly, checked as JSON-RPC 2.0, dispatched ---

const handle = (session: Session, limits: StrictJson.Limits) => (line: string): Effect.Effect<string | undefined> =>
  Effect.suspend(() => {
    const parsed = StrictJson.parse(line, limits)
    if (Either.isLeft(parsed)) {
      const { path, reason } = parsed.left
      return Effect.succeed(fail(null, ErrorCode.parseError, `parse error: ${reason} at ${path}`))
    }
    const message = parsed.right
    if (Array.isArray(message)) return Effect.succeed(fail(null, ErrorCode.invalidRequest, "batches are not supported"))
    if (!isRecord(message)) return Effect.succeed(fail(null, ErrorCode.invalidRequest, "a message is an object"))
    const raw = message.id
    if (raw !== undefined && typeof raw !== "string" && !Number.isSafeInteger(raw)) {
      return Effect.succeed(fail(null, ErrorCode.invalidRequest, "id must be a string or an integer"))
    }
    const id = raw as string | number | undefined
    if (message.jsonrpc !== "2.0") {
      return Effect.succeed(fail(id ?? null, ErrorCode.invalidRequest, "jsonrpc must be \"2.0\""))
    }
    if (typeof message.method !== "string") {
      // A response from the client (to a request writ never sent) is not answered.
      if (id !== undefined && ("result" in message || "error" in message)) return Effect.succeed(undefined)
      return Effect.succeed(fail(id ?? null, ErrorCode.invalidRequest, "method must be a string"))
    }
    // A notification (no id) is never answered: `notifications/initialized`, `notifications/cancelled` and others.
    if (id === undefined) return Effect.succeed(undefined)
    const params = message.params ?? {}
    if (!isRecord(params)) return Effect.succeed(fail(id, ErrorCode.invalidParams, "params must be an object"))
    return dispatch(session, id, message.method, params)
  })

export const make = (config: Config) =>
  Effect.gen(function*() {
    const agent = config.agent ?? InvocationContext.agent("mcp-client")
    const session: Session = {
      config,
      registry: yield* ActionRegistry,
      executor: yield* ActionExecutor,
      backend: yield* ActionExecutionBackend,
      ids: yield* IdGenerator,
      invocation: config.origin === "USER"
        ? InvocationContext.user(InvocationContext.human(config.principal), agent, config.principal, {})
        : config.origin === "SELF"
        ? InvocationContext.autonomous(agent, config.principal, {})
        : InvocationContext.otherAgent(InvocationContext.agent("mcp-caller"), agent, config.principal, {}),
      decisions: [],
      initialized: false
    }
    return {
      handle: handle(session, config.limits ?? StrictJson.defaultLimits),
      decisions: session.decisions
    } satisfies McpServer
  })
