/**
 * writ's MCP server over stdio: one JSON-RPC message a line on stdin, each answer a line on stdout (stdout is the
 * protocol; nothing else is written there). A line longer than the bound is read to its end, dropped and answered
 * with a parse error; calls run concurrently up to a bound, each answer written whole. Runtimes: Node.
 */
import { Effect, Runtime } from "effect"
import type { Readable, Writable } from "node:stream"
import type { McpServer } from "../../core/mcp/McpServer.ts"
import { ErrorCode } from "../../core/mcp/McpServer.ts"

/** How the transport reads: the longest line kept (bytes) and how many messages are handled at once. */
export interface Options {
  readonly maxLineBytes?: number
  readonly concurrency?: number
}

const tooLarge = (bound: number) =>
  `{"error":{"code":${ErrorCode.parseError},"message":"parse error: a message longer than ${bound} bytes"},` +
  "\"id\":null,\"jsonrpc\":\"2.0\"}"

/** Serve `server` on `input` and `output` until the input ends and every message taken has been answered. */
export const serve = (server: McpServer, input: Readable, output: Writable, options: Options = {}) =>
  Effect.gen(function*() {
    const bound = options.maxLineBytes ?? 4 * 1024 * 1024
    const semaphore = yield* Effect.makeSemaphore(options.concurrency ?? 16)
    const runtime = yield* Effect.runtime<never>()
    const write = (line: string) => Effect.sync(() => void output.write(`${line}\n`))
    const answer = (line: string) =>
      semaphore.withPermits(1)(
        Effect.flatMap(server.handle(line), (out) => (out === undefined ? Effect.void : write(out)))
      )
    yield* Effect.async<void>((resume) => {
      const pending = new Set<Promise<void>>()
      let chunks: Array<Buffer> = []
      let size = 0
      let dropping = false
      const take = (line: Buffer) => {
        const text = line.toString("utf-8").replace(/\r$/, "")
        if (text.trim() === "") return
        const done = Runtime.runPromiseExit(runtime)(answer(text)).then(() => {
          pending.delete(done)
        })
        pending.add(done)
      }
      const onData = (data: Buffer) => {
        let start = 0
        for (let at = data.indexOf(10, start); at !== -1; at = data.indexOf(10, start)) {
          const piece = data.subarray(start, at)
          if (dropping || size + piece.length > bound) {
            output.write(`${tooLarge(bound)}\n`)
          } else {
            take(Buffer.concat([...chunks, piece]))
          }
          chunks = []
          size = 0
          dropping = false
          start = at + 1
        }
        const rest = data.subarray(start)
        if (dropping) return
        if (size + rest.length > bound) {
          dropping = true
          chunks = []
          size = 0
        } else if (rest.length > 0) {
          chunks.push(Buffer.from(rest))
          size += rest.length
        }
      }
      const onEnd = () => {
        if (dropping) output.write(`${tooLarge(bound)}\n`)
        else if (size > 0) take(Buffer.concat(chunks))
        void Promise.all(pending).then(() => resume(Effect.void))
      }
      input.on("data", onData).once("end", onEnd).once("error", onEnd)
      return Effect.sync(() => {
        input.off("data", onData).off("end", onEnd).off("error", onEnd)
      })
    })
  })
