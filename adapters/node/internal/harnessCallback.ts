/**
 * The blocking callback's server, for one run: HTTP on 127.0.0.1 only, on a free port, for the life of a scope. A
 * request without the run's bearer token is refused (401), an oversized or malformed one too (400), a replay of a call
 * already decided (its tool-use id seen before) too (409), and the hook denies on anything but a 200 `allow`; each
 * decision is writ's, through `decide` in the context `serve` was called in (the run's `HarnessRun` with it), and is
 * kept for the run's result with the run it was decided in. A refused request never reaches `decide`.
 */
import { Effect, Option, Runtime } from "effect"
import { timingSafeEqual } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import type { CallbackDecision, CallbackRecord, ToolCall } from "../../../core/harness/HarnessAdapter.ts"
import { HarnessError } from "../../../core/harness/HarnessAdapter.ts"
import * as HarnessRun from "../../../core/harness/HarnessRun.ts"

/** The most bytes of one hook request read. */
const maxBody = 1024 * 1024

const authorised = (header: string | undefined, token: string) => {
  const expected = Buffer.from(`Bearer ${token}`)
  const given = Buffer.from(header ?? "")
  return given.length === expected.length && timingSafeEqual(given, expected)
}

/** The tool call a hook's stdin JSON names, or undefined when it names none. */
export const toolCallOf = (body: string): ToolCall | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  if (typeof parsed !== "object" || parsed === null) return undefined
  const { tool_input, tool_name, tool_use_id } = parsed as Record<string, unknown>
  if (typeof tool_name !== "string" || tool_name === "") return undefined
  return { tool: tool_name, input: tool_input ?? null, call_id: typeof tool_use_id === "string" ? tool_use_id : "" }
}

const answer = (res: http.ServerResponse, status: number, body: CallbackDecision) => {
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

/** A running callback server: its URL, and the decisions it gave so far. */
export interface CallbackServer {
  readonly url: string
  readonly decisions: ReadonlyArray<CallbackRecord>
}

/** writ's MCP server's handler for a run, served on the callback's `/mcp` route (one JSON-RPC message a request). */
export type McpHandler = (line: string) => Effect.Effect<string | undefined>

/** The most bytes of one MCP message read. */
const maxMcpBody = 4 * 1024 * 1024

/** One MCP message from writ's bridge: answered 200 with the reply, 204 for a notification, 413 when oversized. */
const serveMcp = (
  req: http.IncomingMessage,
  res: http.ServerResponse,
  mcp: McpHandler,
  runtime: Runtime.Runtime<never>
) => {
  const chunks: Array<Buffer> = []
  let size = 0
  req.on("data", (chunk: Buffer) => {
    size += chunk.length
    if (size <= maxMcpBody) chunks.push(chunk)
  })
  req.on("end", () => {
    if (size > maxMcpBody) {
      res.writeHead(413)
      return res.end()
    }
    Runtime.runPromise(runtime)(mcp(Buffer.concat(chunks).toString("utf-8"))).then(
      (reply) => {
        res.writeHead(reply === undefined ? 204 : 200, { "content-type": "application/json" })
        res.end(reply ?? "")
      },
      () => {
        res.writeHead(500)
        res.end()
      }
    )
  })
}

/** Serve `decide` (and writ's MCP server on `/mcp`, when given) on 127.0.0.1 behind `token` until the scope closes. */
export const serve = (token: string, decide: (call: ToolCall) => Effect.Effect<CallbackDecision>, mcp?: McpHandler) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const decisions: Array<CallbackRecord> = []
    const seen = new Set<string>()
    const server = http.createServer((req, res) => {
      if (req.method !== "POST" || !authorised(req.headers.authorization, token)) {
        req.resume()
        return answer(res, 401, { decision: "deny", reason: "not this run's callback" })
      }
      if (req.url === "/mcp") {
        if (mcp !== undefined) return serveMcp(req, res, mcp, runtime)
        req.resume()
        return answer(res, 404, { decision: "deny", reason: "this run serves no MCP server" })
      }
      const chunks: Array<Buffer> = []
      let size = 0
      req.on("data", (chunk: Buffer) => {
        size += chunk.length
        if (size <= maxBody) chunks.push(chunk)
      })
      req.on("end", () => {
        const call = size > maxBody ? undefined : toolCallOf(Buffer.concat(chunks).toString("utf-8"))
        if (call === undefined) return answer(res, 400, { decision: "deny", reason: "malformed callback request" })
        if (call.call_id !== "" && seen.has(call.call_id)) {
          return answer(res, 409, { decision: "deny", reason: "this call was already decided" })
        }
        if (call.call_id !== "") seen.add(call.call_id)
        Runtime.runPromise(runtime)(Effect.zip(decide(call), HarnessRun.current)).then(
          ([decision, run]) => {
            decisions.push(Option.isSome(run) ? { call, decision, run: run.value } : { call, decision })
            answer(res, 200, decision)
          },
          () => answer(res, 500, { decision: "deny", reason: "writ could not decide" })
        )
      })
    })
    const port = yield* Effect.acquireRelease(
      Effect.async<number, HarnessError>((resume) => {
        server.once(
          "error",
          (error) =>
            resume(Effect.fail(new HarnessError({ reason: "spawn_failed", detail: `callback: ${error.message}` })))
        )
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    return { url: `http://127.0.0.1:${port}/pre-tool`, decisions } satisfies CallbackServer
  })
