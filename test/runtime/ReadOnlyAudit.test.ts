/**
 * Auditing a WAL database through the `writ` binary (`evidence verify|log`, `certificate verify`): it works in a
 * read-only directory (a read-only bind mount, since root ignores file modes), it reads the transactions committed
 * only in the `-wal` (a view that ignored them would miss a chain's last records), and it leaves every directory it
 * reads exactly as it was: no `-wal` or `-shm` created beside the file.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { EvidenceWriter } from "../../core/evidence/Governance.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { bin, build, type Ran as Run, run, writ } from "../fixtures/cli.ts"
import { appendGranted } from "../fixtures/evidence.ts"

// better-sqlite3 directly: a connection that keeps the demo's commits in the -wal, and a look at the file alone.
const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string, options?: {
  readonly readonly?: boolean
}) => {
  readonly exec: (source: string) => unknown
  readonly prepare: (source: string) => { readonly all: (...params: Array<unknown>) => Array<unknown> }
  readonly close: () => unknown
}

// In a private mount namespace, `dir` is bind-mounted onto itself read-only; a probe write must fail before writ runs.
const readOnlyScript = [
  "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" \"$1\" || { echo 'read-only bind mount failed' >&2; exit 96; }",
  "if touch \"$1/.probe\" 2>/dev/null; then echo \"$1 is still writable\" >&2; exit 97; fi",
  "shift; exec node \"$@\""
].join("\n")

/** Run the built binary with `dir` read-only (a read-only bind mount in a private mount namespace). */
const writReadOnly = async (dir: string, ...args: Array<string>) => {
  const result = await run("unshare", ["-m", "sh", "-c", readOnlyScript, "sh", dir, bin, ...args])
  assert.notInclude([96, 97], result.status, `the directory was not made read-only: ${result.stderr}`)
  return result
}

/** Run the demo on a new database file: its JSON report. */
const writJsonDemo = async (db: string) => {
  const demo = await writ("demo", "--db", db, "--json")
  assert.strictEqual(demo.status, 0, demo.stderr)
  return JSON.parse(demo.stdout)
}

const freshDir = () => mkdtempSync(join(tmpdir(), "writ-audit-"))

/** A directory's entries and each file's bytes. */
const snapshot = (dir: string) =>
  Object.fromEntries(readdirSync(dir).sort().map((name) => [name, readFileSync(join(dir, name)).toString("base64")]))

/** The chains and their record counts in a database file read alone, without its -wal (what an immutable view sees). */
const withoutWal = (db: string) => {
  const alone = join(freshDir(), "alone.db")
  copyFileSync(db, alone)
  const connection = new Database(alone, { readonly: true })
  try {
    return Object.fromEntries(
      (connection.prepare("SELECT chain_id, count(*) AS n FROM evidence_records GROUP BY chain_id").all() as Array<
        { chain_id: string; n: number }
      >).map(({ chain_id, n }) => [chain_id, n])
    )
  } finally {
    connection.close()
  }
}

/** Append two records to a chain on a database file (a new chain when none is given): the chain and its head. */
const appendTwo = (db: string, chain?: IdGenerator.Uuid) =>
  Effect.runPromise(Effect.provide(
    Effect.gen(function*() {
      const writer = yield* EvidenceWriter
      const chain_id = chain ?? (yield* IdGenerator.uuid)
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
      const head = Option.getOrThrow(yield* (yield* EvidenceStore).head(chain_id))
      return { chain_id, head: head.hash }
    }),
    Embedded.layerStores({ filename: db, commitThread: "off" })
  ))

