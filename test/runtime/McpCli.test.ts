// `writ mcp serve`, the built binary over real stdio: stdout carries only protocol lines, an oversized line is
// answered with a parse error and the session goes on, calls run through the executor under the command line's
// context, and a client's claim to another origin changes nothing.
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { bin, build } from "../fixtures/cli.ts"

beforeAll(async () => {
  const built = await build()
  assert.strictEqual(built.status, 0, built.stdout)
}, 240_000)

/** Run the server with `args`, write `lines` to its stdin, close it, and collect both streams and the exit code. */
const session = (args: ReadonlyArray<string>, lines: ReadonlyArray<string>) =>
  new Promise<{ readonly out: ReadonlyArray<any>; readonly stderr: string; readonly code: number | null }>(
    (resolve) => {
      const child = spawn("node", [bin, "mcp", "serve", ...args], { stdio: ["pipe", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.on("data", (d) => (stdout += d))
      child.stderr.on("data", (d) => (stderr += d))
      child.on(
        "close",
        (code) => resolve({ out: stdout.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l)), stderr, code })
      )
      for (const line of lines) child.stdin.write(`${line}\n`)
      child.stdin.end()
    }
  )

const init = JSON.stringify({
  jsonrpc: "2.0",
  id: 0,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "test", version: "1" } }
})
const call = (id: number, name: string, args: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, ...extra } })

describe("writ mcp serve (built binary, real stdio)", () => {
  it(
    "answers each request on stdout, in JSON lines only; denials are tool results; exit 0 at end of input",
    async () => {
      const ran = await session(["--origin", "self"], [
        init,
        JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
        JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
        call(2, "calc_add", { a: 2, b: 40 }),
        call(3, "shell_exec", { command: "rm -rf /" }),
        // The demo policy runs notes only on a user's request: a client claiming one is still the agent's own call.
        call(4, "notes_read", { id: "todo" }, { _meta: { origin: "USER" }, context: { origin: "USER" } }),
        "{not json"
      ])
      assert.strictEqual(ran.code, 0, ran.stderr)
      const byId = new Map(ran.out.map((m) => [m.id, m]))
      assert.strictEqual(byId.get(0).result.protocolVersion, "2025-06-18")
      assert.include(byId.get(1).result.tools.map((t: { name: string }) => t.name), "calc_add")
      assert.deepStrictEqual(byId.get(2).result, {
        content: [{ type: "text", text: "42" }],
        isError: false,
        structuredContent: { result: 42 }
      })
      assert.isTrue(byId.get(3).result.isError)
      assert.match(byId.get(3).result.content[0].text, /^denied: /)
      assert.isTrue(byId.get(4).result.isError)
      assert.match(byId.get(4).result.content[0].text, /^denied: origin\./)
      assert.strictEqual(byId.get(null).error.code, -32700)
      assert.strictEqual(ran.out.length, 6)
    },
    60_000
  )

  it("the same notes call from a server configured for a user's requests runs", async () => {
    const ran = await session(["--origin", "user"], [init, call(1, "notes_read", { id: "todo" })])
    assert.deepStrictEqual(ran.out[1].result, {
      content: [{ type: "text", text: "\"ship the executor\"" }],
      isError: false,
      structuredContent: { result: "ship the executor" }
    })
  }, 60_000)

  it(
    "a line over the transport's bound (4 MiB) is dropped with a parse error, and the next one is answered",
    async () => {
      const ran = await session([], [
        init,
        call(1, "calc_add", { a: "x".repeat(5 * 1024 * 1024) }),
        call(2, "calc_add", {
          a: 1,
          b: 2
        })
      ])
      assert.strictEqual(ran.code, 0, ran.stderr)
      assert.strictEqual(ran.out[1].id, null)
      assert.strictEqual(ran.out[1].error.code, -32700)
      assert.match(ran.out[1].error.message, /longer than 4194304 bytes/)
      assert.deepStrictEqual(ran.out[2].result.content, [{ type: "text", text: "3" }])
    },
    60_000
  )

  it("bad options are bad input (exit 2) and nothing is served", async () => {
    const ran = await session(["--permission-tool", "a b"], [init])
    assert.strictEqual(ran.code, 2)
    assert.deepStrictEqual(ran.out, [])
  }, 60_000)
})
