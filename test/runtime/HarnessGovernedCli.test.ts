/**
 * `writ harness run claude-code --db FILE` on the built binary, against the real claude CLI and the scripted model: the
 * run is one governed operation whose chain holds `operation_started` with the plan's and report's digests, one
 * `gate_evaluated` per hook decision (one denied, one allowed, in order), one terminal record and no observation; it
 * verifies with `writ evidence verify`; the observations are in their own table. A spec wider than its policy is
 * refused before anything spawns.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { existsSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Scripted from "../../adapters/node/ScriptedAnthropic.ts"
import { writ } from "../fixtures/cli.ts"
import { harnessCliFiles } from "../fixtures/harnessCli.ts"

const { dir, runArgs, specFile, ws } = harnessCliFiles(tmpdir(), "writ-harness-gov-", "sk-scripted-gov")

const spec = (endpoint: string, extra: ReadonlyArray<string> = []) =>
  writeFileSync(
    specFile,
    [
      "spec_version: 1",
      "provider: claude-code",
      `model: {name: scripted, endpoint: "${endpoint}", api_key: "env:SCRIPTED_KEY"}`,
      "policy: {policy_id: cli-harness, version: \"1\"}",
      `workspace: ${ws}`,
      "tools: {allow: [Bash], callback: true}",
      ...extra,
      ""
    ].join("\n")
  )

interface Row {
  readonly record_type: string
  readonly operation_id: string | null
  readonly payload_json: string
}

describe("writ harness run --db", () => {
  it(
    "one governed operation: digests, a gate record per decision, one terminal; it verifies; observations apart",
    async () => {
      writeFileSync(join(ws, "keep.txt"), "kept")
      const model = await Scripted.start([
        { name: "Bash", input: { command: `rm ${ws}/keep.txt` } },
        { name: "Bash", input: { command: `touch ${ws}/allowed.txt` } }
      ])
      const db = join(dir, "gov.db")
      let stderr = ""
      try {
        spec(model.baseUrl)
        const ran = await writ(...runArgs(["--db", db]))
        assert.strictEqual(ran.status, 0, ran.stderr)
        stderr = ran.stderr
        // What writ decided happened, and what it refused did not.
        assert.isTrue(existsSync(join(ws, "keep.txt")))
        assert.isTrue(existsSync(join(ws, "allowed.txt")))
        assert.match(ran.stderr, /evidence: chain [0-9a-f-]{36}, 6 records, verification valid/)
        assert.notInclude(ran.stderr, "| writ allowed", "no status line when stderr is not a terminal")
      } finally {
        await model.close()
      }

      const verified = await writ("evidence", "verify", "--db", db, "--json")
      assert.strictEqual(verified.status, 0, verified.stderr)
      const verification = JSON.parse(verified.stdout)
      assert.isTrue(verification.valid)
      assert.strictEqual(verification.chains.length, 1)
      assert.strictEqual(verification.chains[0].checked_records, 6)
      // The certificate counts writ's two decisions; the seven observations count for nothing.
      const { chain_id, verified_head } = verification.chains[0]
      const minted = await writ(
        "certificate",
        "mint",
        "--db",
        db,
        "--chain",
        chain_id,
        "--expected-head",
        verified_head
      )
      assert.strictEqual(minted.status, 0, minted.stderr)
      const summary = JSON.parse(minted.stdout).gate_summary
      assert.deepStrictEqual([summary.hard_allow, summary.hard_deny, summary.soft_deny, summary.exceptions], [
        1,
        1,
        0,
        0
      ])

      const read = new Database(db)
      try {
        const records = read.prepare(
          "SELECT record_type, operation_id, payload_json FROM evidence_records ORDER BY sequence"
        )
          .all() as ReadonlyArray<Row>
        assert.deepStrictEqual(records.map((r) => r.record_type), [
          "policy_bound",
          "operation_started",
          "gate_evaluated",
          "gate_evaluated",
          "callable_completed",
          "task_closed"
        ])
        const operation_id = records[1]!.operation_id!
        const started = JSON.parse(records[1]!.payload_json)
        assert.match(started.harness.plan_digest, /^[0-9a-f]{64}$/)
        assert.match(started.harness.report_digest, /^[0-9a-f]{64}$/)
        assert.notStrictEqual(started.harness.plan_digest, started.harness.report_digest)
        assert.strictEqual(started.harness.provider_version, "2.1.328")
        // The run's execution scope is its durable Run, attached before spawn to the plan and report the chain states.
        const runIds = read.prepare("SELECT run_id FROM runs").all() as ReadonlyArray<{ readonly run_id: string }>
        assert.strictEqual(runIds.length, 1)
        assert.include(
          stderr,
          `writ: durable_run ${
            runIds[0]!.run_id
          }: plan sha256 ${started.harness.plan_digest}, report sha256 ${started.harness.report_digest}`
        )
        const gates = records.filter((r) => r.record_type === "gate_evaluated").map((r) => JSON.parse(r.payload_json))
        assert.deepStrictEqual(gates.map((g) => [g.tool_call.tool, g.decision, g.reason_code]), [
          ["Bash", "deny", "policy.no_match"],
          ["Bash", "allow", "policy.allowed"]
        ])
        assert.isTrue(gates.every((g) => g.tool_call.call_id !== ""))
        assert.notStrictEqual(gates[0].tool_call.call_id, gates[1].tool_call.call_id)
        // No observation is in the chain: no record of the observation plane, no tool result's content.
        assert.isTrue(records.every((r) => !r.payload_json.includes("\"plane\"")))
        assert.isTrue(records.every((r) => r.operation_id === null || r.operation_id === operation_id))

        const observed = read.prepare(
          "SELECT tag, observation FROM harness_observations WHERE run_key = ? ORDER BY seq"
        )
          .all(operation_id) as ReadonlyArray<{ readonly tag: string; readonly observation: string }>
        assert.deepStrictEqual(observed.map((o) => o.tag), [
          "tool_use",
          "tool_result",
          "denial",
          "tool_use",
          "tool_result",
          "usage",
          "exit"
        ])
        assert.isTrue(observed.every((o) => JSON.parse(o.observation).plane === "observation"))
        assert.notInclude(observed.map((o) => o.observation).join("\n"), "sk-scripted-gov")
      } finally {
        read.close()
      }
    },
    240_000
  )

  it("a spec wider than its policy is bad input naming the field, and nothing spawns or is recorded", async () => {
    spec("http://127.0.0.1:9", ["network: {allow_domains: [\"*\"]}"])
    const narrow = join(dir, "narrow.yaml")
    writeFileSync(
      narrow,
      [
        "policy_id: cli-harness",
        "version: \"1\"",
        "allow:",
        "  shell.exec: [\"touch *\"]",
        "rules:",
        "  - {kind: network, effect: allow, destinations: [\"*.example.com:*\"], modes: [connect]}",
        ""
      ].join("\n")
    )
    const planned = await writ("harness", "plan", "claude-code", "--spec", specFile, "--policy", narrow)
    assert.strictEqual(planned.status, 2, planned.stderr)
    assert.include(planned.stderr, "$.network.allow_domains.0")
    const db = join(dir, "wide.db")
    const ran = await writ(...runArgs(["--db", db], narrow))
    assert.strictEqual(ran.status, 2, ran.stderr)
    assert.include(ran.stderr, "$.network.allow_domains.0")
    const read = new Database(db)
    try {
      const [count] = read.prepare("SELECT count(*) AS n FROM evidence_records").all() as Array<{ readonly n: number }>
      assert.strictEqual(count?.n, 0)
      assert.deepStrictEqual(read.prepare("SELECT run_id FROM runs").all(), [], "a refused invocation has no Run")
    } finally {
      read.close()
    }
  }, 120_000)

  it(
    "admitted but refused before spawn (a required control unmet): its Run ends failed, with no evidence",
    async () => {
      spec("http://127.0.0.1:9", ["required: [fs.write_roots@1]"])
      const db = join(dir, "unmet.db")
      const ran = await writ(...runArgs(["--db", db]))
      assert.strictEqual(ran.status, 1, ran.stderr)
      assert.include(ran.stdout, "refused:")
      const read = new Database(db)
      try {
        const runs = read.prepare("SELECT status, reason_code, evidence_json, started_at FROM runs").all()
        assert.deepStrictEqual(runs, [{
          status: "failed",
          reason_code: "harness.required_control_unmet",
          evidence_json: "[]",
          started_at: null
        }])
        const [count] = read.prepare("SELECT count(*) AS n FROM evidence_records").all() as Array<
          { readonly n: number }
        >
        assert.strictEqual(count?.n, 0)
        assert.deepStrictEqual(read.prepare("SELECT run_id FROM harness_runs").all(), [], "no plan attached")
      } finally {
        read.close()
      }
    },
    120_000
  )
})