describe("auditing a WAL database reads every commit and writes nothing", () => {
  // The fixture: a database file and its -wal, copied while a reader held the WAL open, so the -wal holds commits the
  // file does not: the last two records of `partial` and the whole of a second demo (a certified task boundary).
  const fixture = { dir: "", live: "", partial: { chain_id: "", head: "" }, demo: {} as any }
  let holder: InstanceType<typeof Database> | undefined

  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
    const live = join(freshDir(), "live.db")
    fixture.live = live
    await writJsonDemo(live)
    const first = await appendTwo(live)
    holder = new Database(live)
    // An open read transaction: no checkpoint can move a later commit into the file, nor restart the -wal.
    holder.exec("BEGIN")
    holder.prepare("SELECT count(*) FROM evidence_records").all()
    fixture.partial = await appendTwo(live, first.chain_id)
    fixture.demo = await writJsonDemo(live)
    fixture.dir = freshDir()
    copyFileSync(live, join(fixture.dir, "audit.db"))
    copyFileSync(`${live}-wal`, join(fixture.dir, "audit.db-wal"))
    writeFileSync(join(fixture.dir, "certificate.json"), JSON.stringify(fixture.demo.certificate))
    // The case is one where ignoring the -wal gives another answer: the file alone has half the chain, no demo.
    const alone = withoutWal(join(fixture.dir, "audit.db"))
    assert.strictEqual(alone[fixture.partial.chain_id], 2)
    assert.isUndefined(alone[fixture.demo.chain_id])
  }, 240_000)

  afterAll(() => {
    holder?.close()
  })

  /** A copy of the fixture (the file and its -wal, and the demo's certificate) in a fresh directory. */
  const copyFixture = () => {
    const dir = freshDir()
    for (const name of readdirSync(fixture.dir)) copyFileSync(join(fixture.dir, name), join(dir, name))
    return { dir, db: join(dir, "audit.db"), certificate: join(dir, "certificate.json") }
  }

  /** The three audits of the fixture, run by `audit`, each with what it must find. */
  const auditAll = async (audit: (...args: Array<string>) => Promise<Run>, db: string, certificate: string) => {
    const verified = await audit(
      "evidence",
      "verify",
      "--db",
      db,
      "--chain",
      fixture.partial.chain_id,
      "--expected-head",
      fixture.partial.head,
      "--json"
    )
    assert.strictEqual(verified.status, 0, verified.stderr)
    const [result] = JSON.parse(verified.stdout).chains
    assert.isTrue(result.valid)
    assert.strictEqual(result.checked_records, 4, "the two records only the -wal holds are verified")
    assert.strictEqual(result.verified_head, fixture.partial.head)
    const logged = await audit("evidence", "log", "--db", db, "--chain", fixture.demo.chain_id, "--json")
    assert.strictEqual(logged.status, 0, logged.stderr)
    const [timeline] = JSON.parse(logged.stdout)
    assert.strictEqual(timeline.records.length, fixture.demo.records, "the demo, only in the -wal, is read whole")
    const certified = await audit("certificate", "verify", "--db", db, "--certificate", certificate, "--json")
    assert.strictEqual(certified.status, 0, certified.stderr)
    assert.isTrue(JSON.parse(certified.stdout).valid)
  }

  it("in a read-only directory: verify, log and certificate verify read the commits only the -wal holds", async () => {
    const { certificate, db, dir } = copyFixture()
    const before = snapshot(dir)
    await auditAll((...args) => writReadOnly(dir, ...args), db, certificate)
    assert.deepStrictEqual(snapshot(dir), before)
  }, 120_000)

  it("in a writable directory: auditing a file and its -wal leaves the directory byte for byte as it was", async () => {
    const { certificate, db, dir } = copyFixture()
    const before = snapshot(dir)
    await auditAll(writ, db, certificate)
    assert.deepStrictEqual(snapshot(dir), before, "no -wal or -shm created, nothing changed")
  }, 120_000)

  it("a WAL database without a -wal, read-only or writable: audited, and no -wal or -shm left beside it", async () => {
    const dir = freshDir()
    const db = join(dir, "clean.db")
    const clean = await writJsonDemo(db)
    assert.deepStrictEqual(readdirSync(dir), ["clean.db"])
    writeFileSync(join(dir, "certificate.json"), JSON.stringify(clean.certificate))
    const before = snapshot(dir)
    for (const audit of [(...args: Array<string>) => writReadOnly(dir, ...args), writ]) {
      for (
        const args of [
          ["evidence", "verify", "--db", db, "--chain", clean.chain_id, "--expected-head", clean.head],
          ["evidence", "log", "--db", db],
          ["certificate", "verify", "--db", db, "--certificate", join(dir, "certificate.json")]
        ]
      ) {
        const result = await audit(...args)
        assert.strictEqual(result.status, 0, `${args.join(" ")}: ${result.stderr}`)
      }
      assert.deepStrictEqual(snapshot(dir), before, "the directory is as it was")
    }
  }, 120_000)

  it("the file alone is not what is audited: the head only the -wal reaches does not verify against it", async () => {
    const { db } = copyFixture()
    const alone = join(freshDir(), "alone")
    mkdirSync(alone)
    copyFileSync(db, join(alone, "audit.db"))
    const args = ["--chain", fixture.partial.chain_id, "--expected-head", fixture.partial.head, "--json"]
    const withWal = await writReadOnly(join(db, ".."), "evidence", "verify", "--db", db, ...args)
    assert.strictEqual(withWal.status, 0, withWal.stderr)
    const fileAlone = await writReadOnly(alone, "evidence", "verify", "--db", join(alone, "audit.db"), ...args)
    assert.strictEqual(fileAlone.status, 1, fileAlone.stderr)
    const [result] = JSON.parse(fileAlone.stdout).chains
    assert.isFalse(result.valid)
    assert.strictEqual(result.checked_records, 2)
  }, 120_000)

  it("beside a live connection's -wal and -shm: read in place, its commits seen, nothing created", async () => {
    const dir = join(fixture.live, "..")
    const certificate = join(fixture.dir, "certificate.json")
    const listing = readdirSync(dir).sort()
    assert.deepStrictEqual(listing, ["live.db", "live.db-shm", "live.db-wal"])
    const wal = readFileSync(`${fixture.live}-wal`)
    await auditAll((...args) => writReadOnly(dir, ...args), fixture.live, certificate)
    await auditAll(writ, fixture.live, certificate)
    assert.deepStrictEqual(readdirSync(dir).sort(), listing)
    assert.isTrue(readFileSync(`${fixture.live}-wal`).equals(wal), "the -wal is as it was")
  }, 120_000)

  it(
    "a backup with a hot journal (a writer stopped mid-transaction): read as last committed, the directory unchanged",
    async () => {
      const { db } = copyFixture()
      const backup = join(freshDir(), "backup.db")
      const source = new Database(db)
      source.exec(`VACUUM INTO '${backup}'`)
      source.close()
      const original = readFileSync(backup)
      // A rollback-journal writer rewrites every record in place, its cache spilling the pages into the file itself.
      const writer = new Database(backup)
      writer.exec(`PRAGMA cache_size = 1; DROP TRIGGER IF EXISTS evidence_records_no_update; BEGIN;
      UPDATE evidence_records SET payload_json = replace(payload_json, '"', ' ')`)
      const dir = freshDir()
      copyFileSync(backup, join(dir, "backup.db"))
      copyFileSync(`${backup}-journal`, join(dir, "backup.db-journal"))
      writer.exec("ROLLBACK")
      writer.close()
      assert.isFalse(readFileSync(join(dir, "backup.db")).equals(original), "the file holds the uncommitted pages")
      const before = snapshot(dir)
      const args = ["--chain", fixture.demo.chain_id, "--expected-head", fixture.demo.head, "--json"]
      for (const audit of [(...args: Array<string>) => writReadOnly(dir, ...args), writ]) {
        const verified = await audit("evidence", "verify", "--db", join(dir, "backup.db"), ...args)
        assert.strictEqual(verified.status, 0, verified.stderr)
        assert.isTrue(JSON.parse(verified.stdout).valid)
        assert.deepStrictEqual(snapshot(dir), before, "the file and its journal are as they were")
      }
    },
    120_000
  )
})
