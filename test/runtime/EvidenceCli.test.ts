/**
 * The CLI of governed evidence, run as the built `writ` binary: `exec` under every profile, `demo` on a SQLite file,
 * `evidence verify|log`, `certificate mint|verify`, `recover` and `outbox`, with exit codes 0 ok, 1 negative verdict, 2 bad input.
 */
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { execFile, spawn } from "node:child_process"
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { ExecutorRegistry } from "../../core/evidence/ExecutorRegistry.ts"
import { EvidenceWriter } from "../../core/evidence/Governance.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { bin, build } from "../fixtures/cli.ts"
import { appendGranted } from "../fixtures/evidence.ts"
import { stateStores } from "../fixtures/state.ts"

// better-sqlite3 directly, to write a database that is not writ's.
const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => {
  readonly exec: (source: string) => unknown
  readonly close: () => unknown
}

/** Run the built binary without blocking the test worker: its exit status and both streams. */
const writ = (...args: Array<string>) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      "node",
      [bin, ...args],
      { encoding: "utf-8", maxBuffer: 64 << 20 },
      (error, stdout, stderr) =>
        resolve({ status: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
    )
  })
const writJson = async (...args: Array<string>) => {
  const result = await writ(...args, "--json")
  return { status: result.status, stderr: result.stderr, out: JSON.parse(result.stdout) }
}

type Stores = Layer.Layer.Success<ReturnType<typeof Embedded.layerStores>>

/** Run an effect on the embedded stores of a database file. */
const onStores = <A, E>(filename: string, effect: Effect.Effect<A, E, Stores>) =>
  Effect.runPromise(Effect.provide(effect, Embedded.layerStores({ filename })))

/** Run raw SQL on a database file, as an attacker (or an operator) with file access would. */
const rawSql = (filename: string, statements: ReadonlyArray<string>) =>
  Effect.runPromise(
    Effect.flatMap(SqlClient.SqlClient, (sql) => Effect.forEach(statements, (statement) => sql.unsafe(statement))).pipe(
      Effect.provide(SqliteClient.layer({ filename }))
    )
  )

const freshDir = () => mkdtempSync(join(tmpdir(), "writ-evidence-cli-"))

