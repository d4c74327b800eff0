// writ's MCP server, message by message: protocol negotiation, tools as the registry's actions, each call through the
// policy-gated executor with the server's own context (what the client sends about who it is changes nothing), denials
// as tool results with their reason code, and hostile messages answered with an error naming what was wrong.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as ExecutionScope from "../../core/execution/ExecutionScope.ts"
import type { ToolCall } from "../../core/harness/HarnessAdapter.ts"
import * as HarnessPolicy from "../../core/harness/HarnessPolicy.ts"
import * as HarnessRun from "../../core/harness/HarnessRun.ts"
import * as McpServer from "../../core/mcp/McpServer.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { claudePlanAndReport } from "../fixtures/harnessPlan.ts"
import { base } from "../fixtures/layers.ts"

/** What the handlers ran: a call the policy denies must never appear here. */
const ran: Array<string> = []

const actions = [
  Action.make({
    name: "notes.read",
    description: "Read a note",
    input: Schema.Struct({ id: Schema.String }),
    output: Schema.String,
    handler: ({ id }) => (ran.push(`notes.read ${id}`), `note ${id}`)
  }),
  Action.make({
    name: "calc.add",
    description: "Add two integers",
    input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
    output: Schema.Int,
    handler: ({ a, b }) => (ran.push("calc.add"), a + b)
  }),
  Action.make({
    name: "shell.exec",
    description: "Run a command",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["process.spawn"],
    handler: ({ command }) => (ran.push(`shell.exec ${command}`), "ran")
  })
]

const agent = InvocationContext.agent("mcp-agent")

/** Arithmetic allowed; notes only on a user's behalf; shell commands only `touch`. */
const policy = {
  policy_id: "mcp-test",
  version: "1",
  mode: "rules",
  allow: { "calc.add": ["*"], "notes.read": ["*"], "shell.exec": ["touch *"] },
  rules: [{ kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER"] }]
} as const

const layer = ActionExecutor.layerPolicyGated({}, { boundAgent: agent }).pipe(
  Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base(actions))))
)

const installed = Effect.gen(function*() {
  const snapshot = yield* Effect.orDie(Effect.flatMap(PermissionPolicy.decode(policy), PolicySnapshot.compile))
  const store = yield* PolicySnapshotStore
  yield* Effect.orDie(store.put(snapshot))
  yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "test", yield* Time.now))
  return snapshot
})

/** A server under the test policy for `origin`, already initialized, and a way to send it one message. */
const session = (
  origin: "USER" | "SELF",
  options: { readonly initialize?: boolean; readonly permission?: boolean } = {}
) =>
  Effect.gen(function*() {
    const snapshot = yield* installed
    const server = yield* McpServer.make({
      principal: "alice",
      origin,
      agent,
      policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
      limits: { maxDepth: 64, maxSize: 64 * 1024 },
      ...(options.permission === true
        ? { permission: { name: "permission_prompt", decide: HarnessPolicy.decider(snapshot, "alice") } }
        : {})
    })
    const send = (message: unknown) =>
      Effect.map(
        server.handle(typeof message === "string" ? message : JSON.stringify(message)),
        (out) => (out === undefined ? undefined : JSON.parse(out))
      )
    if (options.initialize !== false) {
      yield* send({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18" } })
    }
    return { send, server }
  })

const callTool = (id: number, name: string, args: unknown, extra: Record<string, unknown> = {}) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name, arguments: args, ...extra }
})

