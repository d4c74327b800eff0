import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as RealClaude from "../../fixtures/realClaude.ts"
import * as Scripted from "../../../adapters/node/ScriptedAnthropic.ts"

// The PreToolUse hook: it posts the call to the harness on loopback with the run's token and prints a blocking deny
// unless the harness answers allow; anything else (unreachable, timeout, malformed) is a deny, and a crash exits 2.
const hook = `
const deny = (reason) => process.stdout.write(JSON.stringify({ hookSpecificOutput: {
  hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: reason } }))
let input = ""
process.stdin.on("data", (c) => (input += c)).on("end", async () => {
  try {
    const res = await fetch(process.env.WRIT_HOOK_URL, { method: "POST", body: input,
      headers: { authorization: "Bearer " + process.env.WRIT_HOOK_TOKEN }, signal: AbortSignal.timeout(10000) })
    const answer = await res.json()
    if (answer.decision !== "allow") deny(String(answer.reason ?? "denied by writ"))
  } catch { deny("writ is unreachable") }
})
`

type Decide = (call: { readonly tool_name: string; readonly tool_input: { readonly command?: string } }) => string

// A loopback harness callback that checks the run's token and answers with `decide`.
const callback = (token: string, decide: Decide) =>
  new Promise<{ url: string; close: () => void }>((resolve) => {
    const server = http.createServer((req, res) => {
      let body = ""
      req.on("data", (chunk: Buffer) => (body += chunk.toString("utf-8")))
      req.on("end", () => {
        const decision = req.headers.authorization === `Bearer ${token}` ? decide(JSON.parse(body)) : "deny"
        res.end(JSON.stringify({ decision, reason: "writ policy" }))
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/pre-tool`,
        close: () => server.close()
      }))
  })

const run = async (decide: Decide, reachable = true) => {
  const dir = mkdtempSync(join(tmpdir(), "writ-claude-hook-"))
  const home = join(dir, "home")
  const workspace = join(dir, "ws")
  mkdirSync(join(home, ".claude"), { recursive: true })
  mkdirSync(workspace)
  writeFileSync(join(home, "hook.mjs"), hook)
  writeFileSync(
    join(home, ".claude", "settings.json"),
    JSON.stringify({
      permissions: { allow: ["Bash"], defaultMode: "dontAsk" },
      hooks: {
        PreToolUse: [{
          matcher: "*",
          hooks: [{ type: "command", command: `${process.execPath} ${join(home, "hook.mjs")} || exit 2` }]
        }]
      }
    })
  )
  const token = "run-token-5d1e"
  const harness = await callback(token, decide)
  if (!reachable) harness.close()
  const model = await Scripted.start([
    { name: "Bash", input: { command: `bash -c "touch ${workspace}/denied.txt"`, description: "denied" } },
    { name: "Bash", input: { command: `touch ${workspace}/allowed.txt`, description: "allowed" } }
  ])
  try {
    const stream = await RealClaude.run({
      workspace,
      home,
      baseUrl: model.baseUrl,
      prompt: "touch the files",
      env: { WRIT_HOOK_URL: harness.url, WRIT_HOOK_TOKEN: token }
    })
    return {
      denied: existsSync(join(workspace, "denied.txt")),
      allowed: existsSync(join(workspace, "allowed.txt")),
      unreachable: stream.includes("writ is unreachable")
    }
  } finally {
    harness.close()
    await model.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

const writ: Decide = (call) => (call.tool_input.command?.includes("denied.txt") ? "deny" : "allow")

describe("claude-code, real CLI: callback.pre_tool@1 delegating each call to writ over loopback", () => {
  it("a command writ denies, wrapped in bash -c, does not run; the one writ allows does", async () => {
    assert.deepStrictEqual(await run(writ), { denied: false, allowed: true, unreachable: false })
  })

  it("an unreachable harness is a deny for every call", async () => {
    assert.deepStrictEqual(await run(writ, false), { denied: false, allowed: false, unreachable: true })
  })

  it("the scenario can fail: when writ allows everything, the wrapped command runs", async () => {
    assert.deepStrictEqual(await run(() => "allow"), { denied: true, allowed: true, unreachable: false })
  })
})
