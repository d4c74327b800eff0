import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as RealClaude from "../../fixtures/realClaude.ts"
import * as Scripted from "../../../adapters/node/ScriptedAnthropic.ts"

interface Run {
  readonly stream: string
  readonly outside: string
  readonly inside: string
}

const run = async (sandboxed: boolean, inherited: Record<string, string> = {}): Promise<Run> => {
  const dir = mkdtempSync(join(tmpdir(), "writ-claude-"))
  const home = join(dir, "home")
  const workspace = join(dir, "ws")
  mkdirSync(join(home, ".claude"), { recursive: true })
  mkdirSync(workspace)
  const outside = join(dir, "outside.txt")
  const inside = join(workspace, "inside.txt")
  const sandbox = {
    enabled: true,
    failIfUnavailable: true,
    allowUnsandboxedCommands: false,
    filesystem: { allowWrite: [workspace] }
  }
  writeFileSync(
    join(home, ".claude", "settings.json"),
    JSON.stringify({
      permissions: { allow: ["Bash"], defaultMode: "dontAsk" },
      ...(sandboxed ? { sandbox } : {})
    })
  )
  const model = await Scripted.start([
    { name: "Bash", input: { command: `echo escaped > ${outside}; echo tried`, description: "write outside" } },
    { name: "Bash", input: { command: `echo kept > ${inside}`, description: "write inside" } },
    { name: "Bash", input: { command: "echo \"canary=$WRIT_CANARY\"; env", description: "read a canary" } }
  ])
  try {
    const stdout = await RealClaude.run({
      workspace,
      home,
      baseUrl: model.baseUrl,
      prompt: "write the files",
      env: inherited
    })
    return {
      stream: stdout,
      outside: existsSync(outside) ? readFileSync(outside, "utf-8") : "",
      inside: existsSync(inside) ? readFileSync(inside, "utf-8") : ""
    }
  } finally {
    await model.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

describe("claude-code, real CLI: fs.write_roots@1 through its OS sandbox", () => {
  it("a Bash write outside the workspace does not happen; the allowed write inside does", async () => {
    const result = await run(true)
    assert.include(result.stream, "\"type\":\"tool_result\"")
    assert.strictEqual(result.outside, "")
    assert.strictEqual(result.inside, "kept\n")
  })

  it("the scenario can fail: without the sandbox settings the same write outside happens", async () => {
    const result = await run(false)
    assert.strictEqual(result.outside, "escaped\n")
  })
})

// The harness's own environment holds a canary; the CLI starts with an empty environment plus the allowlist.
const canary = "writ-canary-7f3a9c"

describe("claude-code, real CLI: env.allowlist@1 by writ's empty environment", () => {
  it("a Bash read of a variable outside the allowlist never shows the canary in a tool result", async () => {
    process.env.WRIT_CANARY = canary
    const result = await run(true)
    assert.include(result.stream, "canary=")
    assert.notInclude(result.stream, canary)
  })

  it("the scenario can fail: passed through, the canary shows in the tool result", async () => {
    const result = await run(true, { WRIT_CANARY: canary })
    assert.include(result.stream, `canary=${canary}`)
  })
})
