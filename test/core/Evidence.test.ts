import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, Either, Equal, FastCheck, Hash, Layer, Schema, Stream } from "effect"
import fc from "fast-check"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Canonical from "../../core/base/Canonical.ts"
import { Digest, Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import { Timestamp } from "../../core/base/Time.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import type { StoredRecord } from "../../core/evidence/Evidence.ts"
import { admitAll } from "../../core/evidence/EvidenceStore.ts"
import { altered, draft, sealChain } from "../fixtures/evidence.ts"

const testLayer = Layer.merge(WebCryptoDigest.layer, IdGenerator.layerSeeded("evidence-core"))

const at = Timestamp.make("2026-11-29T18:33:51.123456Z")

// Expected values computed independently with Python's json.dumps(sort_keys=True, separators=(",", ":"),
// ensure_ascii=False) and hashlib.sha256.
const known = {
  payload_json: "{\"gate_id\":\"g\",\"n\":0,\"reason_code\":\"ok\",\"z\":[1,null,true],\"ünï\":\"✓\"}",
  payload_digest: "93aba2cabafcd0e3f06b7d0a1ad9ac3466e6ebb93a721eac8cd07a2e9f419920",
  chain_hash: "a1252f2e9071377369b4dc559da65823d8d91a7829830bcede2694387d814f9e",
  next_chain_hash: "c19ebc77c8e5d2a8bacfe6b15c7969fa6aef877d9abf094d5cbffef721b21ef2"
}

const stream = (records: ReadonlyArray<StoredRecord>) => Stream.fromIterable(records.map((record) => ({ ...record })))

// Verification works a chunk at a time; every answer must be the same however the records are chunked.
const verified = (records: ReadonlyArray<StoredRecord>, expected?: string, chain_id = "chain") =>
  Effect.gen(function*() {
    const results = yield* Effect.forEach(
      [1, 2, 3, Math.max(1, records.length)],
      (size) => Evidence.verify(chain_id, Stream.rechunk(stream(records), size), expected)
    )
    for (const result of results) assert.deepStrictEqual({ ...result }, { ...results[0]! })
    return { ...results[0]! } as { readonly [field: string]: unknown }
  })

const failure = (
  records: ReadonlyArray<StoredRecord>,
  code: Evidence.FailureCode,
  failed: string | null,
  checked: number,
  expected?: string
) =>
  Effect.gen(function*() {
    assert.deepStrictEqual(yield* verified(records, expected), {
      chain_id: "chain",
      valid: false,
      verified_head: checked === 0 ? null : records[checked - 1]!.chain_hash,
      checked_records: checked,
      failure_code: code,
      failed_record_id: failed
    })
  })

describe("Evidence", () => {
  it.effect("seal writes canonical payload bytes and sha256-v1 hashes equal to Python's", () =>
    Effect.gen(function*() {
      const first = yield* Evidence.seal({
        record_type: "gate_evaluated",
        operation_id: Uuid.make("33333333-3333-4333-8333-333333333333"),
        policy_id: "policy",
        policy_version: "1",
        payload: { z: [1, null, true], reason_code: "ok", "ünï": "✓", n: 0, gate_id: "g" }
      }, {
        record_id: Uuid.make("11111111-1111-4111-8111-111111111111"),
        chain_id: Uuid.make("22222222-2222-4222-8222-222222222222"),
        sequence: 0,
        previous_chain_hash: null,
        created_at: at
      })
      assert.deepStrictEqual(
        [first.payload_json, first.payload_digest, first.chain_hash, first.hash_algorithm],
        [known.payload_json, known.payload_digest, known.chain_hash, "sha256-v1"]
      )
      assert.strictEqual(first.supersedes_record_id, null)
      const next = yield* Evidence.seal({
        record_type: "task_closed",
        operation_id: null,
        policy_id: "policy",
        policy_version: "1",
        payload: {}
      }, {
        record_id: Uuid.make("44444444-4444-4444-8444-444444444444"),
        chain_id: first.chain_id,
        sequence: 1,
        previous_chain_hash: first.chain_hash,
        created_at: at
      })
      assert.strictEqual(next.chain_hash, known.next_chain_hash)
    }).pipe(Effect.provide(testLayer)))

  it.effect("seal refuses a payload outside the canonical domain", () =>
    Effect.gen(function*() {
      const [record] = yield* sealChain(yield* IdGenerator.uuid, 1)
      const refused = yield* Effect.flip(Evidence.seal({
        record_type: "gate_evaluated",
        operation_id: null,
        policy_id: "policy",
        policy_version: "1",
        payload: { latency: 1.5 }
      }, { ...record!, previous_chain_hash: null }))
      assert.deepStrictEqual([refused._tag, refused.reason, refused.path], ["CanonicalJsonError", "float", "$.latency"])
    }).pipe(Effect.provide(testLayer)))

  it.effect("sealAllWith seals drafts in turn, each extending the one before, and equals sealing them one by one", () =>
    Effect.gen(function*() {
      const digest = yield* Digest
      const chain_id = yield* IdGenerator.uuid
      const drafts = [0, 1, 2].map(draft)
      const record_ids = [yield* IdGenerator.uuid, yield* IdGenerator.uuid, yield* IdGenerator.uuid]
      const sealed = yield* Evidence.sealAllWith(digest, drafts, {
        chain_id,
        sequence: 4,
        previous_chain_hash: Sha256Hex.make("a".repeat(64)),
        record_ids,
        created_at: at
      })
      let previous_chain_hash: Sha256Hex | null = Sha256Hex.make("a".repeat(64))
      for (const [i, record] of sealed.entries()) {
        const alone = yield* Evidence.seal(drafts[i]!, {
          record_id: record_ids[i]!,
          chain_id,
          sequence: 4 + i,
          previous_chain_hash,
          created_at: at
        })
        assert.deepStrictEqual({ ...record }, { ...alone })
        previous_chain_hash = record.chain_hash
      }
      const refused = yield* Effect.flip(
        Evidence.sealAllWith(digest, [drafts[0]!, { ...drafts[1]!, payload: { f: 0.5 } }], {
          chain_id,
          sequence: 0,
          previous_chain_hash: null,
          record_ids,
          created_at: at
        })
      )
      assert.deepStrictEqual([refused.reason, refused.path], ["float", "$.f"])
    }).pipe(Effect.provide(testLayer)))

  it.effect("a sealed record is frozen with its chain-input text, taken once, and admission still recomputes its hashes", () =>
    Effect.gen(function*() {
      const [record] = yield* sealChain(yield* IdGenerator.uuid, 1)
      assert.isTrue(Object.isFrozen(record))
      assert.throws(() => Object.assign(record!, { payload_json: "{}" }))
      assert.strictEqual(Evidence.takeSealedInput(record!), Evidence.chainInput(record!))
      assert.isUndefined(Evidence.takeSealedInput(record!))
      const copy = new Evidence.EvidenceRecord({ ...record! }, { disableValidation: true })
      assert.isUndefined(Evidence.takeSealedInput(copy))
      const zeros: Digest.Service = {
        sha256: () => Effect.succeed(Sha256Hex.make("0".repeat(64))),
        sha256Texts: (texts) => Effect.succeed(texts.map(() => Sha256Hex.make("0".repeat(64))))
      }
      const refused = yield* Effect.flip(admitAll(zeros, [record!]))
      assert.deepStrictEqual([refused._tag, refused.reason], ["EvidenceIntegrityError", "payload_digest"])
      assert.deepStrictEqual(yield* admitAll(yield* Digest, [record!]), [record!])
      assert.isTrue(Equal.equals(record, copy))
      assert.strictEqual(Hash.hash(record!), Hash.hash(copy))
      const listed = yield* Evidence.seal({ ...draft(1), payload: [1] as never }, {
        record_id: yield* IdGenerator.uuid,
        chain_id: yield* IdGenerator.uuid,
        sequence: 0,
        previous_chain_hash: null,
        created_at: at
      })
      const notObject = yield* Effect.flip(admitAll(yield* Digest, [listed]))
      assert.deepStrictEqual([notObject._tag, notObject.reason], ["EvidenceIntegrityError", "not_canonical"])
    }).pipe(Effect.provide(testLayer)))

  it.effect("the chain hash covers every field but itself, and the payload digest covers the payload bytes", () =>
    Effect.gen(function*() {
      const [record] = yield* sealChain(yield* IdGenerator.uuid, 1)
      const changes: ReadonlyArray<Partial<Evidence.EvidenceRecord>> = [
        { record_id: yield* IdGenerator.uuid },
        { record_type: "task_closed" },
        { chain_id: yield* IdGenerator.uuid },
        { operation_id: yield* IdGenerator.uuid },
        { sequence: 1 },
        { policy_id: "other" },
        { policy_version: "2" },
        { payload_json: "{\"n\":1}" },
        { previous_chain_hash: Sha256Hex.make("a".repeat(64)) },
        { supersedes_record_id: yield* IdGenerator.uuid },
        { created_at: Timestamp.make("2026-11-29T18:33:51.123457Z") },
        { hash_algorithm: "sha256-v2" }
      ]
      const base = yield* Evidence.rehash(record!)
      assert.deepStrictEqual(base, { payload_digest: record!.payload_digest, chain_hash: record!.chain_hash })
      for (const change of changes) {
        const hashes = yield* Evidence.rehash({ ...record!, ...change })
        assert.notStrictEqual(hashes.chain_hash, record!.chain_hash, Object.keys(change)[0])
        assert.strictEqual(
          hashes.payload_digest === record!.payload_digest,
          change.payload_json === undefined,
          Object.keys(change)[0]
        )
      }
      // A stored payload digest does not feed the chain hash: the recomputed one does.
      const forgedDigest = yield* Evidence.rehash({ ...record!, payload_digest: "f".repeat(64) })
      assert.strictEqual(forgedDigest.chain_hash, record!.chain_hash)
    }).pipe(Effect.provide(testLayer)))

  it.effect("checkContent: the recomputed hash, or why the content fails, never a defect", () =>
    Effect.gen(function*() {
      const [record] = yield* sealChain(yield* IdGenerator.uuid, 1)
      const check = (changes: Partial<StoredRecord>) => Evidence.checkContent({ ...record!, ...changes })
      assert.deepStrictEqual(yield* check({}), Either.right(record!.chain_hash))
      assert.deepStrictEqual(
        yield* check({ payload_json: record!.payload_json.replace("ok", "no") }),
        Either.left("content_mismatch")
      )
      assert.deepStrictEqual(yield* check({ payload_digest: "0".repeat(64) }), Either.left("content_mismatch"))
      assert.deepStrictEqual(yield* check({ chain_hash: "0".repeat(64) }), Either.left("content_mismatch"))
      assert.deepStrictEqual(yield* check({ policy_id: "edited" }), Either.left("content_mismatch"))
      assert.deepStrictEqual(yield* check({ hash_algorithm: "sha512-v1" }), Either.left("unsupported_algorithm"))
      const rehashed = yield* altered(record!, { hash_algorithm: "sha256-v2" }, true)
      assert.deepStrictEqual(yield* Evidence.checkContent(rehashed), Either.left("unsupported_algorithm"))
      assert.deepStrictEqual(yield* check({ sequence: 0.5 }), Either.left("content_mismatch"))
      assert.deepStrictEqual(yield* check({ policy_id: "\uD800" }), Either.left("content_mismatch"))
    }).pipe(Effect.provide(testLayer)))

  it.effect("verify: a good chain is valid with every record checked and its head verified", () =>
    Effect.gen(function*() {
      const records = yield* sealChain(yield* IdGenerator.uuid, 4)
      const good = {
        chain_id: "chain",
        valid: true,
        verified_head: records[3]!.chain_hash,
        checked_records: 4,
        failure_code: null,
        failed_record_id: null
      }
      assert.deepStrictEqual(yield* verified(records), good)
      assert.deepStrictEqual(yield* verified(records, records[3]!.chain_hash), good)
    }).pipe(Effect.provide(testLayer)))

  it.effect("verify: empty chains, first sequences, gaps and previous hashes are broken links", () =>
    Effect.gen(function*() {
      const records = yield* sealChain(yield* IdGenerator.uuid, 4)
      const [r0, r1, r2, r3] = records
      yield* failure([], "broken_link", null, 0)
      yield* failure([], "broken_link", null, 0, r3.chain_hash)
      yield* failure([r1, r2, r3], "broken_link", r1.record_id, 0)
      yield* failure([r0, r1, r3], "broken_link", r3.record_id, 2)
      yield* failure([r0, r2, r1, r3], "broken_link", r2.record_id, 1)
      const relinked = yield* altered(records[2]!, { previous_chain_hash: r0.chain_hash }, true)
      yield* failure([r0, r1, relinked, r3], "broken_link", relinked.record_id, 2)
      yield* failure([r0, r1, { ...r2, sequence: 2.5 }, r3], "broken_link", r2.record_id, 2)
    }).pipe(Effect.provide(testLayer)))

  it.effect("verify: content and algorithm failures, and the first failure wins", () =>
    Effect.gen(function*() {
      const records = yield* sealChain(yield* IdGenerator.uuid, 4)
      const [r0, r1, r2, r3] = records
      const edited = { ...r1, payload_json: r1.payload_json.replace("ok", "no") }
      yield* failure([r0, edited, r2, r3], "content_mismatch", r1.record_id, 1)
      yield* failure([{ ...r0, chain_hash: r1.chain_hash }, r1, r2, r3], "content_mismatch", r0.record_id, 0)
      yield* failure([r0, r1, { ...r2, hash_algorithm: "sha256-v9" }, r3], "unsupported_algorithm", r2.record_id, 2)
      yield* failure([r0, edited, { ...r2, hash_algorithm: "sha256-v9" }], "content_mismatch", r1.record_id, 1)
      yield* failure([r0, r1, r3, { ...r2, hash_algorithm: "x" }], "broken_link", r3.record_id, 2)
    }).pipe(Effect.provide(testLayer)))

  it.effect("verify against a trusted head: a head never reached, and records beyond it, are broken links", () =>
    Effect.gen(function*() {
      const records = yield* sealChain(yield* IdGenerator.uuid, 4)
      yield* failure(records, "broken_link", null, 4, "e".repeat(64))
      yield* failure(records.slice(0, 3), "broken_link", null, 3, records[3]!.chain_hash)
      yield* failure(records, "broken_link", records[2]!.record_id, 2, records[1]!.chain_hash)
    }).pipe(Effect.provide(testLayer)))

  it.effect("chainInput writes exactly the canonical JSON of the chain fields, and refuses what it refuses", () =>
    Effect.sync(() =>
      fc.assert(
        fc.property(
          fc.record({
            text: fc.string({ unit: "binary", maxLength: 40 }),
            nullable: fc.option(fc.string({ unit: "binary", maxLength: 12 }), { nil: null }),
            sequence: fc.oneof(fc.maxSafeNat(), fc.constantFrom(Number.MAX_SAFE_INTEGER + 1, 1.5, -0, -1), fc.double())
          }),
          ({ nullable, sequence, text }) => {
            const fields = {
              record_id: text,
              record_type: "gate_evaluated",
              chain_id: nullable ?? "c",
              operation_id: nullable,
              sequence,
              policy_id: text.slice(1),
              policy_version: "1",
              payload_json: `{"t":${Either.getOrElse(Canonical.stringify(text), () => "0")}}`,
              payload_digest: "a".repeat(64),
              previous_chain_hash: nullable,
              supersedes_record_id: null,
              created_at: text.slice(2),
              hash_algorithm: "sha256-v1"
            }
            const canonical = Canonical.stringify(fields)
            assert.strictEqual(Evidence.chainInput(fields), Either.getOrUndefined(canonical))
            assert.strictEqual(Canonical.quote(text), Either.getOrUndefined(Canonical.stringify(text)))
          }
        ),
        { numRuns: 500 }
      )
    ))

  it.effect("the hand-written record checks decide exactly as Schema.is does", () =>
    Effect.sync(() => {
      const records = Arbitrary.make(Schema.Struct(Evidence.EvidenceRecord.fields))
      const junk = FastCheck.oneof(
        FastCheck.constant(null),
        FastCheck.constant(undefined),
        FastCheck.string(),
        FastCheck.integer(),
        FastCheck.double(),
        FastCheck.boolean()
      )
      const fields = Object.keys(Evidence.EvidenceRecord.fields)
      const isRecord = Schema.is(Schema.Struct(Evidence.EvidenceRecord.fields))
      const isStored = Schema.is(Evidence.StoredRecord)
      FastCheck.assert(
        FastCheck.property(
          records,
          FastCheck.option(FastCheck.tuple(FastCheck.constantFrom(...fields), junk)),
          (record, change) => {
            const value: Record<string, unknown> = { ...record }
            if (change !== null) value[change[0]] = change[1]
            assert.strictEqual(Evidence.isEvidenceRecord(value), isRecord(value))
            const row = Object.keys(Evidence.StoredRecord.fields).map((field) => value[field])
            assert.strictEqual(Evidence.storedRecordOf(row) !== undefined, isStored(value))
          }
        ),
        { numRuns: 1000 }
      )
    }))

  it.effect("verify passes on the stream's own failure", () =>
    Effect.gen(function*() {
      const records = yield* sealChain(yield* IdGenerator.uuid, 2)
      const error = yield* Effect.flip(
        Evidence.verify("chain", Stream.concat(stream(records), Stream.fail("storage gone" as const)))
      )
      assert.strictEqual(error, "storage gone")
    }).pipe(Effect.provide(testLayer)))
})
