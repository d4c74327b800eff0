/**
 * Tampering with a governed demo's evidence on disk: for every record of its chain and every kind of mutation an
 * attacker with write access to the SQLite file can make (with the append-only triggers dropped), verification
 * against the trusted head detects it with the right failure code, at the right record. A sample goes through the
 * `writ` binary too.
 */
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { execFile } from "node:child_process"
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlEvidenceStore from "../../adapters/sql/SqlEvidenceStore.ts"
import type { Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { bin, build } from "../fixtures/cli.ts"
import { evidenceColumns } from "../fixtures/evidence.ts"

/** Run the built binary without blocking the test worker. */
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

const columns = evidenceColumns

type Row = Evidence.StoredRecord

interface Statement {
  readonly sql: string
  readonly params?: ReadonlyArray<string | number | null>
}

/** What verification against the trusted head must report for a mutation (and, when given, without any head). */
interface Expected {
  readonly code: Evidence.FailureCode
  readonly failed_record_id: string | null
  readonly checked: number
}

interface Mutation {
  readonly kind: string
  readonly row: number
  readonly statements: ReadonlyArray<Statement>
  readonly withHead: Expected
  readonly withoutHead?: Expected | "valid"
}

const dropTriggers: ReadonlyArray<Statement> = [
  { sql: "DROP TRIGGER IF EXISTS evidence_records_no_update" },
  { sql: "DROP TRIGGER IF EXISTS evidence_records_no_delete" }
]

/** A different character at the middle of a string (one byte of ASCII text). */
const flipMiddle = (text: string) => {
  const at = Math.floor(text.length / 2)
  return text.slice(0, at) + (text[at] === "a" ? "b" : "a") + text.slice(at + 1)
}

/** A different first hex digit. */
const flipHex = (hash: string) => (hash[0] === "0" ? "1" : "0") + hash.slice(1)

const insert = (record: Row): Statement => ({
  sql: `INSERT INTO evidence_records (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`,
  params: columns.map((column) => record[column])
})

const update = (record_id: string, set: string, params: ReadonlyArray<string | number | null>): Statement => ({
  sql: `UPDATE evidence_records SET ${set} WHERE record_id = ?`,
  params: [...params, record_id]
})

/** A record the attacker seals with valid-looking hashes over a fake payload, at a chain position of their choice. */
const forge = (chain_id: string, sequence: number, previous_chain_hash: string | null, operation_id: string | null) =>
  Effect.gen(function*() {
    return yield* Evidence.seal({
      record_type: "gate_evaluated",
      operation_id: operation_id === null ? null : Uuid.make(operation_id),
      policy_id: "demo-agent",
      policy_version: "1",
      payload: { gate_id: "policy", level: "hard", decision: "allow", reason_code: "policy.allowed", forged: true }
    }, {
      record_id: yield* IdGenerator.uuid,
      chain_id: Uuid.make(chain_id),
      sequence,
      previous_chain_hash: previous_chain_hash as Sha256Hex | null,
      created_at: Time.fromMicros(1_800_000_000_000_000)
    })
  }).pipe(Effect.orDie)

/** The same record with its payload rewritten and both of its hashes recomputed: its own content is consistent. */
const rewritten = (record: Row) =>
  Effect.map(
    Effect.orDie(
      Evidence.rehash({ ...record, payload_json: record.payload_json.replace(/^\{/, "{\"injected\":true,") })
    ),
    (hashes) => ({ ...record, payload_json: record.payload_json.replace(/^\{/, "{\"injected\":true,"), ...hashes })
  )

/** Every mutation of every row of a chain of `n` records (read in sequence order). */
const mutations = (chain: ReadonlyArray<Row>) =>
  Effect.gen(function*() {
    const n = chain.length
    const chain_id = chain[0]!.chain_id
    const out: Array<Mutation> = []
    const next = (i: number) => chain[i + 1]?.record_id ?? null
    for (const [i, row] of chain.entries()) {
      const last = i === n - 1
      const content: Expected = { code: "content_mismatch", failed_record_id: row.record_id, checked: i }
      out.push({
        kind: "payload byte changed",
        row: i,
        statements: [update(row.record_id, "payload_json = ?", [flipMiddle(row.payload_json)])],
        withHead: content
      })
      out.push({
        kind: "payload_digest changed",
        row: i,
        statements: [update(row.record_id, "payload_digest = ?", [flipHex(row.payload_digest)])],
        withHead: content
      })
      out.push({
        kind: "chain_hash changed",
        row: i,
        statements: [update(row.record_id, "chain_hash = ?", [flipHex(row.chain_hash)])],
        withHead: content
      })
      // The row's own hashes recomputed over a new payload: content checks pass, the next link (or the head) breaks.
      const rehashed = yield* rewritten(row)
      out.push({
        kind: "payload rewritten and rehashed",
        row: i,
        statements: [
          update(row.record_id, "payload_json = ?, payload_digest = ?, chain_hash = ?", [
            rehashed.payload_json,
            rehashed.payload_digest,
            rehashed.chain_hash
          ])
        ],
        withHead: last
          ? { code: "broken_link", failed_record_id: null, checked: n }
          : { code: "broken_link", failed_record_id: next(i), checked: i + 1 }
      })
      out.push({
        kind: "sequence changed",
        row: i,
        statements: [update(row.record_id, "sequence = ?", [n + 1000 + i])],
        withHead: { code: "broken_link", failed_record_id: last ? row.record_id : next(i), checked: i }
      })
      out.push({
        kind: "row deleted",
        row: i,
        statements: [{ sql: "DELETE FROM evidence_records WHERE record_id = ?", params: [row.record_id] }],
        // Deleting the head leaves a shorter chain that is internally sound: only the trusted head exposes it.
        withHead: last
          ? { code: "broken_link", failed_record_id: null, checked: n - 1 }
          : { code: "broken_link", failed_record_id: next(i), checked: i },
        ...(last ? { withoutHead: "valid" as const } : {})
      })
      if (!last) {
        out.push({
          kind: "two rows swapped",
          row: i,
          statements: [
            update(row.record_id, "sequence = ?", [-1]),
            update(chain[i + 1]!.record_id, "sequence = ?", [i]),
            update(row.record_id, "sequence = ?", [i + 1])
          ],
          withHead: { code: "broken_link", failed_record_id: next(i), checked: i }
        })
        // A forged record appended after the head but linked to an earlier record.
        const forged = yield* forge(chain_id, n, row.chain_hash, row.operation_id)
        out.push({
          kind: "forged row appended, linked wrongly",
          row: i,
          statements: [insert(forged)],
          withHead: { code: "broken_link", failed_record_id: forged.record_id, checked: n },
          withoutHead: { code: "broken_link", failed_record_id: forged.record_id, checked: n }
        })
      }
      // A forged record inserted before this row, correctly linked to its predecessor; the rows after it moved up.
      const inserted = yield* forge(chain_id, i, chain[i - 1]?.chain_hash ?? null, row.operation_id)
      out.push({
        kind: "forged row inserted in the middle",
        row: i,
        statements: [
          {
            sql: "UPDATE evidence_records SET sequence = sequence + 100000 WHERE chain_id = ? AND sequence >= ?",
            params: [chain_id, i]
          },
          {
            sql: "UPDATE evidence_records SET sequence = sequence - 99999 WHERE chain_id = ? AND sequence >= 100000",
            params: [chain_id]
          },
          insert(inserted)
        ],
        withHead: { code: "broken_link", failed_record_id: row.record_id, checked: i + 1 }
      })
    }
    // A forged record correctly linked to the head: internally sound, so only the trusted head exposes it.
    const appended = yield* forge(chain_id, n, chain[n - 1]!.chain_hash, null)
    out.push({
      kind: "forged row appended at the head",
      row: n,
      statements: [insert(appended)],
      withHead: { code: "broken_link", failed_record_id: appended.record_id, checked: n },
      withoutHead: "valid"
    })
    return out
  }).pipe(Effect.provide(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)))

const readChain = (filename: string, chain_id: string) =>
  Effect.runPromise(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql.unsafe<Row>(
        `SELECT ${columns.join(", ")} FROM evidence_records WHERE chain_id = ? ORDER BY sequence`,
        [chain_id]
      )).pipe(Effect.provide(SqliteClient.layer({ filename })))
  )

/** Apply a mutation to a database file with raw SQL, then verify the chain through the SQL EvidenceStore. */
const mutateAndVerify = (filename: string, chain_id: string, head: string, mutation: Mutation) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (const statement of [...dropTriggers, ...mutation.statements]) {
        yield* sql.unsafe(statement.sql, statement.params ?? [])
      }
      const store = yield* EvidenceStore
      return {
        withHead: yield* store.verify(chain_id, head),
        withoutHead: mutation.withoutHead === undefined ? undefined : yield* store.verify(chain_id)
      }
    }).pipe(
      Effect.provide(
        SqlEvidenceStore.layer.pipe(Layer.provideMerge(Sqlite.layer({ filename })), Layer.provide(NodeDigest.layer))
      )
    )
  )

