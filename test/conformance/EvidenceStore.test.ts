import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import * as path from "node:path"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqliteEvidenceStore from "../../adapters/node/SqliteEvidenceStore.ts"
import * as SqlEvidenceStore from "../../adapters/sql/SqlEvidenceStore.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { EvidenceRecord, FailureCode, StoredRecord } from "../../core/evidence/Evidence.ts"
import type { AppendReceipt, RecordPage, ScanPage } from "../../core/evidence/EvidenceStore.ts"
import { Cursor, EvidenceProjectionSource, EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { altered, sealAt, sealChain } from "../fixtures/evidence.ts"
import { sqliteLayer, tempDir } from "../fixtures/sqlite.ts"

const base = Layer.merge(NodeDigest.layer, IdGenerator.layerSeeded("evidence"))

type Base = Digest | IdGenerator.IdGenerator

// The commit thread is started before each case, so overlapping appends are committed by it.
const threadLayer = Layer.unwrapScoped(Effect.map(tempDir, (dir) => {
  const filename = path.join(dir, "writ.db")
  return SqliteEvidenceStore.layerCommitThread({ filename, start: "now" }).pipe(
    Layer.provide(Sqlite.layer({ filename }))
  )
}))

const layers = [
  ["memory", MemoryEvidenceStore.layer, false],
  ["sqlite", SqlEvidenceStore.layer.pipe(Layer.provide(sqliteLayer())), true],
  ["sqlite with commit thread", threadLayer, true]
] as const

const newChain = IdGenerator.uuid

const stored = (record: StoredRecord) => ({ ...record })

const receiptOf = (record: EvidenceRecord) => ({
  chain_id: record.chain_id,
  record_id: record.record_id,
  sequence: record.sequence,
  head_hash: record.chain_hash
})

const plain = (receipt: AppendReceipt) => ({ ...receipt })

const appendAll = (records: ReadonlyArray<EvidenceRecord>) =>
  Effect.flatMap(EvidenceStore, (store) => Effect.forEach(records, store.append))

const readAll = (chain_id: string, after?: number) =>
  Effect.flatMap(EvidenceStore, (store) => Stream.runCollect(store.read(chain_id, after))).pipe(
    Effect.map((records) => Chunk.toReadonlyArray(records).map((record) => ({ ...record })))
  )

const conflict = <R>(effect: Effect.Effect<unknown, { readonly _tag: string; readonly reason?: string }, R>) =>
  Effect.map(Effect.flip(effect), (error) => `${error._tag}:${error.reason ?? ""}`)

for (const [name, layer, durable] of layers) {
  describe(`EvidenceStore conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, EvidenceStore | EvidenceProjectionSource | Base>) =>
      Effect.provide(effect, Layer.provideMerge(Layer.fresh(layer), base))

    it.effect("says whether it is durable", () =>
      provided(Effect.gen(function*() {
        assert.strictEqual((yield* EvidenceStore).durable, durable)
      })))

    it.effect("a new chain accepts only sequence 0 with no previous hash", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [first] = yield* sealChain(chain, 1)
        const atOne = yield* sealAt(chain, 1, null)
        const linked = yield* sealAt(chain, 0, first!.chain_hash, 9)
        assert.strictEqual(yield* conflict(store.append(atOne)), "EvidenceConflictError:sequence")
        assert.strictEqual(yield* conflict(store.append(linked)), "EvidenceConflictError:stale_head")
        assert.isTrue(Option.isNone(yield* store.head(chain)))
        const receipt = yield* store.append(first!)
        assert.deepStrictEqual(plain(receipt), receiptOf(first!))
        assert.deepStrictEqual(yield* store.head(chain), Option.some({ sequence: 0, hash: first!.chain_hash }))
      })))

    it.effect("an existing chain accepts only the next sequence extending its current head", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const records = yield* sealChain(chain, 3)
        yield* appendAll(records)
        const head = { sequence: 2, hash: records[2]!.chain_hash }
        const skip = yield* sealAt(chain, 4, head.hash)
        const again = yield* sealAt(chain, 2, records[1]!.chain_hash, 9)
        const restart = yield* sealAt(chain, 0, null, 9)
        const stale = yield* sealAt(chain, 3, records[1]!.chain_hash)
        assert.strictEqual(yield* conflict(store.append(skip)), "EvidenceConflictError:sequence")
        assert.strictEqual(yield* conflict(store.append(again)), "EvidenceConflictError:sequence")
        assert.strictEqual(yield* conflict(store.append(restart)), "EvidenceConflictError:sequence")
        assert.strictEqual(yield* conflict(store.append(stale)), "EvidenceConflictError:stale_head")
        assert.deepStrictEqual(yield* store.head(chain), Option.some(head))
        const [next] = yield* sealChain(chain, 1, head)
        assert.deepStrictEqual(plain(yield* store.append(next!)), receiptOf(next!))
        assert.strictEqual((yield* readAll(chain)).length, 4)
      })))

    it.effect("appending the same record twice, or reusing a record id, is a conflict and never idempotent", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [first, second] = yield* sealChain(chain, 2)
        yield* store.append(first!)
        assert.strictEqual(yield* conflict(store.append(first!)), "EvidenceConflictError:duplicate_record")
        yield* store.append(second!)
        assert.strictEqual(yield* conflict(store.append(second!)), "EvidenceConflictError:duplicate_record")
        const reused = yield* altered(
          yield* sealAt(chain, 2, second!.chain_hash, 9),
          { record_id: first!.record_id },
          true
        )
        assert.strictEqual(yield* conflict(store.append(reused)), "EvidenceConflictError:duplicate_record")
        const elsewhere = yield* altered(yield* sealAt(yield* newChain, 0, null), { record_id: first!.record_id }, true)
        assert.strictEqual(yield* conflict(store.append(elsewhere)), "EvidenceConflictError:duplicate_record")
        assert.deepStrictEqual(yield* store.head(chain), Option.some({ sequence: 1, hash: second!.chain_hash }))
        assert.strictEqual((yield* readAll(chain)).length, 2)
        assert.deepStrictEqual(yield* store.chains, [chain])
      })))

    it.effect("the store recomputes both hashes and refuses content that is not what it claims", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [record] = yield* sealChain(chain, 1)
        const cases = [
          ["payload_digest", yield* altered(record!, { payload_json: record!.payload_json.replace("ok", "no") })],
          ["payload_digest", yield* altered(record!, { payload_digest: Sha256Hex.make("0".repeat(64)) })],
          ["chain_hash", yield* altered(record!, { chain_hash: Sha256Hex.make("0".repeat(64)) })],
          ["chain_hash", yield* altered(record!, { policy_version: "2" })],
          ["unsupported_algorithm", yield* altered(record!, { hash_algorithm: "sha256-v2" }, true)],
          ["not_canonical", yield* altered(record!, { payload_json: record!.payload_json.replace(":", ": ") }, true)],
          ["not_canonical", yield* altered(record!, { payload_json: "[1]" }, true)],
          ["not_canonical", yield* altered(record!, { payload_json: "{\"n\":1.5}" }, true)],
          ["not_canonical", yield* altered(record!, { payload_json: "{\"n\":1,\"n\":2}" }, true)],
          ["not_canonical", yield* altered(record!, { payload_json: "{" }, true)],
          ["malformed", yield* altered(record!, { record_id: Uuid.make("R1", { disableValidation: true }) }, true)],
          ["malformed", yield* altered(record!, { sequence: -1 }, true)],
          ["malformed", yield* altered(record!, { sequence: 2 ** 60 })],
          ["malformed", yield* altered(record!, { record_type: "gate_passed" as EvidenceRecord["record_type"] }, true)]
        ] as const
        for (const [reason, bad] of cases) {
          const error = yield* Effect.flip(store.append(bad))
          assert.deepStrictEqual(
            [error._tag, error._tag === "EvidenceIntegrityError" ? error.reason : ""],
            ["EvidenceIntegrityError", reason],
            `${reason}: ${bad.payload_json}`
          )
        }
        assert.isTrue(Option.isNone(yield* store.head(chain)))
        assert.deepStrictEqual(yield* store.chains, [])
        assert.deepStrictEqual(plain(yield* store.append(record!)), receiptOf(record!))
      })))

    it.effect("read returns a chain ascending, exactly as stored, after a sequence", () =>
      provided(Effect.gen(function*() {
        const chain = yield* newChain
        const records = yield* sealChain(chain, 5)
        const other = yield* sealChain(yield* newChain, 2)
        yield* appendAll([records[0]!, other[0]!, records[1]!, records[2]!, other[1]!, records[3]!, records[4]!])
        assert.deepStrictEqual(yield* readAll(chain), records.map(stored))
        assert.deepStrictEqual(yield* readAll(chain, -1), records.map(stored))
        assert.deepStrictEqual(yield* readAll(chain, 2), records.slice(3).map(stored))
        assert.deepStrictEqual(yield* readAll(chain, 4), [])
        assert.deepStrictEqual(yield* readAll(yield* newChain), [])
      })))

    it.effect("head follows the last append; chains are listed in first-append order", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const [a, b, c] = [yield* newChain, yield* newChain, yield* newChain]
        const recordsA = yield* sealChain(a, 2)
        const recordsB = yield* sealChain(b, 3)
        const recordsC = yield* sealChain(c, 1)
        yield* appendAll([recordsB[0]!, recordsA[0]!, recordsB[1]!, recordsC[0]!, recordsA[1]!, recordsB[2]!])
        assert.deepStrictEqual(yield* store.chains, [b, a, c])
        assert.deepStrictEqual(yield* store.head(a), Option.some({ sequence: 1, hash: recordsA[1]!.chain_hash }))
        assert.deepStrictEqual(yield* store.head(b), Option.some({ sequence: 2, hash: recordsB[2]!.chain_hash }))
        assert.isTrue(Option.isNone(yield* store.head(yield* newChain)))
      })))

    it.effect("verify: a good chain, a trusted head it matches, one it does not, and an empty chain", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const records = yield* sealChain(chain, 5)
        yield* appendAll(records)
        const head = records[4]!.chain_hash
        const result = (chain_id: string, expected?: string) =>
          Effect.map(store.verify(chain_id, expected), (r) => ({ ...r }))
        const good = { chain_id: chain, valid: true, verified_head: head, checked_records: 5 }
        assert.deepStrictEqual(yield* result(chain), { ...good, failure_code: null, failed_record_id: null })
        assert.deepStrictEqual(yield* result(chain, head), { ...good, failure_code: null, failed_record_id: null })
        assert.deepStrictEqual(yield* result(chain, "f".repeat(64)), {
          ...good,
          valid: false,
          failure_code: "broken_link",
          failed_record_id: null
        })
        assert.deepStrictEqual(yield* result(chain, records[2]!.chain_hash), {
          chain_id: chain,
          valid: false,
          verified_head: records[2]!.chain_hash,
          checked_records: 3,
          failure_code: "broken_link",
          failed_record_id: records[3]!.record_id
        })
        const empty = yield* newChain
        assert.deepStrictEqual(yield* result(empty), {
          chain_id: empty,
          valid: false,
          verified_head: null,
          checked_records: 0,
          failure_code: "broken_link",
          failed_record_id: null
        })
      })))

    it.effect("64 fibers appending 20 records each to their own chains concurrently all commit and verify", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chains = yield* Effect.all(Array.from({ length: 64 }, () => newChain))
        const results = yield* Effect.forEach(chains, (chain) =>
          Effect.gen(function*() {
            const receipts: Array<AppendReceipt> = []
            let head: { sequence: number; hash: Sha256Hex } | undefined
            for (let i = 0; i < 20; i++) {
              const [record] = yield* sealChain(chain, 1, head)
              const receipt = yield* store.append(record!)
              assert.deepStrictEqual(plain(receipt), receiptOf(record!))
              receipts.push(receipt)
              head = { sequence: receipt.sequence, hash: receipt.head_hash }
            }
            return receipts
          }), { concurrency: "unbounded" })
        assert.deepStrictEqual(
          results.map((receipts) => receipts.map((r) => r.sequence)),
          chains.map(() => [...Array(20).keys()])
        )
        assert.deepStrictEqual([...(yield* store.chains)].sort(), [...chains].sort())
        for (const [i, chain] of chains.entries()) {
          const verified = yield* store.verify(chain, results[i]![19]!.head_hash)
          assert.deepStrictEqual([verified.valid, verified.checked_records], [true, 20])
        }
      })))

    it.effect("racing appends of the same next sequence to one chain: exactly one wins, the rest conflict", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [first] = yield* sealChain(chain, 1)
        yield* store.append(first!)
        const rivals = yield* Effect.forEach(
          Array.from({ length: 16 }, (_, i) => i),
          (i) => sealAt(chain, 1, first!.chain_hash, 100 + i)
        )
        const outcomes = yield* Effect.forEach(rivals, (record) => Effect.either(store.append(record)), {
          concurrency: "unbounded"
        })
        const winners = outcomes.flatMap((outcome, i) => Either.isRight(outcome) ? [rivals[i]!] : [])
        assert.strictEqual(winners.length, 1)
        for (const outcome of outcomes) {
          if (Either.isLeft(outcome)) {
            assert.deepStrictEqual([outcome.left._tag, "reason" in outcome.left && outcome.left.reason], [
              "EvidenceConflictError",
              "sequence"
            ])
          }
        }
        assert.deepStrictEqual(yield* store.head(chain), Option.some({ sequence: 1, hash: winners[0]!.chain_hash }))
        assert.isTrue((yield* store.verify(chain, winners[0]!.chain_hash)).valid)
      })))

    it.effect("concurrent appends where some conflict: each failure is its own, the others commit", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chains = yield* Effect.all(Array.from({ length: 8 }, () => newChain))
        const good = yield* Effect.forEach(chains, (chain) => sealChain(chain, 2))
        const bad = yield* Effect.forEach(chains, (chain) => sealAt(chain, 1, null))
        const outcomes = yield* Effect.forEach(
          chains.flatMap((_, i) => [good[i]![0]!, bad[i]!]),
          (record) => Effect.either(store.append(record)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          outcomes.map((outcome) => Either.isRight(outcome) ? "ok" : outcome.left._tag),
          chains.flatMap(() => ["ok", "EvidenceConflictError"])
        )
        const seconds = yield* Effect.forEach(good, (records) => Effect.either(store.append(records[1]!)), {
          concurrency: "unbounded"
        })
        assert.isTrue(seconds.every(Either.isRight))
      })))

    it.effect("appendAll commits records of one chain in order, each extending the one before", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const records = yield* sealChain(chain, 3)
        const receipts = yield* store.appendAll(records)
        assert.deepStrictEqual(receipts.map(plain), records.map(receiptOf))
        assert.deepStrictEqual(yield* readAll(chain), records.map(stored))
        assert.deepStrictEqual(yield* store.appendAll([]), [])
      })))

    it.effect("appendAll admits every record before committing any; a conflict keeps the records before it", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [first, second, third] = yield* sealChain(chain, 3)
        const forged = yield* altered(third!, { payload_json: "{\"forged\":true}" })
        assert.strictEqual(
          yield* conflict(store.appendAll([first!, second!, forged])),
          "EvidenceIntegrityError:payload_digest"
        )
        assert.deepStrictEqual(yield* readAll(chain), [])
        const gap = yield* sealAt(chain, 5, second!.chain_hash)
        assert.strictEqual(yield* conflict(store.appendAll([first!, second!, gap])), "EvidenceConflictError:sequence")
        assert.deepStrictEqual(yield* readAll(chain), [first!, second!].map(stored))
        assert.strictEqual(
          yield* conflict(store.appendAll([second!, third!])),
          "EvidenceConflictError:duplicate_record"
        )
        assert.deepStrictEqual(yield* readAll(chain), [first!, second!].map(stored))
      })))

    it.effect("appendAll refuses the first bad record in order, whatever is wrong with the records after it", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chain = yield* newChain
        const [first, second, third] = yield* sealChain(chain, 3)
        const wrongHash = yield* altered(second!, { chain_hash: Sha256Hex.make("0".repeat(64)) })
        const malformed = yield* altered(third!, { record_id: "not-a-uuid" as Uuid })
        const refusal = (records: ReadonlyArray<EvidenceRecord>) =>
          Effect.map(
            Effect.flip(store.appendAll(records)),
            (error) => "reason" in error ? `${error._tag}:${error.reason}:${error.record_id}` : error._tag
          )
        assert.strictEqual(
          yield* refusal([first!, wrongHash, malformed]),
          `EvidenceIntegrityError:chain_hash:${second!.record_id}`
        )
        const wrongPayload = yield* altered(third!, { payload_json: "{\"forged\":true}" })
        const unsupported = yield* altered(second!, { hash_algorithm: "sha256-v2" })
        assert.strictEqual(
          yield* refusal([first!, unsupported, wrongPayload]),
          `EvidenceIntegrityError:unsupported_algorithm:${second!.record_id}`
        )
        assert.strictEqual(
          yield* refusal([first!, second!, wrongPayload]),
          `EvidenceIntegrityError:payload_digest:${third!.record_id}`
        )
        assert.deepStrictEqual(yield* readAll(chain), [])
      })))

    it.effect("a duplicate among concurrent appends fails alone; the appends committed beside it stand", () =>
      provided(Effect.gen(function*() {
        const store = yield* EvidenceStore
        const chains = yield* Effect.all(Array.from({ length: 12 }, () => newChain))
        const firsts = yield* Effect.forEach(chains, (chain) => sealChain(chain, 1))
        const [taken] = yield* sealChain(yield* newChain, 1)
        yield* store.append(taken!)
        // A record reusing a stored id on a fresh chain: only a write can find it, never a head.
        const reused = yield* altered(yield* sealAt(yield* newChain, 0, null), { record_id: taken!.record_id }, true)
        const outcomes = yield* Effect.forEach(
          [...firsts.map((records) => records[0]!), reused],
          (record) => Effect.either(store.append(record)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          outcomes.map((outcome) =>
            Either.isRight(outcome)
              ? "ok"
              : `${outcome.left._tag}:${"reason" in outcome.left ? outcome.left.reason : ""}`
          ),
          [...chains.map(() => "ok"), "EvidenceConflictError:duplicate_record"]
        )
        for (const [i, chain] of chains.entries()) {
          assert.deepStrictEqual(yield* readAll(chain), [stored(firsts[i]![0]!)])
        }
      })))

    it.effect("scan delivers every committed append once, in commit order, page by page", () =>
      provided(Effect.gen(function*() {
        const source = yield* EvidenceProjectionSource
        const empty = yield* source.scan(null, 10)
        assert.deepStrictEqual([empty.receipts.length, empty.next_cursor], [0, null])
        const a = yield* sealChain(yield* newChain, 4)
        const b = yield* sealChain(yield* newChain, 3)
        const order = [a[0]!, b[0]!, a[1]!, a[2]!, b[1]!, b[2]!, a[3]!]
        const receipts = yield* appendAll(order)
        const seen: Array<AppendReceipt> = []
        let cursor: Cursor | null = null
        for (let pages = 0; pages < 10; pages++) {
          const page: ScanPage = yield* source.scan(cursor, 3)
          assert.isAtMost(page.receipts.length, 3)
          if (page.receipts.length === 0) {
            assert.strictEqual(page.next_cursor, cursor)
            break
          }
          seen.push(...page.receipts)
          cursor = page.next_cursor
        }
        assert.deepStrictEqual(seen.map(plain), receipts.map(plain))
        assert.deepStrictEqual(seen.map(plain), order.map(receiptOf))
        const [late] = yield* sealChain(a[0]!.chain_id, 1, { sequence: 3, hash: a[3]!.chain_hash })
        yield* EvidenceStore.pipe(Effect.flatMap((store) => store.append(late!)))
        assert.deepStrictEqual((yield* source.scan(cursor, 3)).receipts.map(plain), [receiptOf(late!)])
        assert.deepStrictEqual((yield* source.scan(null, 0)).receipts, [])
        const malformed = yield* Effect.flip(source.scan(Cursor.make("not a cursor"), 3))
        assert.strictEqual(malformed._tag, "EvidenceUnavailableError")
      })))

    it.effect("scanRecords delivers the records scan's receipts name, whole, under the same cursors", () =>
      provided(Effect.gen(function*() {
        const source = yield* EvidenceProjectionSource
        assert.deepStrictEqual(yield* source.scanRecords(null, 10), { records: [], next_cursor: null })
        const a = yield* sealChain(yield* newChain, 3)
        const b = yield* sealChain(yield* newChain, 2)
        const order = [a[0]!, b[0]!, a[1]!, b[1]!, a[2]!]
        yield* appendAll(order)
        const seen: Array<StoredRecord> = []
        let cursor: Cursor | null = null
        for (let pages = 0; pages < 10; pages++) {
          const scanned: ScanPage = yield* source.scan(cursor, 2)
          const page: RecordPage = yield* source.scanRecords(cursor, 2)
          assert.strictEqual(page.next_cursor, scanned.next_cursor)
          assert.deepStrictEqual(
            page.records.map((record) => [record.record_id, record.chain_hash]),
            scanned.receipts.map((receipt) => [receipt.record_id, receipt.head_hash])
          )
          if (page.records.length === 0) break
          seen.push(...page.records)
          cursor = page.next_cursor
        }
        assert.deepStrictEqual(seen.map(stored), order.map(stored))
        const malformed = yield* Effect.flip(source.scanRecords(Cursor.make("not a cursor"), 3))
        assert.strictEqual(malformed._tag, "EvidenceUnavailableError")
      })))

    it.effect("get returns a stored record by chain and id", () =>
      provided(Effect.gen(function*() {
        const source = yield* EvidenceProjectionSource
        const records = yield* sealChain(yield* newChain, 2)
        yield* appendAll(records)
        assert.deepStrictEqual(
          Option.map(yield* source.get(records[1]!.chain_id, records[1]!.record_id), stored),
          Option.some(stored(records[1]!))
        )
        assert.isTrue(Option.isNone(yield* source.get(yield* newChain, records[1]!.record_id)))
        assert.isTrue(Option.isNone(yield* source.get(records[1]!.chain_id, yield* newChain)))
      })))
  })
}

const insertRow = (sql: SqlClient.SqlClient, record: StoredRecord) =>
  sql`INSERT INTO evidence_records ${sql.insert({ ...record })}`

const dropGuards = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.zipRight(
    sql`DROP TRIGGER evidence_records_no_update`,
    sql`DROP TRIGGER evidence_records_no_delete`
  ))

const verified = (chain_id: string, expected?: string) =>
  Effect.flatMap(EvidenceStore, (store) => Effect.map(store.verify(chain_id, expected), (r) => ({ ...r })))

interface Tampering {
  readonly label: string
  readonly tamper: (
    sql: SqlClient.SqlClient,
    records: ReadonlyArray<EvidenceRecord>
  ) => Effect.Effect<unknown, unknown, IdGenerator.IdGenerator | Digest>
  readonly code: FailureCode
  /** The failed record: an index into the chain, "forged" for the inserted row, or null. */
  readonly failed: number | "forged" | null
  readonly checked: number
  /** The index of the trusted head to verify against, if any. */
  readonly expected?: number
}

const idOf = (records: ReadonlyArray<EvidenceRecord>, index: number) => records[index]!.record_id

const tamperings: ReadonlyArray<Tampering> = [
  {
    label: "a payload byte changed",
    tamper: (sql, records) =>
      sql`UPDATE evidence_records SET payload_json = replace(payload_json, 'ok', 'OK')
        WHERE record_id = ${idOf(records, 2)}`,
    code: "content_mismatch",
    failed: 2,
    checked: 2
  },
  {
    label: "a payload digest changed",
    tamper: (sql, records) =>
      sql`UPDATE evidence_records SET payload_digest = ${"a".repeat(64)} WHERE record_id = ${idOf(records, 2)}`,
    code: "content_mismatch",
    failed: 2,
    checked: 2
  },
  {
    // Record 2's own chain hash no longer recomputes: its content check fails before record 3's link is reached.
    label: "a chain hash changed mid-chain",
    tamper: (sql, records) =>
      sql`UPDATE evidence_records SET chain_hash = ${"b".repeat(64)} WHERE record_id = ${idOf(records, 2)}`,
    code: "content_mismatch",
    failed: 2,
    checked: 2
  },
  {
    label: "a chain hash changed and the next link rewritten to match",
    tamper: (sql, records) =>
      Effect.zipRight(
        sql`UPDATE evidence_records SET chain_hash = ${"b".repeat(64)} WHERE record_id = ${idOf(records, 2)}`,
        sql`UPDATE evidence_records SET previous_chain_hash = ${"b".repeat(64)} WHERE record_id = ${idOf(records, 3)}`
      ),
    code: "content_mismatch",
    failed: 2,
    checked: 2
  },
  {
    label: "the head's chain hash changed",
    tamper: (sql, records) =>
      sql`UPDATE evidence_records SET chain_hash = ${"b".repeat(64)} WHERE record_id = ${idOf(records, 4)}`,
    code: "content_mismatch",
    failed: 4,
    checked: 4
  },
  {
    label: "a sequence changed",
    tamper: (sql, records) => sql`UPDATE evidence_records SET sequence = 7 WHERE record_id = ${idOf(records, 2)}`,
    code: "broken_link",
    failed: 3,
    checked: 2
  },
  {
    label: "the first record renumbered past the head",
    tamper: (sql, records) => sql`UPDATE evidence_records SET sequence = 5 WHERE record_id = ${idOf(records, 0)}`,
    code: "broken_link",
    failed: 1,
    checked: 0
  },
  {
    label: "a record deleted",
    tamper: (sql, records) => sql`DELETE FROM evidence_records WHERE record_id = ${idOf(records, 2)}`,
    code: "broken_link",
    failed: 3,
    checked: 2
  },
  {
    label: "the first record deleted",
    tamper: (sql, records) => sql`DELETE FROM evidence_records WHERE record_id = ${idOf(records, 0)}`,
    code: "broken_link",
    failed: 1,
    checked: 0
  },
  {
    label: "the head deleted, verified against the trusted head",
    tamper: (sql, records) => sql`DELETE FROM evidence_records WHERE record_id = ${idOf(records, 4)}`,
    code: "broken_link",
    failed: null,
    checked: 4,
    expected: 4
  },
  {
    label: "two records reordered",
    tamper: (sql, records) =>
      Effect.all([
        sql`UPDATE evidence_records SET sequence = 100 WHERE record_id = ${idOf(records, 1)}`,
        sql`UPDATE evidence_records SET sequence = 1 WHERE record_id = ${idOf(records, 2)}`,
        sql`UPDATE evidence_records SET sequence = 2 WHERE record_id = ${idOf(records, 1)}`
      ]),
    code: "broken_link",
    failed: 2,
    checked: 1
  },
  {
    label: "the hash algorithm changed",
    tamper: (sql, records) =>
      sql`UPDATE evidence_records SET hash_algorithm = 'sha512-v9' WHERE record_id = ${idOf(records, 2)}`,
    code: "unsupported_algorithm",
    failed: 2,
    checked: 2
  },
  {
    label: "a forged row that links to nothing",
    tamper: (sql, records) =>
      Effect.flatMap(sealAt(records[0]!.chain_id, 5, Sha256Hex.make("c".repeat(64))), (row) => insertRow(sql, row)),
    code: "broken_link",
    failed: "forged",
    checked: 5
  },
  {
    label: "a well-forged row after the trusted head",
    tamper: (sql, records) =>
      Effect.flatMap(sealAt(records[0]!.chain_id, 5, records[4]!.chain_hash), (row) => insertRow(sql, row)),
    code: "broken_link",
    failed: "forged",
    checked: 5,
    expected: 4
  },
  {
    label: "a forged row squeezed between two sequences",
    tamper: (sql, records) =>
      Effect.flatMap(
        sealAt(records[0]!.chain_id, 3, records[2]!.chain_hash),
        (row) => insertRow(sql, { ...row, sequence: 2.5 })
      ),
    code: "broken_link",
    failed: "forged",
    checked: 3
  }
]

const openAt = (filename: string) =>
  SqlEvidenceStore.layer.pipe(Layer.provideMerge(Sqlite.layer({ filename })), Layer.provideMerge(NodeDigest.layer))

describe("SqlEvidenceStore", () => {
  const withSql = SqlEvidenceStore.layer.pipe(Layer.provideMerge(sqliteLayer()), Layer.provideMerge(base))
  const provided = <A, E>(
    effect: Effect.Effect<A, E, EvidenceStore | EvidenceProjectionSource | SqlClient.SqlClient | Base>
  ) => Effect.provide(effect, Layer.fresh(withSql))

  it.live("an append racing the store's close is answered, committed or unavailable as the file then says", () =>
    Effect.gen(function*() {
      for (let yields = 0; yields < 4; yields++) {
        yield* Effect.scoped(Effect.gen(function*() {
          const database = yield* Layer.build(sqliteLayer())
          const scope = yield* Scope.make()
          const store = yield* Effect.provide(SqlEvidenceStore.make(), database).pipe(Scope.extend(scope))
          const record = yield* sealAt(yield* newChain, 0, null)
          const appending = yield* Effect.fork(store.append(record))
          for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
          yield* Scope.close(scope, Exit.void)
          const answer = yield* Fiber.await(appending).pipe(Effect.timeout("5 seconds"), Effect.option)
          assert.isTrue(Option.isSome(answer), `no answer after ${yields} yields`)
          const stored = yield* Effect.provide(
            Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT record_id FROM evidence_records`),
            database
          )
          assert.strictEqual(stored.length, Exit.isSuccess(Option.getOrThrow(answer)) ? 1 : 0)
        }))
      }
    }).pipe(Effect.provide(base)))

  // The Node layer reads and verifies through a connection of its own, synchronously: it must find the same.
  const withDirect = Layer.unwrapScoped(Effect.map(tempDir, (dir) => {
    const filename = path.join(dir, "writ.db")
    return SqliteEvidenceStore.layerCommitThread({ filename }).pipe(Layer.provideMerge(Sqlite.layer({ filename })))
  })).pipe(Layer.provideMerge(base))
  const readers = [["the SqlClient", withSql], ["the direct connection", withDirect]] as const

  for (const [reader, layer] of readers) {
    for (const tampering of tamperings) {
      it.effect(`verify through ${reader} after tampering: ${tampering.label} -> ${tampering.code}`, () =>
        Effect.provide(
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            const records = yield* sealChain(yield* newChain, 5)
            const chain = records[0]!.chain_id
            yield* appendAll(records)
            assert.isTrue((yield* verified(chain, records[4]!.chain_hash)).valid)
            yield* dropGuards
            yield* tampering.tamper(sql, records)
            const forged = (yield* readAll(chain)).find((row) => !records.some((r) => r.record_id === row.record_id))
            assert.deepStrictEqual(
              yield* verified(
                chain,
                tampering.expected === undefined ? undefined : records[tampering.expected]!.chain_hash
              ),
              {
                chain_id: chain,
                valid: false,
                verified_head: tampering.checked === 0 ? null : records[tampering.checked - 1]!.chain_hash,
                checked_records: tampering.checked,
                failure_code: tampering.code,
                failed_record_id: tampering.failed === null
                  ? null
                  : tampering.failed === "forged"
                  ? forged!.record_id
                  : idOf(records, tampering.failed)
              }
            )
          }),
          Layer.fresh(layer)
        ))
    }
  }

  it.effect("a well-forged row passes verification without a trusted head: the chain is not a signature", () =>
    provided(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const records = yield* sealChain(yield* newChain, 3)
      yield* appendAll(records)
      yield* dropGuards
      const [forged] = yield* sealChain(records[0]!.chain_id, 1, { sequence: 2, hash: records[2]!.chain_hash })
      yield* insertRow(sql, forged!)
      const result = yield* verified(records[0]!.chain_id)
      assert.deepStrictEqual([result.valid, result.checked_records], [true, 4])
    })))

  it.effect("a chain hash already stored under another record id is a duplicate_hash conflict", () =>
    provided(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const store = yield* EvidenceStore
      const [first, second] = yield* sealChain(yield* newChain, 2)
      yield* store.append(first!)
      yield* insertRow(sql, { ...second!, record_id: yield* newChain, chain_id: yield* newChain })
      assert.strictEqual(yield* conflict(store.append(second!)), "EvidenceConflictError:duplicate_hash")
    })))

  it.effect("the storage and the appends cannot be updated or deleted through SQL while the guards stand", () =>
    provided(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const records = yield* sealChain(yield* newChain, 2)
      yield* appendAll(records)
      assert.include(String((yield* Effect.flip(sql`DELETE FROM evidence_records`)).cause), "append-only")
      assert.include(String((yield* Effect.flip(sql`UPDATE evidence_records SET sequence = 9`)).cause), "append-only")
      assert.isTrue((yield* verified(records[0]!.chain_id, records[1]!.chain_hash)).valid)
    })))

  it.effect("a failed commit fails every append of its batch as unavailable and leaves nothing behind", () =>
    provided(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const store = yield* EvidenceStore
      // A deferred foreign key is checked at COMMIT: the transaction's statements succeed and the commit fails.
      yield* sql`CREATE TABLE parent (id INTEGER PRIMARY KEY)`
      yield* sql`CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`
      yield* sql`CREATE TRIGGER refuse_commit AFTER INSERT ON evidence_records BEGIN INSERT INTO child VALUES (1); END`
      const chains = yield* Effect.all(Array.from({ length: 8 }, () => newChain))
      const records = yield* Effect.forEach(chains, (chain) => sealChain(chain, 1))
      const misfit = yield* sealAt(chains[0]!, 5, null)
      const outcomes = yield* Effect.forEach(
        [...records.map((r) => r[0]!), misfit],
        (record) => Effect.flip(store.append(record)),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(outcomes.map((error) => error._tag), Array(9).fill("EvidenceUnavailableError"))
      assert.deepStrictEqual(yield* store.chains, [])
      yield* sql`DROP TRIGGER refuse_commit`
      const receipts = yield* Effect.forEach(records, (r) => store.append(r[0]!), { concurrency: "unbounded" })
      assert.strictEqual(receipts.length, 8)
      assert.strictEqual((yield* store.chains).length, 8)
    })))

  it.effect("reads page through a long chain and verify streams across pages", () =>
    provided(Effect.scoped(Effect.gen(function*() {
      const store = yield* SqlEvidenceStore.make({ pageSize: 2, maxBatch: 3 })
      const records = yield* sealChain(yield* newChain, 7)
      yield* Effect.forEach(records, store.append, { concurrency: "unbounded" })
      const read = (after?: number) =>
        Effect.map(
          Stream.runCollect(store.read(records[0]!.chain_id, after)),
          (c) => Chunk.toReadonlyArray(c).map((r) => ({ ...r }))
        )
      assert.deepStrictEqual(yield* read(), records.map(stored))
      assert.deepStrictEqual(yield* read(3), records.slice(4).map(stored))
      assert.deepStrictEqual(yield* read(5), records.slice(6).map(stored))
      const result = yield* store.verify(records[0]!.chain_id, records[6]!.chain_hash)
      assert.deepStrictEqual([result.valid, result.checked_records], [true, 7])
    }))))

  it.effect("an append to a closed store fails as unavailable instead of waiting forever", () =>
    provided(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const store = yield* Scope.extend(SqlEvidenceStore.make(), scope)
      const [record] = yield* sealChain(yield* newChain, 1)
      yield* Scope.close(scope, Exit.void)
      const error = yield* Effect.flip(store.append(record!))
      assert.strictEqual(error._tag, "EvidenceUnavailableError")
    })))

  it.scoped("a writer in another connection to the same file is seen: the head is read inside each commit", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const filename = path.join(dir, "writ.db")
      const one = yield* Layer.build(Layer.fresh(openAt(filename)))
      const two = yield* Layer.build(Layer.fresh(openAt(filename)))
      const chain = yield* newChain
      const records = yield* sealChain(chain, 4)
      yield* appendAll(records.slice(0, 3)).pipe(Effect.provide(one))
      yield* appendAll(records.slice(3)).pipe(Effect.provide(two))
      const rival = yield* sealAt(chain, 3, records[2]!.chain_hash, 99)
      const error = yield* conflict(Effect.flatMap(EvidenceStore, (store) => store.append(rival))).pipe(
        Effect.provide(one)
      )
      assert.strictEqual(error, "EvidenceConflictError:sequence")
      const head = yield* Effect.flatMap(EvidenceStore, (store) => store.head(chain)).pipe(Effect.provide(one))
      assert.deepStrictEqual(head, Option.some({ sequence: 3, hash: records[3]!.chain_hash }))
    }).pipe(Effect.provide(base)))

  it.scoped("survives a restart: head, read, verify and the projection cursor carry on", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const open = openAt(path.join(dir, "writ.db"))
      const chain = yield* newChain
      const other = yield* newChain
      const records = yield* sealChain(chain, 6)
      const [elsewhere] = yield* sealChain(other, 1)
      const before = yield* Effect.gen(function*() {
        const receipts = yield* appendAll([records[0]!, elsewhere!, ...records.slice(1, 4)])
        const page = yield* Effect.flatMap(EvidenceProjectionSource, (source) => source.scan(null, 3))
        return { receipts, cursor: page.next_cursor, delivered: page.receipts }
      }).pipe(Effect.provide(open))
      yield* Effect.gen(function*() {
        const store = yield* EvidenceStore
        const source = yield* EvidenceProjectionSource
        assert.isTrue(store.durable)
        assert.deepStrictEqual(yield* store.head(chain), Option.some({ sequence: 3, hash: records[3]!.chain_hash }))
        assert.deepStrictEqual(yield* readAll(chain), records.slice(0, 4).map(stored))
        assert.deepStrictEqual(yield* store.chains, [chain, other])
        assert.isTrue((yield* store.verify(chain, records[3]!.chain_hash)).valid)
        const rest = yield* source.scan(before.cursor, 100)
        assert.deepStrictEqual(
          [...before.delivered, ...rest.receipts].map(plain),
          before.receipts.map(plain)
        )
        yield* appendAll(records.slice(4))
        const late = yield* source.scan(rest.next_cursor, 100)
        assert.deepStrictEqual(late.receipts.map(plain), records.slice(4).map(receiptOf))
        assert.isTrue((yield* store.verify(chain, records[5]!.chain_hash)).valid)
      }).pipe(Effect.provide(open))
    }).pipe(Effect.provide(base)))
})
