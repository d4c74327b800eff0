/**
 * writ's MCP server as a provider CLI starts it for a harness run: a stdio program (run with Node) that reads the
 * run's callback URL and token from `file` and posts each JSON-RPC line to the callback's `/mcp` route, where the
 * harness answers it with its McpServer; each answer goes back on stdout, the only thing written there. Unreachable,
 * a timeout or a refusal answers a request with a JSON-RPC error, never a result. Runtimes: Node (the program it
 * writes).
 */

/** The bridge's program text, reading the callback from `file`. */
export const program = (file: string) =>
  `import { readFileSync } from "node:fs"
import { createInterface } from "node:readline"
const { url, token } = JSON.parse(readFileSync(${JSON.stringify(file)}, "utf-8"))
const endpoint = url.replace(/\\/pre-tool$/, "/mcp")
const fail = (id, message) => {
  if (id !== null) process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32603, message } }) + "\\n")
}
createInterface({ input: process.stdin, crlfDelay: Infinity }).on("line", async (line) => {
  if (line.trim() === "") return
  let id = null
  try {
    const parsed = JSON.parse(line)
    if (typeof parsed.id === "string" || typeof parsed.id === "number") id = parsed.id
  } catch {}
  try {
    const res = await fetch(endpoint, { method: "POST", body: line,
      headers: { authorization: "Bearer " + token, "content-type": "application/json" },
      signal: AbortSignal.timeout(600000) })
    const text = await res.text()
    if (!res.ok) return fail(id, "writ refused the call (" + res.status + ")")
    if (text !== "") process.stdout.write(text.replace(/\\n/g, "") + "\\n")
  } catch { fail(id, "writ is unreachable") }
})
`