describe("McpServer: the protocol", () => {
  it.effect("initialize echoes a version writ speaks and answers another with its newest", () =>
    Effect.gen(function*() {
      const { send } = yield* session("USER", { initialize: false })
      const known = yield* send({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-03-26" }
      })
      assert.strictEqual(known.result.protocolVersion, "2025-03-26")
      assert.deepStrictEqual(known.result.capabilities, { tools: { listChanged: false } })
      assert.strictEqual(known.result.serverInfo.name, "writ")
      const unknown = yield* send({ jsonrpc: "2.0", id: 2, method: "initialize", params: { protocolVersion: "1999" } })
      assert.strictEqual(unknown.result.protocolVersion, McpServer.protocolVersions[0])
      const missing = yield* send({ jsonrpc: "2.0", id: 3, method: "initialize", params: {} })
      assert.deepStrictEqual(missing.error, { code: -32602, message: "params.protocolVersion must be a string" })
      assert.deepStrictEqual((yield* send({ jsonrpc: "2.0", id: "p", method: "ping" })).result, {})
    }).pipe(Effect.provide(layer)))

  it.effect("tools are refused before initialize; notifications get no answer", () =>
    Effect.gen(function*() {
      const { send } = yield* session("USER", { initialize: false })
      const early = yield* send({ jsonrpc: "2.0", id: 1, method: "tools/list" })
      assert.deepStrictEqual(early.error, { code: -32600, message: "the session is not initialized" })
      assert.isUndefined(yield* send({ jsonrpc: "2.0", method: "notifications/initialized" }))
      assert.isUndefined(yield* send({ jsonrpc: "2.0", method: "tools/call", params: { name: "calc_add" } }))
    }).pipe(Effect.provide(layer)))

  it.effect("tools/list: each action by its tool name, with its input schema as an object JSON Schema", () =>
    Effect.gen(function*() {
      const { send } = yield* session("USER", { permission: true })
      const listed = (yield* send({ jsonrpc: "2.0", id: 1, method: "tools/list" })).result.tools
      assert.deepStrictEqual(listed.map((t: { name: string }) => t.name), [
        "notes_read",
        "calc_add",
        "shell_exec",
        "permission_prompt"
      ])
      const add = listed.find((t: { name: string }) => t.name === "calc_add")
      assert.strictEqual(add.description, "Add two integers")
      assert.strictEqual(add.inputSchema.type, "object")
      assert.deepStrictEqual(add.inputSchema.required, ["a", "b"])
      assert.isUndefined(add.inputSchema.$schema)
    }).pipe(Effect.provide(layer)))
})

describe("McpServer: tools/call runs through the executor under the server's context", () => {
  it.effect("an allowed call runs its handler and returns its result", () =>
    Effect.gen(function*() {
      ran.length = 0
      const { send } = yield* session("USER")
      const answer = yield* send(callTool(1, "calc_add", { a: 2, b: 40 }))
      assert.deepStrictEqual(answer.result, {
        content: [{ type: "text", text: "42" }],
        isError: false,
        structuredContent: { result: 42 }
      })
      assert.deepStrictEqual(ran, ["calc.add"])
    }).pipe(Effect.provide(layer)))

  it.effect("a denied call is a tool result with isError and the reason code, and its handler never runs", () =>
    Effect.gen(function*() {
      ran.length = 0
      const { send } = yield* session("USER")
      const answer = yield* send(callTool(1, "shell_exec", { command: "rm -rf /" }))
      assert.isTrue(answer.result.isError)
      assert.match(answer.result.content[0].text, /^denied: policy\./)
      const invalid = yield* send(callTool(2, "calc_add", { a: "two", b: 40 }))
      assert.isTrue(invalid.result.isError)
      assert.deepStrictEqual(ran, [])
      yield* send(callTool(3, "shell_exec", { command: "touch x" }))
      assert.deepStrictEqual(ran, ["shell.exec touch x"])
    }).pipe(Effect.provide(layer)))

  it.effect("a context the client supplies (origin, principal, policy, in _meta or params) is ignored", () =>
    Effect.gen(function*() {
      ran.length = 0
      const claims = {
        _meta: { origin: "USER", principal: "root", policy_snapshot: { policy_id: "open", version: "1" } },
        context: { origin: "USER", authenticated_principal: { id: "root" } },
        origin: "USER"
      }
      const self = yield* session("SELF")
      const refused = yield* self.send(callTool(1, "notes_read", { id: "todo" }, claims))
      assert.isTrue(refused.result.isError)
      assert.match(refused.result.content[0].text, /^denied: origin\./)
      assert.deepStrictEqual(ran, [])
      // The same call from a server configured for a user's requests runs.
      const user = yield* session("USER")
      const allowed = yield* user.send(callTool(2, "notes_read", { id: "todo" }))
      assert.deepStrictEqual(allowed.result.content, [{ type: "text", text: "\"note todo\"" }])
      assert.deepStrictEqual(ran, ["notes.read todo"])
    }).pipe(Effect.provide(layer)))
})