const assertDetected = (result: Evidence.VerificationResult, expected: Expected, label: string) => {
  assert.isFalse(result.valid, label)
  assert.deepStrictEqual(
    { code: result.failure_code, failed_record_id: result.failed_record_id, checked: result.checked_records },
    { code: expected.code, failed_record_id: expected.failed_record_id, checked: expected.checked },
    label
  )
}

describe("tampering with a governed chain on disk", () => {
  let dir = ""
  let base = ""
  let demo: any
  let chain: ReadonlyArray<Row> = []

  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
    dir = mkdtempSync(join(tmpdir(), "writ-tamper-"))
    base = join(dir, "demo.db")
    const run = await writ("demo", "--db", base, "--json")
    assert.strictEqual(run.status, 0, run.stderr)
    demo = JSON.parse(run.stdout)
    // Fold the WAL into the main file, so a copy of the file is the whole database.
    await Effect.runPromise(
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe("PRAGMA wal_checkpoint(TRUNCATE)")).pipe(
        Effect.provide(SqliteClient.layer({ filename: base }))
      )
    )
    chain = await readChain(base, demo.chain_id)
  }, 300_000)

  it("the untouched copy verifies, and every mutation of every row is detected with its failure code", async () => {
    const n = chain.length
    assert.strictEqual(n, demo.records)
    assert.isAbove(n, 30, "the demo's chain has a record for every kind of step")
    const untouched = join(dir, "untouched.db")
    copyFileSync(base, untouched)
    const clean = await mutateAndVerify(untouched, demo.chain_id, demo.head, {
      kind: "none",
      row: -1,
      statements: [],
      withHead: { code: "broken_link", failed_record_id: null, checked: 0 },
      withoutHead: "valid"
    })
    assert.isTrue(clean.withHead.valid && clean.withoutHead!.valid)
    assert.strictEqual(clean.withHead.checked_records, n)

    const all = await Effect.runPromise(mutations(chain))
    const kinds = new Map<string, number>()
    for (const [k, mutation] of all.entries()) {
      const copy = join(dir, `mutation-${k}.db`)
      copyFileSync(base, copy)
      const label = `${mutation.kind} at row ${mutation.row}`
      const result = await mutateAndVerify(copy, demo.chain_id, demo.head, mutation)
      assertDetected(result.withHead, mutation.withHead, label)
      if (mutation.withoutHead === "valid") {
        assert.isTrue(result.withoutHead!.valid, `${label}: without a trusted head the chain is internally sound`)
      } else if (mutation.withoutHead !== undefined) {
        assertDetected(result.withoutHead!, mutation.withoutHead, `${label} (no trusted head)`)
      }
      kinds.set(mutation.kind, (kinds.get(mutation.kind) ?? 0) + 1)
      rmSync(copy, { force: true })
      rmSync(`${copy}-wal`, { force: true })
      rmSync(`${copy}-shm`, { force: true })
    }
    // Every row took every per-row mutation; pairs and wrong links need a following row.
    assert.deepStrictEqual(Object.fromEntries(kinds), {
      "payload byte changed": n,
      "payload_digest changed": n,
      "chain_hash changed": n,
      "payload rewritten and rehashed": n,
      "sequence changed": n,
      "row deleted": n,
      "two rows swapped": n - 1,
      "forged row appended, linked wrongly": n - 1,
      "forged row inserted in the middle": n,
      "forged row appended at the head": 1
    })
    assert.strictEqual(all.length, 9 * n - 1)
    console.log(`tamper suite: ${all.length} mutations of a ${n}-record chain, each detected`)
  }, 900_000)

  it("through the binary: evidence verify and certificate verify exit 1 with the failure code", async () => {
    const all = await Effect.runPromise(mutations(chain))
    const n = chain.length
    const sample = [
      all.find((m) => m.kind === "payload byte changed" && m.row === 5)!,
      all.find((m) => m.kind === "row deleted" && m.row === n - 1)!,
      all.find((m) => m.kind === "two rows swapped" && m.row === 10)!,
      all.find((m) => m.kind === "forged row inserted in the middle" && m.row === 20)!
    ]
    const certificate = join(dir, "certificate.json")
    writeFileSync(certificate, JSON.stringify(demo.certificate))
    for (const [k, mutation] of sample.entries()) {
      const copy = join(dir, `cli-${k}.db`)
      copyFileSync(base, copy)
      await mutateAndVerify(copy, demo.chain_id, demo.head, {
        kind: mutation.kind,
        row: mutation.row,
        statements: mutation.statements,
        withHead: mutation.withHead
      })
      const [verified, certified] = await Promise.all([
        writ("evidence", "verify", "--db", copy, "--chain", demo.chain_id, "--expected-head", demo.head, "--json"),
        writ("certificate", "verify", "--db", copy, "--certificate", certificate, "--json")
      ])
      const label = `${mutation.kind} at row ${mutation.row}`
      assert.strictEqual(verified.status, 1, label)
      const [result] = JSON.parse(verified.stdout).chains
      assert.deepStrictEqual([result.valid, result.failure_code, result.failed_record_id], [
        false,
        mutation.withHead.code,
        mutation.withHead.failed_record_id
      ], label)
      assert.strictEqual(certified.status, 1, label)
      assert.strictEqual(JSON.parse(certified.stdout).failure_code, mutation.withHead.code, label)
    }
    // The untouched database: both exit 0.
    const untouched = join(dir, "cli-untouched.db")
    copyFileSync(base, untouched)
    assert.strictEqual((await writ("certificate", "verify", "--db", untouched, "--certificate", certificate)).status, 0)
  }, 600_000)
})
