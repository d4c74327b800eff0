/**
 * `writ harness probe|plan|run codex` on the built binary, against the real codex CLI and the scripted Responses model:
 * a plan whose required control has no verify run exits 1 and spawns nothing; `probe --verify` records the runs that
 * make the same plan exit 0; `run` spawns under the plan with writ's policy deciding each shell call.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Scripted from "../../adapters/node/ScriptedOpenAI.ts"
import { writ } from "../fixtures/cli.ts"
import { harnessCliFiles } from "../fixtures/harnessCli.ts"

// Not under /tmp: the codex homes live in writ's data directory, and codex refuses its sandbox helpers under /tmp.
mkdirSync("/var/tmp", { recursive: true })

const { dir, policyFile, specFile, ws } = harnessCliFiles("/var/tmp", "writ-harness-codex-cli-", "sk-scripted-codex")

const spec = (endpoint: string) =>
  writeFileSync(
    specFile,
    [
      "spec_version: 1",
      "provider: codex",
      `model: {name: scripted, endpoint: "${endpoint}", api_key: "env:SCRIPTED_KEY"}`,
      "policy: {policy_id: cli-harness, version: \"1\"}",
      `workspace: ${ws}`,
      "tools: {callback: true}",
      "required: [fs.write_roots@1, network.egress@1, callback.pre_tool@1]",
      ""
    ].join("\n")
  )

describe("writ harness ... codex", () => {
  it(
    "plan: without a verify run the required controls are degraded, and the plan exits 1 with the report",
    async () => {
      spec("http://127.0.0.1:9")
      const planned = await writ("harness", "plan", "codex", "--spec", specFile, "--json")
      assert.strictEqual(planned.status, 1, planned.stderr)
      const out = JSON.parse(planned.stdout)
      assert.deepStrictEqual(out.refused, ["fs.write_roots@1", "network.egress@1", "callback.pre_tool@1"])
      assert.strictEqual(out.report.provider, "codex")
      assert.strictEqual(out.report.provider_version, "0.169.0")
      assert.isTrue(out.report.notes.some((n: string) => n.includes("identity digest covers both")))
    },
    120_000
  )

  it(
    "probe --verify records passing runs; then the same plan exits 0 with those controls enforced/verified",
    async () => {
      const probed = await writ("harness", "probe", "codex", "--verify", "--json")
      assert.strictEqual(probed.status, 0, probed.stdout.slice(0, 2000))
      assert.deepStrictEqual(JSON.parse(probed.stdout).failed, [])
      spec("http://127.0.0.1:9")
      const planned = await writ("harness", "plan", "codex", "--spec", specFile, "--json")
      assert.strictEqual(planned.status, 0, planned.stderr)
      const { plan, plan_digest, report } = JSON.parse(planned.stdout)
      const level = Object.fromEntries(
        report.controls.map((c: { control: string; level: string; evidence: { _tag: string } }) => [
          c.control,
          `${c.level}/${c.evidence._tag}`
        ])
      )
      assert.strictEqual(level["fs.write_roots@1"], "enforced/verified")
      assert.strictEqual(level["network.egress@1"], "enforced/verified")
      assert.strictEqual(level["callback.pre_tool@1"], "enforced/verified")
      assert.strictEqual(level["tools.allowlist@1"], "degraded/declared")
      assert.match(plan_digest, /^[0-9a-f]{64}$/)
      // The key is a reference in the plan; its value appears nowhere in what plan prints.
      assert.deepStrictEqual(
        plan.environment.filter((e: { _tag: string }) => e._tag === "secret").map((e: { ref: string }) => e.ref),
        ["env:SCRIPTED_KEY"]
      )
      assert.notInclude(planned.stdout, "sk-scripted-codex")
      assert.isTrue(plan.home.startsWith(join(dir, "data")))
      // writ's hook is the only one the plan configures.
      const config = plan.config_files.find((f: { path: string }) => f.path.endsWith("/config.toml")).content as string
      assert.strictEqual(config.split("[[hooks.").length - 1, 2)
      assert.include(plan.argv, "--dangerously-bypass-hook-trust")
    },
    240_000
  )

  it("run: writ's policy denies the bash -c call through the hook, the allowed call runs", async () => {
    const model = await Scripted.start([
      { name: "exec_command", input: { cmd: `bash -c "touch ${ws}/denied.txt"` } },
      { name: "exec_command", input: { cmd: `touch ${ws}/allowed.txt` } }
    ])
    try {
      spec(model.baseUrl)
      const ran = await writ("harness", "run", "codex", "--spec", specFile, "--policy", policyFile, "--", "go")
      assert.strictEqual(ran.status, 0, ran.stderr)
      assert.isFalse(existsSync(join(ws, "denied.txt")))
      assert.isTrue(existsSync(join(ws, "allowed.txt")))
      assert.include(ran.stderr, "writ deny Bash: shell.unsafe_syntax")
      assert.include(ran.stderr, "writ allow Bash")
      const tags = ran.stdout.trim().split("\n").map((line) => JSON.parse(line)._tag)
      assert.deepStrictEqual(tags, ["tool_use", "tool_result", "usage", "denial", "exit"])
    } finally {
      await model.close()
    }
  }, 180_000)
})