/** A slow `exec` of a profile on `db`, once `started` (a query) finds its call running: the child and its exit. */
const slowExec = async (profile: string, db: string, started: string) => {
  const child = spawn("node", [
    bin,
    "exec",
    "report.compile",
    "--args",
    "{\"pages\":600}",
    "--profile",
    profile,
    "--db",
    db
  ])
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  for (let polls = 0;; polls++) {
    const rows = existsSync(db) ? await rawSql(db, [started]).catch(() => [[]]) : [[]]
    if (rows[0]!.length > 0) return { child, exited }
    assert.isBelow(polls, 600, "the call never started")
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** An operation left open in a new database file (started, never concluded): its id. */
const orphanOn = (db: string) =>
  onStores(
    db,
    Effect.gen(function*() {
      const writer = yield* EvidenceWriter
      const chain_id = yield* IdGenerator.uuid
      const operation_id = yield* IdGenerator.uuid
      for (const record_type of ["policy_bound", "operation_started"] as const) {
        yield* appendGranted(writer, chain_id, {
          record_type,
          operation_id,
          policy_id: "p",
          policy_version: "1",
          payload: {}
        })
      }
      return operation_id
    })
  )

describe("writ exec, evidence, certificate, recover", () => {
  let dir = ""
  let demoDb = ""
  let demo: any

  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
    dir = freshDir()
    demoDb = join(dir, "demo.db")
    const run = await writJson("demo", "--db", demoDb)
    assert.strictEqual(run.status, 0, run.stderr)
    demo = run.out
    // The build, then one demo, whose harness step runs the real claude CLI: generous for a loaded machine.
  }, 420_000)

  it("demo: every step in one task boundary, a chain that verifies against its closing head, a verified certificate", async () => {
    assert.strictEqual(demo.profile, "certifiable")
    assert.strictEqual(demo.db, demoDb)
    assert.isTrue(demo.verification.valid)
    assert.strictEqual(demo.verification.checked_records, demo.records)
    assert.strictEqual(demo.verification.verified_head, demo.head)
    assert.isTrue(demo.certificate_verification.valid)
    assert.strictEqual(demo.certificate.evidence_chain_head, demo.head)
    assert.strictEqual(demo.certificate.chain_id, demo.chain_id)
    const tags = demo.rows.map((row: any) => row.outcome._tag)
    assert.includeMembers(tags, ["succeeded", "denied", "escalated", "failed", "timed_out", "cancelled"])
    const codes = demo.rows.map((row: any) => row.outcome.reason?.code)
    assert.includeMembers(codes, ["policy.denied", "approval.required", "origin.not_allowed", "budget.exhausted"])
    // The approved resubmission is a new attempt that succeeds.
    const shell = demo.rows.filter((row: any) => row.action === "shell.exec").map((row: any) => row.outcome._tag)
    assert.deepStrictEqual(shell, ["denied", "escalated", "succeeded"])
    assert.isTrue(demo.rows.every((row: any) => row.outcome.profile === "certifiable"))
  })

  it("demo: the hostile tool reads the canary in-process and not under bubblewrap; the evidence carries both reports' digests", async () => {
    const [inProcess, bubblewrap] = demo.containment
    assert.strictEqual(inProcess.backend, "in-process")
    assert.strictEqual(inProcess.outcome._tag, "succeeded")
    assert.isTrue(inProcess.escaped)
    assert.match(inProcess.outcome.result, /^canary [0-9a-f-]{36}$/)
    assert.deepStrictEqual(inProcess.enforced, [])
    assert.strictEqual(bubblewrap.backend, "bubblewrap")
    assert.strictEqual(bubblewrap.outcome._tag, "failed")
    assert.isFalse(bubblewrap.escaped)
    assert.notInclude(JSON.stringify(bubblewrap.outcome), inProcess.outcome.result)
    assert.include(bubblewrap.enforced, "writ.filesystem.read_roots@1")
    // Each call has its own boundary, and its operation_started record names its backend's report and preflight.
    for (const c of demo.containment) {
      const log = await writJson("evidence", "log", "--db", demoDb, "--chain", c.chain_id)
      assert.strictEqual(log.status, 0, log.stderr)
      const started = log.out[0].records.find((record: any) => record.record_type === "operation_started")
      assert.deepInclude(started.facts, {
        action: "files.peek",
        backend: c.backend,
        capability_digest: c.capability_digest,
        preflight_digest: c.preflight_digest
      })
    }
    assert.notStrictEqual(inProcess.capability_digest, bubblewrap.capability_digest)
    // The canary was removed with its directory.
    assert.deepStrictEqual(readdirSync(dir).filter((name) => name.startsWith("writ-demo-canary-")), [])
  })

  it("demo: the harness step's real claude ran the touch writ allowed and not the cp writ's hook denied, with its report", () => {
    const harness = demo.harness
    assert.isTrue(harness.ran, harness.reason)
    assert.strictEqual(harness.provider, "claude-code")
    // By effect: the allowed call's file exists, the blocked call's does not.
    assert.isTrue(harness.allowed_file_exists)
    assert.isFalse(harness.blocked_file_exists)
    assert.strictEqual(harness.exit_code, 0)
    assert.deepStrictEqual(
      harness.decisions.map((d: any) => [d.call.input.command.split(" ")[0], d.decision.decision]),
      [["cp", "deny"], ["touch", "allow"]]
    )
    assert.match(harness.decisions[0].decision.reason, /^policy\.no_match/)
    assert.strictEqual(harness.report.provider, "claude-code")
    assert.includeMembers(harness.report.controls.map((c: any) => c.control), [
      "callback.pre_tool@1",
      "fs.write_roots@1"
    ])
    // The step's temporary directory is gone.
    assert.isFalse(existsSync(harness.dir))
  })

  it(
    "exec under each profile: minimal keeps nothing, durable a Run and its attempt, governed a chain that verifies, certifiable a certificate",
    async () => {
      const db = join(freshDir(), "exec.db")
      const args = ["exec", "calc.add", "--args", "{\"a\":2,\"b\":40}"]

      const minimal = await writJson(...args)
      assert.strictEqual(minimal.status, 0)
      assert.deepStrictEqual([minimal.out._tag, minimal.out.profile, minimal.out.result], ["succeeded", "minimal", 42])
      assert.notProperty(minimal.out, "run_id")

      const durable = await writJson(...args, "--profile", "durable", "--db", db)
      assert.strictEqual(durable.status, 0, durable.stderr)
      assert.deepStrictEqual([durable.out._tag, durable.out.profile, durable.out.run_status], [
        "succeeded",
        "durable",
        "completed"
      ])
      const stored = await onStores(
        db,
        Effect.gen(function*() {
          const state = yield* stateStores
          return {
            run: yield* state.getRun(durable.out.run_id),
            attempts: yield* state.listAttempts(durable.out.run_id)
          }
        })
      )
      assert.strictEqual(stored.run.status, "completed")
      assert.strictEqual(stored.run.terminal?.reason_code, "ok")
      assert.deepStrictEqual(stored.attempts.map((attempt) => [attempt.attempt_id, attempt.outcome.tag]), [[
        durable.out.attempt_id,
        "succeeded"
      ]])

      const governed = await writJson(...args, "--profile", "governed", "--db", db)
      assert.strictEqual(governed.status, 0, governed.stderr)
      assert.deepStrictEqual([governed.out.profile, governed.out.verification.valid], ["governed", true])
      assert.notProperty(governed.out, "certificate")
      const verified = await writJson(
        "evidence",
        "verify",
        "--db",
        db,
        "--chain",
        governed.out.chain_id,
        "--expected-head",
        governed.out.head
      )
      assert.strictEqual(verified.status, 0)
      assert.deepStrictEqual(
        verified.out.chains.map((chain: any) => [chain.valid, chain.checked_records, chain.verified_head]),
        [[true, governed.out.records, governed.out.head]]
      )
      const log = await writJson("evidence", "log", "--db", db, "--chain", governed.out.chain_id)
      assert.deepStrictEqual(log.out[0].records.map((record: any) => record.record_type), [
        "policy_bound",
        "operation_started",
        "gate_evaluated",
        "callable_completed",
        "task_closed"
      ])

      const certifiable = await writJson(...args, "--profile", "certifiable", "--db", db)
      assert.strictEqual(certifiable.status, 0, certifiable.stderr)
      assert.strictEqual(certifiable.out.profile, "certifiable")
      assert.strictEqual(certifiable.out.certificate.evidence_chain_head, certifiable.out.head)
      assert.strictEqual(certifiable.out.certificate.process_grade, "FULL")
      assert.isTrue(certifiable.out.certificate_verification.valid)

      // A negative verdict still records its evidence, and exits 1.
      const denied = await writJson(
        "exec",
        "shell.exec",
        "--args",
        "{\"command\":\"rm -rf /\"}",
        "--profile",
        "governed",
        "--db",
        db
      )
      assert.strictEqual(denied.status, 1)
      assert.deepStrictEqual([denied.out._tag, denied.out.reason.code, denied.out.verification.valid], [
        "denied",
        "policy.denied",
        true
      ])
    },
    240_000
  )

  it("bad input exits 2 with a message naming it, and nothing runs", async () => {
    const dir = freshDir()
    const unknownChain = "00000000-0000-4000-8000-000000000000"
    const db = join(dir, "never.db")
    const cases: Array<[Array<string>, string]> = [
      [
        ["exec", "calc.add", "--profile", "bogus", "--db", db],
        "--profile \"bogus\" is not one of minimal, durable, governed, certifiable"
      ],
      [["exec", "calc.add", "--args", "{not json", "--profile", "durable", "--db", db], "--args is not JSON"],
      [["exec", "calc.add", "--args", "[1]", "--profile", "governed", "--db", db], "--args is not a JSON object"],
      [
        ["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "durable"],
        "--db FILE is required by the durable profile"
      ],
      [["exec", "calc.add", "--db", db], "--db is for the durable, governed and certifiable profiles"],
      [["exec", "Calc Add!", "--profile", "durable", "--db", db], "ACTION \"Calc Add!\" is refused"],
      [["evidence", "verify", "--db", join(dir, "missing.db")], "missing.db"],
      [["evidence", "verify", "--db", demoDb, "--expected-head", demo.head], "--expected-head needs --chain"],
      [
        ["evidence", "verify", "--db", demoDb, "--chain", demo.chain_id, "--expected-head", "abc"],
        "--expected-head is not a lowercase hex SHA-256"
      ],
      [["evidence", "log", "--db", demoDb, "--chain", demo.chain_id, "--run", "x"], "--run and --chain are exclusive"],
      // Names are exact: a misspelt case is not silently dropped (and the default profile run instead).
      [["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--PROFILE", "durable"], "unknown argument: '--PROFILE'"],
      [["evidence", "log", "--db", demoDb, "--Run", "x"], "unknown argument: '--Run'"],
      [
        ["certificate", "mint", "--db", demoDb, "--chain", demo.chain_id, "--expected-head", "XYZ"],
        "--expected-head is not"
      ],
      [["evidence", "verify", "--db", demoDb, "--chain", "nosuch"], "--chain nosuch is not a chain id"],
      [["evidence", "log", "--db", demoDb, "--chain", "nosuch"], "--chain nosuch is not a chain id"],
      [["evidence", "log", "--db", demoDb, "--run", "nosuch"], "--run \"nosuch\" is not a run id"],
      [["evidence", "log", "--db", demoDb, "--run", ""], "--run \"\" is not a run id"],
      [["evidence", "verify", "--db", demoDb, "--chain", unknownChain], "the database holds no chain with this id"],
      [
        ["certificate", "mint", "--db", demoDb, "--chain", unknownChain, "--expected-head", demo.head],
        "the database holds no chain with this id"
      ]
    ]
    const results = await Promise.all(cases.map(([args]) => writ(...args)))
    for (const [i, [args, message]] of cases.entries()) {
      const result = results[i]!
      assert.strictEqual(result.status, 2, `${args.join(" ")}: ${result.stderr}`)
      assert.include(result.stdout + result.stderr, message, args.join(" "))
    }
    assert.isFalse(existsSync(db), "no database is created on bad input")
    const notDb = join(dir, "not-a-db.txt")
    writeFileSync(notDb, "hello, this is not SQLite\n".repeat(100))
    const refused = await writ("exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "durable", "--db", notDb)
    assert.strictEqual(refused.status, 2)
    assert.include(refused.stderr, "cannot be opened as a writ database")
  }, 240_000)

  it(
    "a --db that keeps nothing, or another program's database, is refused with exit 2 and left as it was",
    async () => {
      const dir = freshDir()
      const foreign = join(dir, "other.db")
      const empty = join(dir, "empty.db")
      const other = new Database(foreign)
      other.exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ada')")
      other.close()
      writeFileSync(empty, "")
      const before = readFileSync(foreign)
      const args = ["calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "durable"]
      const cases: Array<[Array<string>, string]> = [
        [["exec", ...args, "--db", ""], "names no file"],
        [["exec", ...args, "--db", ":memory:"], "names no file"],
        [["demo", "--db", ":memory:"], "names no file"],
        [["exec", ...args, "--db", foreign], "is not a writ database"],
        [["evidence", "verify", "--db", foreign], "is not a writ database"],
        [["evidence", "log", "--db", foreign], "is not a writ database"],
        [["recover", "--db", foreign], "is not a writ database"],
        [["evidence", "verify", "--db", empty], "is not a writ database"]
      ]
      const results = await Promise.all(cases.map(([args]) => writ(...args)))
      for (const [i, [args, message]] of cases.entries()) {
        assert.strictEqual(results[i]!.status, 2, `${args.join(" ")}: ${results[i]!.stderr}`)
        assert.include(results[i]!.stderr, message, args.join(" "))
      }
      assert.deepStrictEqual(readFileSync(foreign), before)
      assert.strictEqual(readFileSync(empty).length, 0)
      assert.deepStrictEqual(readdirSync(dir).sort(), ["empty.db", "other.db"])
    },
    240_000
  )

  it("evidence verify and log read the demo's db: a timeline with gate ids, decisions and reason codes", async () => {
    const verified = await writJson("evidence", "verify", "--db", demoDb)
    assert.strictEqual(verified.status, 0)
    assert.deepInclude(
      verified.out.chains.map((chain: any) => [chain.chain_id, chain.valid, chain.verified_head]),
      [demo.chain_id, true, demo.head]
    )
    const text = await writ(
      "evidence",
      "verify",
      "--db",
      demoDb,
      "--chain",
      demo.chain_id,
      "--expected-head",
      demo.head
    )
    assert.strictEqual(text.status, 0)
    assert.include(text.stdout, demo.head)

    const log = await writJson("evidence", "log", "--db", demoDb, "--chain", demo.chain_id)
    assert.strictEqual(log.status, 0)
    const records = log.out[0].records
    assert.strictEqual(records.length, demo.records)
    assert.deepStrictEqual(records.map((record: any) => record.sequence), records.map((_: unknown, i: number) => i))
    const gates = records.filter((record: any) => record.record_type === "gate_evaluated").map((record: any) =>
      `${record.facts.gate_id}:${record.facts.decision}:${record.facts.reason_code}`
    )
    assert.includeMembers(gates, [
      "policy:allow:policy.allowed",
      "policy:deny:policy.denied",
      "writ.budget:deny:budget.exhausted"
    ])
    const denials = records.filter((record: any) => record.record_type === "operation_denied").map((record: any) =>
      record.facts.reason_code
    )
    assert.deepStrictEqual(denials, ["policy.denied", "approval.required", "origin.not_allowed", "budget.exhausted"])
    assert.strictEqual(records.at(-1).record_type, "task_closed")

    const table = await writ("evidence", "log", "--db", demoDb, "--chain", demo.chain_id)
    assert.strictEqual(table.status, 0)
    assert.match(
      table.stdout,
      /gate_evaluated\s+[0-9a-f]{8}\s+gate_id=policy level=hard decision=deny reason_code=policy\.denied/
    )
  }, 120_000)

  it(
    "certificate mint and verify round-trip; a forged field or a head that is not the closing record fails with its code, an unknown field is bad input",
    async () => {
      const dir = freshDir()
      const minted = await writ(
        "certificate",
        "mint",
        "--db",
        demoDb,
        "--chain",
        demo.chain_id,
        "--expected-head",
        demo.head
      )
      assert.strictEqual(minted.status, 0, minted.stderr)
      const certificate = JSON.parse(minted.stdout)
      assert.strictEqual(certificate.evidence_chain_head, demo.head)
      assert.deepStrictEqual(certificate.gate_summary, demo.certificate.gate_summary)
      const file = join(dir, "certificate.json")
      writeFileSync(file, minted.stdout)
      const verified = await writJson("certificate", "verify", "--db", demoDb, "--certificate", file)
      assert.strictEqual(verified.status, 0)
      assert.deepStrictEqual([verified.out.valid, verified.out.failure_code], [true, null])

      const forged = join(dir, "forged.json")
      writeFileSync(forged, JSON.stringify({ ...certificate, process_grade: "DEGRADED" }))
      const wrongGrade = await writJson("certificate", "verify", "--db", demoDb, "--certificate", forged)
      assert.deepStrictEqual([wrongGrade.status, wrongGrade.out.failure_code], [1, "grade_mismatch"])
      writeFileSync(
        forged,
        JSON.stringify({ ...certificate, gate_summary: { ...certificate.gate_summary, hard_deny: 0 } })
      )
      const wrongSummary = await writJson("certificate", "verify", "--db", demoDb, "--certificate", forged)
      assert.deepStrictEqual([wrongSummary.status, wrongSummary.out.failure_code], [1, "summary_mismatch"])

      // A trusted head inside the chain: records follow it, so the chain does not verify against it and nothing is minted.
      const prefixHead = (await writJson("evidence", "log", "--db", demoDb, "--chain", demo.chain_id)).out[0].records[3]
        .chain_hash
      const notClosed = await writJson(
        "certificate",
        "mint",
        "--db",
        demoDb,
        "--chain",
        demo.chain_id,
        "--expected-head",
        prefixHead
      )
      assert.strictEqual(notClosed.status, 1)
      assert.strictEqual(notClosed.out.minted, false)
      assert.strictEqual(notClosed.out.failure_code, "broken_link")

      // A field a certificate does not have is a claim nothing verifies: bad input naming it, not a valid certificate.
      for (
        const [extra, named] of [
          [{ ...certificate, approved_by: "auditor", scope: "all" }, "unknown field(s) approved_by, scope"],
          [
            { ...certificate, gate_summary: { ...certificate.gate_summary, waived: 3 } },
            "unknown field(s) gate_summary.waived"
          ]
        ] as const
      ) {
        writeFileSync(forged, JSON.stringify(extra))
        const refused = await writ("certificate", "verify", "--db", demoDb, "--certificate", forged)
        assert.strictEqual(refused.status, 2, refused.stdout)
        assert.include(refused.stderr, `--certificate ${forged} is not a task certificate: ${named}`)
        assert.strictEqual(refused.stdout, "")
      }

      writeFileSync(forged, "{\"certificate_id\": 1}")
      const malformed = await writ("certificate", "verify", "--db", demoDb, "--certificate", forged)
      assert.strictEqual(malformed.status, 2)
      assert.include(malformed.stderr, "is not a task certificate")

      // A certificate of a chain this database does not hold is bad input for it, not a broken chain.
      const otherChain = "00000000-0000-4000-8000-000000000000"
      writeFileSync(forged, JSON.stringify({ ...certificate, chain_id: otherChain }))
      const elsewhere = await writ("certificate", "verify", "--db", demoDb, "--certificate", forged)
      assert.strictEqual(elsewhere.status, 2)
      assert.include(elsewhere.stderr, `names chain ${otherChain}: the database holds no chain with this id`)
    },
    120_000
  )

  it("reading commands never change the database: an older one is read as it is, not migrated", async () => {
    const dir = freshDir()
    const db = join(dir, "older.db")
    copyFileSync(demoDb, db)
    // A database from before the executor registry: no executors table, and no record of its migration.
    await rawSql(db, ["DROP TABLE executors", "DELETE FROM effect_sql_migrations WHERE name = 'executors'"])
    const before = readFileSync(db)
    const minted = await writ("certificate", "mint", "--db", db, "--chain", demo.chain_id, "--expected-head", demo.head)
    assert.strictEqual(minted.status, 0, minted.stderr)
    const certificate = join(dir, "certificate.json")
    writeFileSync(certificate, minted.stdout)
    for (
      const args of [
        ["evidence", "verify", "--db", db],
        ["evidence", "log", "--db", db, "--chain", demo.chain_id],
        ["certificate", "mint", "--db", db, "--chain", demo.chain_id, "--expected-head", demo.head],
        ["certificate", "verify", "--db", db, "--certificate", certificate]
      ]
    ) {
      const result = await writ(...args)
      assert.strictEqual(result.status, 0, `${args.join(" ")}: ${result.stderr}`)
    }
    assert.isTrue(readFileSync(db).equals(before), "the database file is byte for byte what it was")
    const tables = await rawSql(db, ["SELECT name FROM sqlite_master WHERE name = 'executors'"])
    assert.deepStrictEqual(tables, [[]])
  }, 120_000)

  it("reading commands read a backup in rollback-journal mode (VACUUM INTO) as it is", async () => {
    const dir = freshDir()
    const backup = join(dir, "backup.db")
    const source = new Database(demoDb)
    source.exec(`VACUUM INTO '${backup}'`)
    source.close()
    const before = readFileSync(backup)
    const minted = await writ(
      "certificate",
      "mint",
      "--db",
      backup,
      "--chain",
      demo.chain_id,
      "--expected-head",
      demo.head
    )
    assert.strictEqual(minted.status, 0, minted.stderr)
    const certificate = join(dir, "certificate.json")
    writeFileSync(certificate, minted.stdout)
    for (
      const args of [
        ["evidence", "verify", "--db", backup, "--chain", demo.chain_id, "--expected-head", demo.head],
        ["evidence", "log", "--db", backup, "--chain", demo.chain_id],
        ["certificate", "verify", "--db", backup, "--certificate", certificate]
      ]
    ) {
      const result = await writ(...args)
      assert.strictEqual(result.status, 0, `${args.join(" ")}: ${result.stderr}`)
    }
    assert.isTrue(readFileSync(backup).equals(before), "the backup is byte for byte what it was")
    assert.deepStrictEqual(readdirSync(dir).sort(), ["backup.db", "certificate.json"], "no journal files beside it")
  }, 120_000)

  it("durable exec creates no Run for a call that is not admitted: an unknown action, an escalated call", async () => {
    const db = join(freshDir(), "refused.db")
    const refused = [
      await writJson("exec", "nope.nope", "--profile", "durable", "--db", db),
      await writJson("exec", "shell.exec", "--args", "{\"command\":\"ls\"}", "--profile", "durable", "--db", db)
    ]
    assert.deepStrictEqual(
      refused.map(({ out, status }) => [status, out._tag, out.reason.code, out.run_id, out.attempts]),
      [[1, "denied", "action.not_found", null, 0], [1, "escalated", "approval.required", null, 0]]
    )
    assert.deepStrictEqual(await rawSql(db, ["SELECT count(*) AS n FROM runs"]), [[{ n: 0 }]])
    const text = await writ("exec", "nope.nope", "--profile", "durable", "--db", db)
    assert.include(text.stdout, "no Run: the call was not admitted")
  }, 120_000)

  it(
    "outbox: a durable exec's outcome intent is listed, delivered once as a JSON line, and kept pending when the output is closed",
    async () => {
      const db = join(freshDir(), "outbox.db")
      const execArgs = ["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "durable", "--db", db]
      const first = await writJson(...execArgs)
      assert.strictEqual(first.status, 0, first.stderr)
      const pending = await writJson("outbox", "pending", "--db", db)
      assert.deepStrictEqual(
        pending.out.map((
          intent: any
        ) => [intent.topic, intent.attempt_id, intent.payload.tag, intent.delivery_attempts]),
        [["writ.outcome", first.out.attempt_id, "succeeded", 0]]
      )

      const delivered = await writ("outbox", "deliver", "--db", db)
      assert.strictEqual(delivered.status, 0, delivered.stderr)
      const lines = delivered.stdout.trim().split("\n").map((line) => JSON.parse(line))
      assert.deepStrictEqual(lines, pending.out, "each intent is one line, as pending lists it")
      assert.include(delivered.stderr, "delivered 1, kept pending for a retry 0, failed for good 0")
      const again = await writ("outbox", "deliver", "--db", db)
      assert.deepStrictEqual([again.status, again.stdout], [0, ""], "a delivered intent is not delivered again")
      assert.deepStrictEqual((await writJson("outbox", "pending", "--db", db)).out, [])

      const second = await writJson(...execArgs)
      const closed = spawn("node", [bin, "outbox", "deliver", "--db", db], { stdio: ["ignore", "pipe", "pipe"] })
      closed.stdout.destroy()
      let stderr = ""
      closed.stderr.on("data", (chunk) => (stderr += chunk))
      assert.strictEqual(await new Promise((resolve) => closed.on("close", resolve)), 1, stderr)
      assert.include(
        stderr,
        "delivered 0, kept pending for a retry 0, failed for good 0; stopped (outbox.output_closed)"
      )
      assert.deepStrictEqual(
        (await writJson("outbox", "pending", "--db", db)).out.map((
          intent: any
        ) => [intent.attempt_id, intent.delivery_attempts]),
        [[second.out.attempt_id, 0]],
        "an intent no sink saw is charged no attempt"
      )
      // Bad options are refused before the database is opened: even a locked one answers bad input.
      const holder = new Database(db)
      holder.exec("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE held (a)")
      try {
        for (const args of [["--limit", "0"], ["--max-attempts", "-2"]]) {
          const refused = await writ("outbox", "deliver", "--db", db, ...args)
          assert.deepStrictEqual([refused.status, refused.stdout], [2, ""], refused.stderr)
          assert.include(refused.stderr, "must be a positive integer")
        }
      } finally {
        holder.close()
      }
    },
    120_000
  )

  it(
    "Ctrl-C exits 130 and leaves nothing open: the Run ends cancelled, the operation and its boundary are closed",
    async () => {
      const dir = freshDir()
      // Each profile, once its call is running: the Run, or the pre-call checkpoint's gate result, is committed.
      const running = {
        durable: "SELECT 1 FROM runs WHERE status = 'running'",
        governed: "SELECT 1 FROM evidence_records WHERE record_type = 'gate_evaluated'"
      }
      for (const profile of ["durable", "governed"] as const) {
        const { child, exited } = await slowExec(profile, join(dir, `${profile}.db`), running[profile])
        child.kill("SIGINT")
        assert.strictEqual(await exited, 130, profile)
      }
      const [runs] = await rawSql(join(dir, "durable.db"), ["SELECT status, reason_code FROM runs"])
      assert.deepStrictEqual(runs, [{ status: "cancelled", reason_code: "cli.interrupted" }])
      const [records] = await rawSql(join(dir, "governed.db"), [
        "SELECT record_type FROM evidence_records ORDER BY position"
      ])
      assert.deepStrictEqual((records as Array<{ record_type: string }>).map((r) => r.record_type).slice(-2), [
        "operation_cancelled",
        "task_closed"
      ])
    },
    120_000
  )

  it(
    "a durable exec killed mid-call: recover refuses while it lives, then ends its Run failed/indeterminate and says so",
    async () => {
      const db = join(freshDir(), "killed.db")
      const { child, exited } = await slowExec("durable", db, "SELECT 1 FROM runs WHERE status = 'running'")
      const live = await writ("recover", "--db", db)
      assert.strictEqual(live.status, 1, "a live durable executor is registered: its running Run is not an orphan")
      assert.include(live.stderr, "LiveExecutorsError")
      child.kill("SIGKILL")
      await exited
      const recovered = await writJson("recover", "--db", db)
      assert.strictEqual(recovered.status, 0, recovered.stderr)
      assert.strictEqual(recovered.out.runs.length, 1)
      assert.deepStrictEqual([recovered.out.runs[0].attempts, recovered.out.runs[0].won], [0, true])
      const [runs] = await rawSql(db, ["SELECT run_id, status, reason_code FROM runs"])
      assert.deepStrictEqual(runs, [{
        run_id: recovered.out.runs[0].run_id,
        status: "failed",
        reason_code: "recovery.orphaned_run"
      }])
      const run = await onStores(db, Effect.flatMap(stateStores, (state) => state.getRun(recovered.out.runs[0].run_id)))
      assert.deepStrictEqual([run.terminal!.quality, run.terminal!.acceptance], ["indeterminate", "unknown"])
      assert.deepStrictEqual(await rawSql(db, ["SELECT count(*) AS n FROM operation_attempts"]), [[{ n: 0 }]])
      const text = await writ("recover", "--db", db)
      assert.strictEqual(text.status, 0)
      assert.notInclude(text.stdout, "ended run", "a second recovery finds nothing left running")
    },
    120_000
  )

  it("a malformed action name exits 2 naming ACTION and the rule it breaks, and no --db is created", async () => {
    const dir = freshDir()
    const pattern = "an action name is lowercase words (a letter, then letters or digits) joined by one of _ - . /"
    const cases: Array<[string, string]> = [
      ["Calc.Add", pattern],
      ["", pattern],
      ["../etc", pattern],
      ["a".repeat(200), "an action name is at most 128 characters, not 200"]
    ]
    const runs = cases.flatMap(([name, rule], i) =>
      (["durable", "governed", "certifiable"] as const).map((profile) => {
        const db = join(dir, `${profile}-${i}.db`)
        return { db, rule, args: ["exec", name, "--args", "{\"a\":1,\"b\":2}", "--profile", profile, "--db", db] }
      })
    )
    const results = await Promise.all(runs.map(({ args }) => writ(...args)))
    for (const [i, { args, db, rule }] of runs.entries()) {
      const result = results[i]!
      assert.deepStrictEqual([result.status, result.stdout], [2, ""], `${args.join(" ")}: ${result.stderr}`)
      // A long name is echoed as an excerpt of its first 64 characters.
      const name = args[1]!.length > 64 ? `${args[1]!.slice(0, 64)}…` : args[1]!
      assert.strictEqual(result.stderr.trim(), `ACTION ${JSON.stringify(name)} is refused: ${rule}`)
      assert.notInclude(result.stderr, "internal error")
      assert.isFalse(existsSync(db), `${args.join(" ")}: no database is created`)
    }
    assert.deepStrictEqual(readdirSync(dir), [], "nothing at all is created")
  }, 120_000)

  it("recover --help shows --forget as optional and repeatable", async () => {
    const help = await writ("recover", "--help")
    assert.strictEqual(help.status, 0, help.stderr)
    assert.include(help.stdout, "$ recover --db file [--force] [--forget ID...] [--json]")
    assert.include(help.stdout, "This option may be repeated zero or more times.")
  })

  it(
    "a database another connection holds for writing is a store failure naming it (exit 1), and nothing is written",
    async () => {
      const dir = freshDir()
      const db = join(dir, "held.db")
      copyFileSync(demoDb, db)
      const counts = () =>
        rawSql(db, [
          "SELECT count(*) AS n FROM evidence_records",
          "SELECT count(*) AS n FROM runs",
          "SELECT count(*) AS n FROM operation_attempts"
        ])
      // An operation a crash left open, so that recover has one to close (a write).
      await orphanOn(db)
      const before = await counts()
      // A write transaction (RESERVED lock): the file can be read and checked, but every write waits, then is refused.
      const holder = new Database(db)
      holder.exec("BEGIN IMMEDIATE")
      try {
        const commands = [
          ["demo", "--db", db],
          ["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "durable", "--db", db],
          ["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "governed", "--db", db],
          ["exec", "calc.add", "--args", "{\"a\":1,\"b\":2}", "--profile", "certifiable", "--db", db],
          ["recover", "--db", db, "--force"]
        ]
        const results = await Promise.all(commands.map((args) => writ(...args)))
        for (const [i, args] of commands.entries()) {
          const result = results[i]!
          assert.strictEqual(result.status, 1, `${args.join(" ")}: ${result.stderr}`)
          assert.include(
            result.stderr,
            `DatabaseBusyError: --db ${JSON.stringify(db)} is held by another connection (`,
            args.join(" ")
          )
          assert.include(result.stderr, "database is locked", args.join(" "))
          assert.notInclude(result.stderr, "internal error", args.join(" "))
        }
      } finally {
        holder.close()
      }
      assert.deepStrictEqual(await counts(), before, "no record, Run or attempt was written")
    },
    180_000
  )

  it(
    "a database another connection holds locked is a store failure (exit 1) to a writing command, not bad input; an audit reads its last commit",
    async () => {
      const dir = freshDir()
      const db = join(dir, "locked.db")
      copyFileSync(demoDb, db)
      const holder = new Database(db)
      holder.exec("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE held (a)")
      try {
        const result = await writ("recover", "--db", db)
        assert.strictEqual(result.status, 1, result.stderr)
        assert.include(result.stderr, "DatabaseBusyError")
        const audit = await writJson(
          "evidence",
          "verify",
          "--db",
          db,
          "--chain",
          demo.chain_id,
          "--expected-head",
          demo.head
        )
        assert.strictEqual(audit.status, 0, audit.stderr)
        assert.isTrue(audit.out.valid)
      } finally {
        holder.close()
      }
    },
    120_000
  )

  it("Certificate verification fails for a changed policy", async () => {
    const dir = freshDir()
    const db = join(dir, "policy-changed.db")
    copyFileSync(demoDb, db)
    const minted = await writ("certificate", "mint", "--db", db, "--chain", demo.chain_id, "--expected-head", demo.head)
    assert.strictEqual(minted.status, 0, minted.stderr)
    const file = join(dir, "certificate.json")
    writeFileSync(file, minted.stdout)
    assert.strictEqual((await writ("certificate", "verify", "--db", db, "--certificate", file)).status, 0)
    // Someone with write access drops the immutability trigger and loosens a rule in the stored snapshot.
    await rawSql(db, [
      "DROP TRIGGER policy_snapshots_immutable",
      "UPDATE policy_snapshots SET snapshot_json = replace(snapshot_json, '\"limit\":3', '\"limit\":300') WHERE policy_id = 'demo-agent'"
    ])
    const changed = await onStores(
      db,
      Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql<{ n: number }>`SELECT count(*) AS n FROM policy_snapshots WHERE snapshot_json LIKE '%"limit":300%'`
      )
    )
    assert.strictEqual(changed[0]!.n, 1, "the mutation took effect")
    const verified = await writJson("certificate", "verify", "--db", db, "--certificate", file)
    assert.strictEqual(verified.status, 1)
    assert.deepStrictEqual([verified.out.valid, verified.out.failure_code], [false, "missing_policy"])
    // The chain itself is untouched and still verifies: only the certificate's policy claim fails.
    assert.strictEqual(
      (await writ("evidence", "verify", "--db", db, "--chain", demo.chain_id, "--expected-head", demo.head)).status,
      0
    )
  }, 120_000)

  it(
    "recover closes an orphaned operation with external_result_ambiguous; the chain stays valid; log --run finds it",
    async () => {
      const db = join(freshDir(), "orphan.db")
      copyFileSync(demoDb, db)
      const orphan = await onStores(
        db,
        Effect.gen(function*() {
          const writer = yield* EvidenceWriter
          const chain_id = yield* IdGenerator.uuid
          const operation_id = yield* IdGenerator.uuid
          const run_id = yield* IdGenerator.uuid
          const task_boundary_id = yield* IdGenerator.uuid
          const draft = {
            operation_id,
            policy_id: demo.certificate.policy_id,
            policy_version: demo.certificate.policy_version
          }
          yield* appendGranted(writer, chain_id, {
            ...draft,
            record_type: "policy_bound",
            payload: { task_boundary_id, policy_digest: demo.certificate.policy_digest }
          })
          yield* appendGranted(writer, chain_id, {
            ...draft,
            record_type: "operation_started",
            payload: {
              task_boundary_id,
              policy_digest: demo.certificate.policy_digest,
              scope: { kind: "durable_run", run_id, owner_attempt_id: null },
              action: { name: "calc.add", version: "1" }
            }
          })
          return { chain_id, operation_id, run_id }
        })
      )
      const recovered = await writJson("recover", "--db", db)
      assert.strictEqual(recovered.status, 0, recovered.stderr)
      assert.deepStrictEqual(recovered.out.closed, [orphan.operation_id])
      assert.deepStrictEqual(recovered.out.unclosable, [])
      // Every record of the demo's chains (its session and its containment step) and the three of the orphan.
      const chains = (await writJson("evidence", "verify", "--db", demoDb)).out.chains
      const demoRecords = chains.reduce((sum: number, chain: any) => sum + chain.checked_records, 0)
      assert.isAbove(demoRecords, demo.records)
      assert.strictEqual(recovered.out.drained.inserted, demoRecords + 3)

      const verified = await writJson("evidence", "verify", "--db", db)
      assert.strictEqual(verified.status, 0)
      assert.isTrue(verified.out.chains.every((chain: any) => chain.valid))
      const byRun = await writJson("evidence", "log", "--db", db, "--run", orphan.run_id)
      assert.deepStrictEqual(byRun.out.map((chain: any) => chain.chain_id), [orphan.chain_id])
      const types = byRun.out[0].records.map((record: any) => record.record_type)
      assert.deepStrictEqual(types, ["policy_bound", "operation_started", "external_result_ambiguous"])
      assert.strictEqual(byRun.out[0].records[2].facts.reason_code, "recovery.orphaned_operation")
      assert.deepStrictEqual((await writJson("evidence", "log", "--db", db, "--run", demo.chain_id)).out, [])

      const again = await writJson("recover", "--db", db)
      assert.deepStrictEqual([again.status, again.out.closed, again.out.drained.inserted], [0, [], 0])
    },
    120_000
  )

  it(
    "recover refuses while an executor has the database open, names it and changes nothing; --force closes",
    async () => {
      const db = join(freshDir(), "held.db")
      const orphan = await orphanOn(db)
      // This test's own process registers an executor on the file, as a running `writ` host would.
      const held = await Effect.runPromise(Effect.gen(function*() {
        const scope = yield* Scope.make()
        const stores = yield* Layer.buildWithScope(Embedded.layerStores({ filename: db }), scope)
        yield* Effect.flatMap(ExecutorRegistry, (registry) => registry.register).pipe(
          Effect.provide(stores),
          Scope.extend(scope)
        )
        return scope
      }))
      try {
        const refused = await writ("recover", "--db", db)
        assert.strictEqual(refused.status, 1)
        assert.include(refused.stderr, `LiveExecutorsError: recovery refused: 1 executor(s) still have this store open`)
        assert.include(refused.stderr, `process ${process.pid} on `)
        const log = await writJson("evidence", "log", "--db", db)
        assert.deepStrictEqual(log.out[0].records.map((record: any) => record.record_type), [
          "policy_bound",
          "operation_started"
        ])
        const forced = await writJson("recover", "--db", db, "--force")
        assert.strictEqual(forced.status, 0, forced.stderr)
        assert.deepStrictEqual(forced.out.closed, [orphan])
      } finally {
        await Effect.runPromise(Scope.close(held, Exit.void))
      }
      assert.deepStrictEqual(await rawSql(db, ["SELECT count(*) AS n FROM executors"]), [[{ n: 0 }]])
    },
    120_000
  )

  it(
    "recover --forget drops a registration a process on another host left; an unknown or missing id exits 2, nothing changed",
    async () => {
      const db = join(freshDir(), "stale.db")
      const orphan = await orphanOn(db)
      await rawSql(db, [
        `INSERT INTO executors (executor_id, pid, host, boot_id, pid_namespace, started, opened_at)
        VALUES ('stale-1', 4242, 'elsewhere', '', '', '', '2026-01-01T00:00:00.000000Z')`
      ])
      const refused = await writ("recover", "--db", db)
      assert.strictEqual(refused.status, 1)
      assert.include(refused.stderr, "executor stale-1: process 4242 on elsewhere")
      const unknown = await writ("recover", "--db", db, "--forget", "stale-1", "--forget", "nope")
      assert.strictEqual(unknown.status, 2)
      assert.include(unknown.stderr, "--forget nope: no executor with this id is registered")
      assert.deepStrictEqual(await rawSql(db, ["SELECT executor_id FROM executors"]), [[{ executor_id: "stale-1" }]])
      // A --forget without an id (an unset shell variable, a forgotten argument) is refused, never dropped.
      const noValue = await Promise.all([
        writ("recover", "--db", db, "--forget"),
        writ("recover", "--db", db, "--forget", ""),
        writ("recover", "--db", db, "--forget", " ", "--force"),
        writ("recover", "--db", db, "--forget", "", "--force"),
        writ("recover", "--db", db, "--forget", "--force"),
        writ("recover", "--db", db, "--forget", "stale-1", "--forget")
      ])
      for (const result of noValue) {
        assert.strictEqual(result.status, 2, result.stderr)
        assert.include(result.stderr, "--forget needs an executor id")
      }
      assert.deepStrictEqual(await rawSql(db, ["SELECT executor_id FROM executors"]), [[{ executor_id: "stale-1" }]])
      assert.deepStrictEqual(
        (await writJson("evidence", "log", "--db", db)).out[0].records.map((record: any) => record.record_type),
        ["policy_bound", "operation_started"],
        "no recovery ran"
      )
      const forgotten = await writJson("recover", "--db", db, "--forget", "stale-1")
      assert.strictEqual(forgotten.status, 0, forgotten.stderr)
      assert.deepStrictEqual(forgotten.out.closed, [orphan])
      assert.deepStrictEqual(await rawSql(db, ["SELECT count(*) AS n FROM executors"]), [[{ n: 0 }]])
    },
    120_000
  )

  // Last, since it adds a second demo to the demo's db that the tests above read.
  it("demo twice on the same db: a new task boundary each time, and every chain verifies", async () => {
    const db = demoDb
    const first = { out: demo }
    const second = await writJson("demo", "--db", db)
    assert.strictEqual(second.status, 0, second.stderr)
    assert.notStrictEqual(first.out.chain_id, second.out.chain_id)
    assert.notStrictEqual(first.out.certificate.task_boundary_id, second.out.certificate.task_boundary_id)
    const verified = await writJson("evidence", "verify", "--db", db)
    assert.strictEqual(verified.status, 0)
    const chains = verified.out.chains.map((chain: any) => [chain.chain_id, chain.valid, chain.checked_records])
    assert.includeDeepMembers(chains, [[first.out.chain_id, true, first.out.records], [
      second.out.chain_id,
      true,
      second.out.records
    ]])
    // Each demo also runs its containment step in a boundary per backend: every chain on the file verifies.
    const containment = [...first.out.containment, ...second.out.containment].map((c: any) => c.chain_id)
    assert.sameMembers(chains.map(([chain_id]: any) => chain_id), [
      first.out.chain_id,
      second.out.chain_id,
      ...containment
    ])
    assert.isTrue(chains.every(([, valid]: any) => valid === true))
  }, 420_000)
})
