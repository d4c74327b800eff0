import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Scripted from "../../fixtures/scriptedAnthropic.ts"
import { root } from "../../fixtures/sources.ts"

// The real claude CLI from node_modules, driven by a scripted model on loopback; every effect is checked on disk.
const claude = join(root, "node_modules/.bin/claude")

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
    // Asynchronously: the scripted model answers from this same event loop.
    const stdout = await new Promise<string>((resolve) =>
      execFile(claude, [
        "-p",
        "write the files",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "dontAsk",
        "--strict-mcp-config",
        "--mcp-config",
        "{\"mcpServers\":{}}"
      ], {
        cwd: workspace,
        encoding: "utf-8",
        timeout: 120_000,
        maxBuffer: 16 * 1024 * 1024,
        env: {
          PATH: "/usr/bin:/bin",
          HOME: home,
          ANTHROPIC_BASE_URL: model.baseUrl,
          ANTHROPIC_API_KEY: "sk-scripted",
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
          ...inherited
        }
      }, (_error, out) => resolve(out))
    )
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