describe("McpServer: hostile messages get a JSON-RPC error naming what was wrong", () => {
  const deep = (n: number): unknown => (n === 0 ? 1 : { a: deep(n - 1) })
  const cases: ReadonlyArray<readonly [string, unknown, number, RegExp]> = [
    ["malformed JSON", "{\"jsonrpc\":\"2.0\",", -32700, /^parse error: syntax/],
    ["a duplicate key", "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", -32700, /duplicate_key/],
    ["a __proto__ key", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"__proto__\":{}}", -32700, /proto_key/],
    ["deep params", callTool(1, "calc_add", deep(200)), -32700, /^parse error: too_deep/],
    ["huge params", callTool(1, "calc_add", { a: "x".repeat(100_000) }), -32700, /^parse error: too_large/],
    ["a batch", [{ jsonrpc: "2.0", id: 1, method: "ping" }], -32600, /^batches are not supported$/],
    ["a scalar", 42, -32600, /^a message is an object$/],
    ["a float id", { jsonrpc: "2.0", id: 1.5, method: "ping" }, -32600, /^id must be a string or an integer$/],
    ["JSON-RPC 1.0", { jsonrpc: "1.0", id: 1, method: "ping" }, -32600, /^jsonrpc must be "2.0"$/],
    ["no method", { jsonrpc: "2.0", id: 1 }, -32600, /^method must be a string$/],
    [
      "an unknown method",
      { jsonrpc: "2.0", id: 1, method: "resources/list" },
      -32601,
      /^method not found: resources\/list$/
    ],
    ["params as an array", { jsonrpc: "2.0", id: 1, method: "tools/call", params: [] }, -32602, /^params must be/],
    ["no tool name", { jsonrpc: "2.0", id: 1, method: "tools/call", params: {} }, -32602, /^params.name must be/],
    ["an unknown tool", callTool(1, "net_scan", {}), -32602, /^unknown tool: net_scan$/],
    ["arguments not an object", callTool(1, "calc_add", [1, 2]), -32602, /^params.arguments must be an object$/],
    ["an action's own name", callTool(1, "calc.add", { a: 1, b: 2 }), -32602, /^unknown tool: calc.add$/]
  ]
  for (const [name, message, code, pattern] of cases) {
    it.effect(name, () =>
      Effect.gen(function*() {
        ran.length = 0
        const { send } = yield* session("USER")
        const answer = yield* send(message)
        assert.strictEqual(answer.jsonrpc, "2.0")
        assert.strictEqual(answer.error.code, code)
        assert.match(answer.error.message, pattern)
        assert.isUndefined(answer.result)
        assert.deepStrictEqual(ran, [])
      }).pipe(Effect.provide(layer)))
  }
})

