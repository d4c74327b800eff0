/**
 * Governed evidence records (spec/evidence.md): the closed record taxonomy, `sha256-v1` payload
 * and chain hashes, and chain verification against a trusted expected head.
 */
import { Effect, Either, Schema, Stream } from "effect"
import * as Canonical from "./Canonical.ts"
import { Digest, Sha256Hex } from "./Digest.ts"
import { Uuid } from "./IdGenerator.ts"
import { Timestamp } from "./Time.ts"

/** The closed record taxonomy. */
export const RecordType = Schema.Literal(
  "policy_bound",
  "operation_started",
  "gate_evaluated",
  "exception_granted",
  "operation_denied",
  "callable_completed",
  "callable_failed",
  "operation_cancelled",
  "operation_timed_out",
  "external_result_ambiguous",
  "task_closed",
  "record_superseded"
)

/** A record type. */
export type RecordType = typeof RecordType.Type

/** The record types that close a governed operation; each `operation_started` needs exactly one. */
export const terminalTypes: ReadonlySet<string> = new Set<RecordType>([
  "operation_denied",
  "callable_completed",
  "callable_failed",
  "operation_cancelled",
  "operation_timed_out",
  "external_result_ambiguous"
])

/** The only hash algorithm this version verifies. */
export const hashAlgorithm = "sha256-v1"

/** One evidence record, as appended and stored. */
export class EvidenceRecord extends Schema.Class<EvidenceRecord>("EvidenceRecord")({
  record_id: Uuid,
  record_type: RecordType,
  chain_id: Uuid,
  operation_id: Schema.NullOr(Uuid),
  sequence: Schema.NonNegativeInt,
  policy_id: Schema.String,
  policy_version: Schema.String,
  payload_json: Schema.String,
  payload_digest: Sha256Hex,
  previous_chain_hash: Schema.NullOr(Sha256Hex),
  chain_hash: Sha256Hex,
  supersedes_record_id: Schema.NullOr(Uuid),
  created_at: Timestamp,
  hash_algorithm: Schema.String
}) {}

/** A record as read back from storage, before anything about it is trusted: plain strings, numbers and nulls. */
export const StoredRecord = Schema.Struct({
  record_id: Schema.String,
  record_type: Schema.String,
  chain_id: Schema.String,
  operation_id: Schema.NullOr(Schema.String),
  sequence: Schema.Number,
  policy_id: Schema.String,
  policy_version: Schema.String,
  payload_json: Schema.String,
  payload_digest: Schema.String,
  previous_chain_hash: Schema.NullOr(Schema.String),
  chain_hash: Schema.String,
  supersedes_record_id: Schema.NullOr(Schema.String),
  created_at: Schema.String,
  hash_algorithm: Schema.String
})

/** A record as read back from storage. */
export type StoredRecord = typeof StoredRecord.Type

/** What a writer supplies for a record; the chain position and hashes are filled in when it is sealed. */
export interface Draft {
  readonly record_type: RecordType
  readonly operation_id: Uuid | null
  readonly policy_id: string
  readonly policy_version: string
  readonly payload: { readonly [key: string]: Canonical.JsonValue }
  readonly supersedes_record_id?: Uuid | null
}

/** Where a sealed record goes: its identity, chain position and time. */
export interface Position {
  readonly record_id: Uuid
  readonly chain_id: Uuid
  readonly sequence: number
  readonly previous_chain_hash: Sha256Hex | null
  readonly created_at: Timestamp
}

/** Why a chain failed verification. */
export const FailureCode = Schema.Literal("broken_link", "content_mismatch", "unsupported_algorithm", "missing_policy")

/** Why a chain failed verification. */
export type FailureCode = typeof FailureCode.Type

/** A chain's verification: valid, how many records were fully verified, the last good hash, and the first failure. */
export class VerificationResult extends Schema.Class<VerificationResult>("VerificationResult")({
  chain_id: Schema.String,
  valid: Schema.Boolean,
  verified_head: Schema.NullOr(Sha256Hex),
  checked_records: Schema.NonNegativeInt,
  failure_code: Schema.NullOr(FailureCode),
  failed_record_id: Schema.NullOr(Schema.String)
}) {}

const encoder = new TextEncoder()

