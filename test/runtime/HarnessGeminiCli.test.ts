/**
 * `writ harness plan|run gemini-cli` on the built binary, against the real gemini CLI and the scripted Gemini model:
 * a plan whose required control has no verify run exits 1 and spawns nothing; `run` spawns under the plan with writ's
 * policy deciding each tool call through gemini's BeforeTool hook.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Scripted from "../../adapters/node/ScriptedGemini.ts"
import { writ } from "../fixtures/cli.ts"
import { harnessCliFiles } from "../fixtures/harnessCli.ts"

const { policyFile, specFile, ws } = harnessCliFiles(tmpdir(), "writ-harness-gemini-cli-", "sk-scripted-gemini")

const spec = (endpoint: string, required: ReadonlyArray<string>) =>
  writeFileSync(
    specFile,
    [
      "spec_version: 1",
      "provider: gemini-cli",
      `model: {name: gemini-2.5-pro, endpoint: "${endpoint}", api_key: "env:SCRIPTED_KEY"}`,
      "policy: {policy_id: cli-harness, version: \"1\"}",
      `workspace: ${ws}`,
      "tools: {allow: [run_shell_command], callback: true}",
      `required: [${required.join(", ")}]`,
      ""
    ].join("\n")
  )

describe("writ harness, gemini-cli", () => {
  it("plan: without a verify run a required control is degraded, and the plan exits 1 with the report", async () => {
    spec("http://127.0.0.1:9", ["network.egress@1"])
    const planned = await writ("harness", "plan", "gemini-cli", "--spec", specFile, "--json")
    assert.strictEqual(planned.status, 1, planned.stderr)
    const out = JSON.parse(planned.stdout)
    assert.deepStrictEqual(out.refused, ["network.egress@1"])
    assert.strictEqual(out.report.provider_version, "0.61.0")
    assert.match(out.report.executable.path, /gemini-cli\/bundle\/gemini\.js$/)
  }, 120_000)

  it("plan: a claude-code spec handed to gemini-cli is bad input", async () => {
    writeFileSync(specFile, `spec_version: 1\nprovider: claude-code\nmodel: {name: m}\nworkspace: ${ws}\n`)
    const planned = await writ("harness", "plan", "gemini-cli", "--spec", specFile)
    assert.strictEqual(planned.status, 2)
    assert.include(planned.stderr, "the spec is for claude-code, not gemini-cli")
  }, 60_000)

  it("run: writ's policy denies the bash -c call through the hook, the allowed call runs", async () => {
    const model = await Scripted.start([
      { name: "run_shell_command", input: { command: `bash -c "touch ${ws}/denied.txt"` } },
      { name: "run_shell_command", input: { command: `touch ${ws}/allowed.txt` } }
    ])
    try {
      spec(model.baseUrl, [])
      const ran = await writ("harness", "run", "gemini-cli", "--spec", specFile, "--policy", policyFile, "--", "go")
      assert.strictEqual(ran.status, 0, ran.stderr)
      assert.isFalse(existsSync(join(ws, "denied.txt")))
      assert.isTrue(existsSync(join(ws, "allowed.txt")))
      assert.include(ran.stderr, "writ deny run_shell_command: shell.unsafe_syntax")
      assert.include(ran.stderr, "writ allow run_shell_command")
      const tags = ran.stdout.trim().split("\n").map((line) => JSON.parse(line)._tag)
      assert.deepStrictEqual(tags, ["tool_use", "tool_result", "denial", "tool_use", "tool_result", "usage", "exit"])
      assert.notInclude(ran.stdout + ran.stderr, "sk-scripted-gemini")
    } finally {
      await model.close()
    }
  }, 180_000)
})
