/**
 * The hook program every provider's pre-tool hook runs with Node: it reads the run's callback URL and token from
 * `file`, posts the tool call (its stdin) to writ on loopback, and answers in the provider's own form. Unreachable, a
 * timeout, a non-2xx or a malformed answer is a deny; a crash exits 2 (blocking), never 1. Runtimes: Node (the program
 * it writes).
 */

/** How one provider's hook answers: `deny` defines `deny(reason)` (printing and exiting 0); `allow` allows. */
export interface Answers {
  readonly deny: string
  readonly allow: string
}

/** The hook's program text, reading the callback from `file`. */
export const program = (file: string, answers: Answers) =>
  `import { readFileSync } from "node:fs"
${answers.deny}
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
    if (answer.decision === "allow") ${answers.allow}
    deny("writ: " + String(answer.reason ?? "denied"))
  } catch { deny("writ is unreachable") }
})
`