const chainFields = (record: Omit<StoredRecord, "chain_hash">) => ({
  record_id: record.record_id,
  record_type: record.record_type,
  chain_id: record.chain_id,
  operation_id: record.operation_id,
  sequence: record.sequence,
  policy_id: record.policy_id,
  policy_version: record.policy_version,
  payload_json: record.payload_json,
  payload_digest: record.payload_digest,
  previous_chain_hash: record.previous_chain_hash,
  supersedes_record_id: record.supersedes_record_id,
  created_at: record.created_at,
  hash_algorithm: record.hash_algorithm
})

/** The `sha256-v1` payload digest and chain hash a record's content recomputes to; fails when a field is not canonical. */
export const rehash = (record: Omit<StoredRecord, "chain_hash" | "payload_digest"> & { payload_digest?: string }) =>
  Effect.gen(function*() {
    const digest = yield* Digest
    const payload_digest = yield* digest.sha256(encoder.encode(record.payload_json))
    const text = yield* Canonical.stringify(chainFields({ ...record, payload_digest }))
    return { payload_digest, chain_hash: yield* digest.sha256(encoder.encode(text)) }
  })

/** Seal a draft at a chain position: canonical payload, both hashes. Fails when the payload is not canonical JSON. */
export const seal = (draft: Draft, position: Position) =>
  Effect.gen(function*() {
    const payload_json = yield* Canonical.stringify(draft.payload)
    const unsealed = {
      ...position,
      record_type: draft.record_type,
      operation_id: draft.operation_id,
      policy_id: draft.policy_id,
      policy_version: draft.policy_version,
      payload_json,
      supersedes_record_id: draft.supersedes_record_id ?? null,
      hash_algorithm: hashAlgorithm
    }
    const hashes = yield* rehash(unsealed)
    return new EvidenceRecord({ ...unsealed, ...hashes }, { disableValidation: true })
  })

/** A record's own content checked: its recomputed chain hash, or why it fails (unknown algorithm, hashes that do not recompute). */
export const checkContent = (
  record: StoredRecord
): Effect.Effect<Either.Either<Sha256Hex, "unsupported_algorithm" | "content_mismatch">, never, Digest> =>
  record.hash_algorithm !== hashAlgorithm
    ? Effect.succeed(Either.left("unsupported_algorithm"))
    : Effect.map(
      Effect.either(rehash(record)),
      (hashes) =>
        Either.isRight(hashes) && hashes.right.payload_digest === record.payload_digest &&
          hashes.right.chain_hash === record.chain_hash
          ? Either.right(hashes.right.chain_hash)
          : Either.left("content_mismatch")
    )

interface Walk {
  readonly checked: number
  readonly head: Sha256Hex | null
  readonly failure?: { readonly code: FailureCode; readonly record_id: string }
}

/**
 * Verify a chain read in ascending sequence against a trusted expected head (without one, only its internal links);
 * a record after the expected head is a broken link, and that head stays the last verified one.
 */
export const verify = <E, R>(
  chain_id: string,
  records: Stream.Stream<StoredRecord, E, R>,
  expected_head?: string
): Effect.Effect<VerificationResult, E, R | Digest> =>
  Effect.gen(function*() {
    const walked = yield* Stream.runFoldWhileEffect(
      records,
      { checked: 0, head: null } as Walk,
      (walk) => walk.failure === undefined,
      (walk, record): Effect.Effect<Walk, never, Digest> => {
        const linked = record.sequence === walk.checked && record.previous_chain_hash === walk.head
        const pastExpected = expected_head !== undefined && walk.head === expected_head
        if (!linked || pastExpected) {
          return Effect.succeed({ ...walk, failure: { code: "broken_link", record_id: record.record_id } })
        }
        return Effect.map(checkContent(record), (content): Walk =>
          Either.isLeft(content)
            ? { ...walk, failure: { code: content.left, record_id: record.record_id } }
            : { checked: walk.checked + 1, head: content.right })
      }
    )
    const failure = walked.failure ??
      (walked.checked === 0
        ? { code: "broken_link" as const, record_id: null }
        : expected_head !== undefined && walked.head !== expected_head
        ? { code: "broken_link" as const, record_id: null }
        : undefined)
    return new VerificationResult({
      chain_id,
      valid: failure === undefined,
      verified_head: walked.head,
      checked_records: walked.checked,
      failure_code: failure?.code ?? null,
      failed_record_id: failure?.record_id ?? null
    }, { disableValidation: true })
  })
