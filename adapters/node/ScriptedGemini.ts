/**
 * A scripted model on 127.0.0.1 speaking enough of the Gemini API to make the real `gemini` CLI attempt scripted tool
 * calls: `:streamGenerateContent?alt=sse` answers the conversation's Nth model turn with the Nth scripted
 * `functionCall` (text once none is left), and the router's JSON-mode `:generateContent` gets a valid routing answer.
 * writ's own `--verify` drives the real CLI with it. Runtimes: Node.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import type { ScriptedCall, ScriptedModel } from "./ScriptedAnthropic.ts"

/** One tool call the model asks for (`input` becomes the call's `args`). */
export type { ScriptedCall, ScriptedModel }

const usage = { promptTokenCount: 3, candidatesTokenCount: 2, totalTokenCount: 5 }

const chunk = (call: ScriptedCall | undefined) => ({
  candidates: [{
    content: {
      role: "model",
      parts: call === undefined ? [{ text: "finished" }] : [{ functionCall: { name: call.name, args: call.input } }]
    },
    finishReason: "STOP",
    index: 0
  }],
  usageMetadata: usage
})

// Both of the router's classifiers accept this answer; a wrong one only costs gemini a logged error.
const routing = {
  candidates: [{
    content: {
      role: "model",
      parts: [{
        text: JSON.stringify({
          reasoning: "scripted",
          model_choice: "flash",
          complexity_reasoning: "scripted",
          complexity_score: 1
        })
      }]
    },
    finishReason: "STOP",
    index: 0
  }],
  usageMetadata: usage
}

interface Request {
  readonly contents?: ReadonlyArray<{ readonly role?: string }>
}

/** Start a scripted model that asks for `calls` in order, one per model turn. */
export const start = (calls: ReadonlyArray<ScriptedCall>): Promise<ScriptedModel> => {
  const requests: Array<unknown> = []
  const server = http.createServer((req, res) => {
    let body = ""
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf-8")))
    req.on("end", () => {
      const url = req.url ?? ""
      if (url.includes(":streamGenerateContent")) {
        const parsed = JSON.parse(body) as Request
        requests.push(parsed)
        // The turn is the number of model messages so far: each answered call adds one.
        const turn = (parsed.contents ?? []).filter((c) => c.role === "model").length
        res.writeHead(200, { "content-type": "text/event-stream" })
        return res.end(`data: ${JSON.stringify(chunk(calls[turn]))}\n\n`)
      }
      res.writeHead(200, { "content-type": "application/json" })
      res.end(url.includes(":generateContent") ? JSON.stringify(routing) : "{}")
    })
  })
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        baseUrl: `http://127.0.0.1:${port}`,
        requests,
        close: () =>
          new Promise((done) => {
            server.close(() => done())
            server.closeAllConnections()
          })
      })
    })
  )
}
