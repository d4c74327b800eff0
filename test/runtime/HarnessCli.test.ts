/**
 * `writ harness probe|plan|run claude-code` on the built binary, against the real claude CLI and the scripted model:
 * a plan whose required control has no verify run exits 1 and spawns nothing; `probe --verify --db` records the runs
 * in the database, where the same plan with that `--db` finds them and exits 0; `run` spawns under the plan with writ's policy deciding each tool call.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { existsSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Scripted from "../../adapters/node/ScriptedAnthropic.ts"
import * as Digest from "../../core/base/Digest.ts"
import { CapabilityReport } from "../../core/harness/CapabilityReport.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import { writ, writOnTerminal } from "../fixtures/cli.ts"
import { harnessCliFiles } from "../fixtures/harnessCli.ts"

const { dir, runArgs, specFile, ws } = harnessCliFiles(tmpdir(), "writ-harness-cli-", "sk-scripted")

const spec = (endpoint: string, callback: boolean, required = true) =>
  writeFileSync(
    specFile,
    [
      "spec_version: 1",
      "provider: claude-code",
      `model: {name: scripted, endpoint: "${endpoint}", api_key: "env:SCRIPTED_KEY"}`,
      "policy: {policy_id: cli-harness, version: \"1\"}",
      `workspace: ${ws}`,
      `tools: {allow: [Bash], callback: ${callback}}`,
      ...(required ? ["required: [fs.write_roots@1, callback.pre_tool@1]"] : []),
      ""
    ].join("\n")
  )

describe("writ harness", () => {
  it("plan: without a verify run a required control is degraded, and the plan exits 1 with the report", async () => {
    spec("http://127.0.0.1:9", true)
    const planned = await writ("harness", "plan", "claude-code", "--spec", specFile, "--json")
    assert.strictEqual(planned.status, 1, planned.stderr)
    const out = JSON.parse(planned.stdout)
    assert.deepStrictEqual(out.refused, ["fs.write_roots@1", "callback.pre_tool@1"])
    assert.strictEqual(out.report.provider_version, "2.1.328")
    assert.isTrue(out.report.notes.some((n: string) => n.includes("node >=22.0.0")))
  }, 120_000)

  it(
    "probe --verify --db records passing runs in the database; the same plan with that --db exits 0 with those controls enforced/verified",
    async () => {
      const db = join(dir, "verify.db")
      const probed = await writ("harness", "probe", "claude-code", "--verify", "--json", "--db", db)
      assert.strictEqual(probed.status, 0, probed.stderr)
      assert.deepStrictEqual(JSON.parse(probed.stdout).failed, [])
      spec("http://127.0.0.1:9", true)
      // The runs are in the database, not in writ's data directory: a plan without --db has none to cite.
      assert.isFalse(existsSync(join(dir, "data", "harness", "verify.json")))
      const unverified = await writ("harness", "plan", "claude-code", "--spec", specFile, "--json")
      assert.strictEqual(unverified.status, 1, unverified.stderr)
      const planned = await writ("harness", "plan", "claude-code", "--spec", specFile, "--json", "--db", db)
      assert.strictEqual(planned.status, 0, planned.stderr)
      const { plan, plan_digest, report } = JSON.parse(planned.stdout)
      const level = Object.fromEntries(
        report.controls.map((c: { control: string; level: string; evidence: { _tag: string } }) => [
          c.control,
          `${c.level}/${c.evidence._tag}`
        ])
      )
      assert.strictEqual(level["fs.write_roots@1"], "enforced/verified")
      assert.strictEqual(level["callback.pre_tool@1"], "enforced/verified")
      assert.match(plan_digest, /^[0-9a-f]{64}$/)
      // The key is a reference in the plan; its value appears nowhere in what plan prints.
      assert.deepStrictEqual(plan.environment.filter((e: { _tag: string }) => e._tag === "secret"), [])
      assert.deepStrictEqual(plan.secret_files.map((f: { ref: string }) => f.ref), [
        "env:SCRIPTED_KEY",
        "writ:harness.callback"
      ])
      assert.notInclude(planned.stdout, "sk-scripted")
    },
    240_000
  )

  it(
    "run: writ's policy denies the bash -c call through the hook, the allowed call runs; a terminal sees the status line",
    async () => {
      const model = await Scripted.start([
        { name: "Bash", input: { command: `bash -c "touch ${ws}/denied.txt"` } },
        { name: "Bash", input: { command: `touch ${ws}/allowed.txt` } }
      ])
      try {
        spec(model.baseUrl, true, false)
        const ran = await writOnTerminal(...runArgs())
        assert.strictEqual(ran.status, 0, ran.stderr)
        assert.isFalse(existsSync(join(ws, "denied.txt")))
        assert.isTrue(existsSync(join(ws, "allowed.txt")))
        assert.include(ran.stderr, "writ deny Bash: shell.unsafe_syntax")
        assert.include(ran.stderr, "writ allow Bash")
        const tags = ran.stdout.trim().split("\n").map((line) => JSON.parse(line)._tag)
        assert.deepStrictEqual(tags, ["tool_use", "tool_result", "denial", "tool_use", "tool_result", "usage", "exit"])
        // The status line is redrawn in place (carriage return, erase line) and left as the run's summary.
        assert.include(ran.stderr, "\r\u001b[K")
        const summary = ran.stderr.split(/\r\u001b\[K/).at(-1)!.split(/\r?\n/)[0]!
        assert.match(
          summary,
          /^writ: claude-code \d+s \| 2 tool call\(s\), 2 result\(s\), 1 denial\(s\) in the stream \| writ allowed 1, denied 1$/,
          JSON.stringify(summary)
        )
      } finally {
        await model.close()
      }
    },
    180_000
  )

  it(
    "run --json without --db: the plan and report printed first are the ones writ's callback decided each call under, in the run's scope",
    async () => {
      const model = await Scripted.start([
        { name: "Bash", input: { command: `bash -c "touch ${ws}/scoped-denied.txt"` } },
        { name: "Bash", input: { command: `touch ${ws}/scoped-allowed.txt` } }
      ])
      try {
        spec(model.baseUrl, true, false)
        const ran = await writ(...runArgs(["--json"]))
        assert.strictEqual(ran.status, 0, ran.stderr)
        assert.isFalse(existsSync(join(ws, "scoped-denied.txt")))
        assert.isTrue(existsSync(join(ws, "scoped-allowed.txt")))
        const lines = ran.stdout.trim().split("\n").map((line) => JSON.parse(line))
        const { attached } = lines[0]
        const { decisions } = lines.at(-1)
        assert.strictEqual(lines.slice(1, -1).map((o) => o._tag).at(-1), "exit")
        // The digests of the plan and report as printed, computed here from what was printed.
        const [planDigest, reportDigest] = await Effect.runPromise(
          Effect.all([
            HarnessPlan.digest(Schema.decodeUnknownSync(HarnessPlan.HarnessPlan)(attached.plan)),
            Digest.canonical(
              Schema.encodeSync(CapabilityReport)(Schema.decodeUnknownSync(CapabilityReport)(attached.report))
            )
          ]).pipe(Effect.provide(NodeDigest.layer))
        )
        assert.strictEqual(attached.plan_digest, planDigest)
        assert.strictEqual(attached.report_digest, reportDigest)
        assert.strictEqual(attached.scope._tag, "ephemeral_operation")
        assert.include(
          ran.stderr,
          `writ: ephemeral_operation ${attached.scope.scope_id}: plan sha256 ${planDigest}, report sha256 ${reportDigest}`
        )
        // Each of writ's decisions was made inside the run's scope, under exactly that plan and report.
        assert.deepStrictEqual(decisions.map((d: { decision: string }) => d.decision), ["deny", "allow"])
        for (const decision of decisions) {
          assert.deepStrictEqual(decision.decided_in, {
            scope: attached.scope,
            plan_digest: planDigest,
            report_digest: reportDigest
          })
        }
      } finally {
        await model.close()
      }
    },
    180_000
  )

  it("run: a spec with the callback but no --policy is bad input, and nothing runs", async () => {
    spec("http://127.0.0.1:9", true)
    const ran = await writ("harness", "run", "claude-code", "--spec", specFile, "--", "go")
    assert.strictEqual(ran.status, 2)
    assert.include(ran.stderr, "tools.callback needs --policy FILE")
  }, 60_000)
})
