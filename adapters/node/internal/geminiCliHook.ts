/**
 * The gemini-cli BeforeTool hook's program, which the Node host hands `GeminiCli.compile`: gemini runs it before each
 * tool call. Runtimes: Node (the program it writes).
 */

/**
 * The BeforeTool hook: posts the call to writ on loopback with the run's token and prints `{"decision":"deny"}`
 * unless writ answers allow. Unreachable, a timeout, a non-2xx or a malformed answer is a deny; a crash exits 2
 * (blocking), never 1.
 */
export const script = (file: string) =>
  `import { readFileSync } from "node:fs"
const deny = (reason) => { process.stdout.write(JSON.stringify({ decision: "deny", reason })); process.exit(0) }
let input = ""
process.stdin.on("data", (c) => (input += c)).on("end", async () => {
  try {
    const { url, token } = JSON.parse(readFileSync(${JSON.stringify(file)}, "utf-8"))
    const res = await fetch(url, { method: "POST", body: input,
      headers: { authorization: "Bearer " + token, "content-type": "application/json" },
      signal: AbortSignal.timeout(10000) })
    if (!res.ok) deny("writ refused the callback (" + res.status + ")")
    const answer = await res.json()
    if (answer === null || typeof answer !== "object") deny("writ's answer is malformed")
    if (answer.decision === "allow") { process.stdout.write(JSON.stringify({ decision: "allow" })); process.exit(0) }
    deny("writ: " + String(answer.reason ?? "denied"))
  } catch { deny("writ is unreachable") }
})
`
