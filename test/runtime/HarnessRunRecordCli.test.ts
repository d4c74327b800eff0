/**
 * `writ harness run claude-code --db FILE` on the built binary, against the real claude CLI and the scripted model: the
 * run's durable Run carries its plan and report (the digests its chain states) and its observations, none of which
 * reach the chain; the agent's calls to writ's MCP tools are governed operations of their own on the run's chain, in
 * its Run and in its certificate; and a run killed (SIGKILL) before its CLI spawns leaves its plan and report attached.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { execFileSync, spawn } from "node:child_process"
import { writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Scripted from "../../adapters/node/ScriptedAnthropic.ts"
import { bin, writ } from "../fixtures/cli.ts"
import { harnessCliFiles } from "../fixtures/harnessCli.ts"

const { dir, runArgs, specFile, ws } = harnessCliFiles(tmpdir(), "writ-harness-record-", "sk-scripted-record")

const policyFile = join(dir, "mcp-policy.yaml")

const spec = (endpoint: string, key: string) => {
  writeFileSync(
    policyFile,
    "policy_id: cli-harness-mcp\nversion: \"1\"\nmode: rules\nallow:\n  calc.add: [\"*\"]\n  agent.mcp-writ-*: [\"*\"]\n"
  )
  writeFileSync(
    specFile,
    [
      "spec_version: 1",
      "provider: claude-code",
      `model: {name: scripted, endpoint: "${endpoint}", api_key: "${key}"}`,
      "policy: {policy_id: cli-harness-mcp, version: \"1\"}",
      `workspace: ${ws}`,
      "tools: {writ_only: true, callback: true}",
      ""
    ].join("\n")
  )
}

const args = (db: string, prompt: string) => runArgs(["--db", db], policyFile, prompt)

interface Row {
  readonly record_type: string
  readonly operation_id: string | null
  readonly payload_json: string
}

interface Attached {
  readonly run_id: string
  readonly operation_id: string
  readonly chain_id: string
  readonly plan: string
  readonly plan_digest: string
  readonly report: string
  readonly report_digest: string
}

type Handle = InstanceType<typeof Database>

const read = <A>(db: string, body: (read: Handle) => A): A => {
  const handle = new Database(db)
  try {
    return body(handle)
  } finally {
    handle.close()
  }
}

const records = (db: Handle) =>
  db.prepare("SELECT record_type, operation_id, payload_json FROM evidence_records ORDER BY sequence").all() as Array<
    Row
  >

const sleep = (millis: number) => new Promise((resolve) => setTimeout(resolve, millis))

describe("writ harness run --db: the Run, and writ's MCP calls", () => {
  it(
    "the Run carries plan, report and observations; each MCP call is its own governed operation in the run's chain",
    async () => {
      const model = await Scripted.start([
        { name: "mcp__writ__calc_add", input: { a: 2, b: 3 } },
        { name: "mcp__writ__notes_read", input: { id: "secret" } }
      ])
      const db = join(dir, "mcp.db")
      let stdout = ""
      try {
        spec(model.baseUrl, "env:SCRIPTED_KEY")
        const ran = await writ(...args(db, "prompt-only-marker"))
        assert.strictEqual(ran.status, 0, ran.stderr)
        assert.match(ran.stderr, /verification valid/)
        stdout = ran.stdout
      } finally {
        await model.close()
      }

      const verified = await writ("evidence", "verify", "--db", db, "--json")
      assert.strictEqual(verified.status, 0, verified.stderr)
      const { chains } = JSON.parse(verified.stdout)
      assert.strictEqual(chains.length, 1)
      const minted = await writ(
        "certificate",
        "mint",
        "--db",
        db,
        "--chain",
        chains[0].chain_id,
        "--expected-head",
        chains[0].verified_head
      )
      assert.strictEqual(minted.status, 0, minted.stderr)
      const certificate = JSON.parse(minted.stdout)

      read(db, (handle) => {
        const chain = records(handle)
        const starts = chain.filter((r) => r.record_type === "operation_started")
        const payloads = starts.map((r) => JSON.parse(r.payload_json))
        // The run's own operation, then one governed operation per MCP call, each on the run's chain and in its Run.
        assert.deepStrictEqual(
          payloads.map((p) => p.action.name),
          ["harness.claude-code", "calc.add", "notes.read"],
          stdout
        )
        const run_id = payloads[0].scope.run_id
        assert.isString(run_id)
        assert.isTrue(payloads.every((p) => p.actor === "harness" && p.scope.run_id === run_id))
        const [harnessOp, addOp, readOp] = starts.map((r) => r.operation_id!)
        const terminals = new Map(
          chain.filter((r) => ["callable_completed", "operation_denied", "callable_failed"].includes(r.record_type))
            .map((r) => [r.operation_id, r.record_type])
        )
        assert.strictEqual(terminals.get(addOp), "callable_completed")
        assert.notStrictEqual(terminals.get(readOp), "callable_completed")
        assert.strictEqual(terminals.get(harnessOp), "callable_completed")

        // The Run: ended by the run, carrying the plan and report whose digests the chain states.
        const run = handle.prepare("SELECT status, reason_code, evidence_json FROM runs WHERE run_id = ?").all(
          run_id
        )[0] as {
          readonly status: string
          readonly reason_code: string
          readonly evidence_json: string
        }
        assert.deepStrictEqual([run.status, run.reason_code], ["completed", "harness.exit_0"])
        const attached = handle.prepare("SELECT * FROM harness_runs WHERE run_id = ?").all(run_id)[0] as Attached
        assert.strictEqual(attached.operation_id, harnessOp)
        assert.strictEqual(attached.chain_id, chains[0].chain_id)
        assert.strictEqual(attached.plan_digest, payloads[0].harness.plan_digest)
        assert.strictEqual(attached.report_digest, payloads[0].harness.report_digest)
        assert.include(attached.plan, "prompt-only-marker")
        assert.strictEqual(JSON.parse(attached.report).provider_version, "2.1.328")
        // Its attempts: writ's MCP calls and the run itself, projected from the chain.
        const attempts = handle.prepare(
          "SELECT action_name, outcome_tag FROM operation_attempts WHERE run_id = ? ORDER BY position"
        ).all(run_id) as Array<{ readonly action_name: string; readonly outcome_tag: string }>
        assert.deepStrictEqual(attempts.map((a) => [a.action_name, a.outcome_tag]), [
          ["calc.add", "succeeded"],
          ["notes.read", "denied"],
          ["harness.claude-code", "succeeded"]
        ])
        // Its observations, through the Run: the sum writ's tool returned is in them, and in no record.
        const observed = handle.prepare(
          "SELECT o.tag, o.observation FROM harness_observations o JOIN harness_runs r ON o.run_key = r.operation_id WHERE r.run_id = ? ORDER BY o.seq"
        ).all(run_id) as Array<{ readonly tag: string; readonly observation: string }>
        assert.strictEqual(observed.at(-1)?.tag, "exit")
        const results = observed.filter((o) => o.tag === "tool_result").map((o) => JSON.parse(o.observation))
        assert.strictEqual(results.length, 2)
        assert.include(results[0].content, "5")
        // Nothing of the plan, the report or the stream is on the chain: only digests.
        const text = chain.map((r) => r.payload_json).join("\n")
        assert.notInclude(text, "prompt-only-marker")
        assert.notInclude(text, "\"plane\"")
        assert.notInclude(text, "--strict-mcp-config")
      })
      read(db, (handle) => {
        const chain = records(handle)
        const [harnessOp, addOp, readOp] = chain.filter((r) => r.record_type === "operation_started").map((r) =>
          r.operation_id!
        )
        // The certificate counts every gate of the chain: the MCP calls' (the sum allowed, the note denied) with the hook's.
        const gates = chain.filter((r) => r.record_type === "gate_evaluated").map((r) => ({
          operation_id: r.operation_id,
          decision: JSON.parse(r.payload_json).decision as string
        }))
        assert.deepStrictEqual(
          gates.filter((g) => g.operation_id !== harnessOp).map((g) => [g.operation_id, g.decision]),
          [
            [addOp, "allow"],
            [readOp, "deny"]
          ]
        )
        const summary = certificate.gate_summary
        assert.deepStrictEqual([summary.hard_allow, summary.hard_deny], [
          gates.filter((g) => g.decision === "allow").length,
          gates.filter((g) => g.decision === "deny").length
        ])
      })
    },
    240_000
  )

  it(
    "a run killed (SIGKILL) before its CLI spawns leaves its plan and report attached to its Run, and no chain holds them",
    async () => {
      const model = await Scripted.start([{ name: "mcp__writ__calc_add", input: { a: 1, b: 1 } }])
      const db = join(dir, "killed.db")
      // The model key is read from a FIFO just before spawn: with no writer, the run waits there until it is killed.
      const fifo = join(dir, "key.fifo")
      execFileSync("mkfifo", [fifo])
      try {
        spec(model.baseUrl, `file:${fifo}`)
        const child = spawn("node", [bin, ...args(db, "killed-prompt-marker")], { stdio: "ignore" })
        const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_, signal) => resolve(signal)))
        // Wait (polling the file, up to two minutes) until the Run is running with its attachment, then kill.
        let status: string | undefined
        for (let i = 0; i < 240 && status !== "running"; i++) {
          await sleep(500)
          try {
            status = read(db, (handle) =>
              (handle.prepare(
                "SELECT r.status FROM runs r JOIN harness_runs h ON h.run_id = r.run_id"
              ).all()[0] as { readonly status: string } | undefined)?.status)
          } catch {
            // Not created or not migrated yet.
          }
        }
        assert.strictEqual(status, "running")
        child.kill("SIGKILL")
        assert.strictEqual(await exited, "SIGKILL")
        // Nothing spawned: the model never heard from a CLI.
        assert.strictEqual(model.requests.length, 0)
      } finally {
        await model.close()
      }
      read(db, (handle) => {
        const attached = handle.prepare("SELECT * FROM harness_runs").all() as Array<Attached>
        assert.strictEqual(attached.length, 1)
        const [one] = attached
        const run = handle.prepare("SELECT status, ended_at FROM runs WHERE run_id = ?").all(one!.run_id)[0] as {
          readonly status: string
          readonly ended_at: string | null
        }
        assert.deepStrictEqual([run.status, run.ended_at], ["running", null])
        assert.include(one!.plan, "killed-prompt-marker")
        const chain = records(handle)
        assert.deepStrictEqual(chain.map((r) => r.record_type), ["policy_bound", "operation_started"])
        const started = JSON.parse(chain[1]!.payload_json)
        assert.strictEqual(started.harness.plan_digest, one!.plan_digest)
        assert.strictEqual(started.harness.report_digest, one!.report_digest)
        assert.strictEqual(started.scope.run_id, one!.run_id)
        assert.notInclude(chain.map((r) => r.payload_json).join("\n"), "killed-prompt-marker")
        const observed = handle.prepare("SELECT count(*) AS n FROM harness_observations").all()[0] as {
          readonly n: number
        }
        assert.strictEqual(observed.n, 0)
      })
    },
    240_000
  )
})