describe("McpServer: the permission-prompt tool answers by the harness's policy evaluation", () => {
  it.effect("allow carries the input back; deny carries writ's reason; each decision is recorded", () =>
    Effect.gen(function*() {
      ran.length = 0
      const { send, server } = yield* session("USER", { permission: true })
      const prompt = (id: number, input: unknown) =>
        Effect.map(
          send(callTool(id, "permission_prompt", { tool_name: "Bash", input, tool_use_id: `t${id}` })),
          (answer) => JSON.parse(answer.result.content[0].text)
        )
      assert.deepStrictEqual(yield* prompt(1, { command: "touch a" }), {
        behavior: "allow",
        updatedInput: { command: "touch a" }
      })
      const denied = yield* prompt(2, { command: "rm -rf /" })
      assert.strictEqual(denied.behavior, "deny")
      assert.match(denied.message, /^writ: /)
      const nameless = yield* send(callTool(3, "permission_prompt", { input: {} }))
      assert.strictEqual(JSON.parse(nameless.result.content[0].text).behavior, "deny")
      assert.deepStrictEqual(
        server.decisions.map((d) => [d.call.tool, d.call.call_id, d.decision.decision]),
        [["Bash", "t1", "allow"], ["Bash", "t2", "deny"]]
      )
      // The prompt only decides: nothing ran.
      assert.deepStrictEqual(ran, [])
    }).pipe(Effect.provide(layer)))

  it.effect("its answers agree with the hook's decider on the same calls", () =>
    Effect.gen(function*() {
      const snapshot = yield* installed
      const hook = HarnessPolicy.decider(snapshot, "alice")
      const { send } = yield* session("USER", { permission: true })
      const calls: ReadonlyArray<ToolCall> = [
        { tool: "Bash", input: { command: "touch ok" }, call_id: "1" },
        { tool: "Bash", input: { command: "bash -c 'touch no'" }, call_id: "2" },
        { tool: "Write", input: { file_path: "/etc/passwd", content: "x" }, call_id: "3" }
      ]
      for (const [i, call] of calls.entries()) {
        const answer = yield* send(callTool(i, "permission_prompt", { tool_name: call.tool, input: call.input }))
        const behavior = JSON.parse(answer.result.content[0].text).behavior
        assert.strictEqual(behavior, (yield* hook(call)).decision)
      }
    }).pipe(Effect.provide(layer)))
})

/** A harness run's attachment: a small plan and its report, attached to an ephemeral scope of the run's own. */
const attachedRun = Effect.gen(function*() {
  const { plan, report } = claudePlanAndReport({ digest: "a", plan: { workspace: "/srv/ws", home: "/srv/home" } })
  const scope = ExecutionScope.EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
  return yield* Effect.orDie(HarnessRun.attach({ plan, report }, scope))
})

describe("McpServer inside a harness run: each call runs in the run's execution scope", () => {
  it.effect("a call inside the run is in its scope, a call outside in a fresh one; prompts record the run", () =>
    Effect.gen(function*() {
      const executor = yield* ActionExecutor.ActionExecutor
      const scopes: Array<ExecutionScope.ExecutionScopeRef> = []
      const recorded: ActionExecutor.ActionExecutor["Type"] = {
        ...executor,
        execute: (request, options) =>
          Effect.zipRight(Effect.sync(() => scopes.push(request.execution_scope)), executor.execute(request, options))
      }
      const { send, server } = yield* session("USER", { permission: true }).pipe(
        Effect.provideService(ActionExecutor.ActionExecutor, recorded)
      )
      const attached = yield* attachedRun
      const inRun = HarnessRun.within(attached)
      const added = (id: number) => Effect.map(send(callTool(id, "calc_add", { a: 1, b: 2 })), (a) => a.result)
      const [first, second] = [yield* inRun(added(1)), yield* inRun(added(2))]
      assert.deepStrictEqual([first.isError, second.isError], [false, false])
      yield* added(3)
      yield* added(4)
      assert.strictEqual(scopes.length, 4)
      assert.isTrue(ExecutionScope.equals(scopes[0]!, attached.scope))
      assert.isTrue(ExecutionScope.equals(scopes[1]!, attached.scope))
      // Outside any run: an ephemeral operation per call, neither the run's nor each other's.
      assert.strictEqual(scopes[2]!._tag, "ephemeral_operation")
      assert.isFalse(ExecutionScope.equals(scopes[2]!, attached.scope))
      assert.isFalse(ExecutionScope.equals(scopes[2]!, scopes[3]!))
      yield* inRun(send(callTool(5, "permission_prompt", { tool_name: "Bash", input: { command: "touch a" } })))
      yield* send(callTool(6, "permission_prompt", { tool_name: "Bash", input: { command: "touch b" } }))
      assert.deepStrictEqual(server.decisions.map((d) => d.run), [attached, undefined])
    }).pipe(Effect.provide(layer)))
})
