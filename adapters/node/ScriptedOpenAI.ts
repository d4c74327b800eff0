/**
 * A scripted model on 127.0.0.1 speaking enough of the OpenAI Responses SSE protocol to make the real `codex` CLI
 * attempt scripted tool calls: a request whose input carries N tool outputs gets the (N+1)th scripted call, and one
 * with no call left ends the turn with a message. writ's own `--verify` drives the real CLI with it. Runtimes: Node.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** One tool call the model asks for: the tool's name and its JSON arguments. */
export interface ScriptedCall {
  readonly name: string
  readonly input: Record<string, unknown>
  /** The namespace of a namespaced tool (codex lists an MCP server's tools under `mcp__<server>`). */
  readonly namespace?: string
  /** A freeform (custom) tool's raw input, sent as a `custom_tool_call` instead of a function call (codex's apply_patch). */
  readonly freeform?: string
}

/** A running scripted model: its base URL (ending in `/v1`), the requests it answered, and how to stop it. */
export interface ScriptedModel {
  readonly baseUrl: string
  readonly requests: Array<unknown>
  readonly close: () => Promise<void>
}

const event = (data: { readonly type: string }) => `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`

const reply = (id: string, call: ScriptedCall | undefined, turn: number) => {
  const item = call === undefined
    ? {
      type: "message",
      id: `msg_${id}`,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: "finished", annotations: [] }]
    }
    : call.freeform !== undefined
    ? {
      type: "custom_tool_call",
      id: `ctc_${id}`,
      call_id: `call_${turn}`,
      name: call.name,
      input: call.freeform,
      status: "completed"
    }
    : {
      type: "function_call",
      id: `fc_${id}`,
      call_id: `call_${turn}`,
      name: call.name,
      ...(call.namespace === undefined ? {} : { namespace: call.namespace }),
      arguments: JSON.stringify(call.input),
      status: "completed"
    }
  const response = { id: `resp_${id}`, object: "response", status: "in_progress", output: [] }
  return event({ type: "response.created", response } as never) +
    event({ type: "response.output_item.added", output_index: 0, item } as never) +
    event({ type: "response.output_item.done", output_index: 0, item } as never) +
    event({
      type: "response.completed",
      response: {
        ...response,
        status: "completed",
        output: [item],
        usage: {
          input_tokens: 10,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: 5,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 15
        }
      }
    } as never)
}

interface Request {
  readonly input?: ReadonlyArray<{ readonly type?: string }>
}

/** Start a scripted model that asks for `calls` in order, one per turn. */
export const start = (calls: ReadonlyArray<ScriptedCall>): Promise<ScriptedModel> => {
  const requests: Array<unknown> = []
  let replies = 0
  const server = http.createServer((req, res) => {
    let body = ""
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf-8")))
    req.on("end", () => {
      if (req.method !== "POST" || !req.url?.startsWith("/v1/responses")) {
        res.writeHead(404, { "content-type": "application/json" })
        return res.end("{\"error\":{\"message\":\"not scripted\"}}")
      }
      let parsed: Request
      try {
        parsed = JSON.parse(body) as Request
      } catch {
        res.writeHead(400, { "content-type": "application/json" })
        return res.end("{\"error\":{\"message\":\"not JSON\"}}")
      }
      requests.push(parsed)
      // The turn is the number of tool outputs codex has sent back so far.
      const turn = (parsed.input ?? []).filter((item) => item.type?.endsWith("_output") === true).length
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.end(reply(`r${++replies}`, calls[turn], turn))
    })
  })
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        baseUrl: `http://127.0.0.1:${port}/v1`,
        requests,
        close: () => new Promise((done) => server.close(() => done()))
      })
    })
  )
}
