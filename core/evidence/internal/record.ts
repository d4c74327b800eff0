/** Evidence records: the closed taxonomy, the stored row, and the hand-written checks that decide as Schema.is does. */
import { Hash, Schema } from "effect"
import type * as Canonical from "../../base/Canonical.ts"
import { Sha256Hex } from "../../base/Digest.ts"
import { Uuid } from "../../base/IdGenerator.ts"
import { isInstant, Timestamp } from "../../base/Time.ts"

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
}) {
  /** Its structural hash, computed each time: a sealed record is frozen, so the hash cannot be cached on it. */
  [Hash.symbol](): number {
    return Hash.structure(this)
  }
}

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

const isText = (value: unknown): value is string => typeof value === "string"

const isNullableText = (value: unknown): value is string | null => value === null || typeof value === "string"

const storedFields = Object.keys(StoredRecord.fields) as ReadonlyArray<keyof StoredRecord>

/** `Schema.is(StoredRecord)` written out field by field. */
const isStoredRecord = (r: { readonly [K in keyof StoredRecord]?: unknown }): r is StoredRecord =>
  isText(r.record_id) && isText(r.record_type) && isText(r.chain_id) && isNullableText(r.operation_id) &&
  typeof r.sequence === "number" && isText(r.policy_id) && isText(r.policy_version) && isText(r.payload_json) &&
  isText(r.payload_digest) && isNullableText(r.previous_chain_hash) && isText(r.chain_hash) &&
  isNullableText(r.supersedes_record_id) && isText(r.created_at) && isText(r.hash_algorithm)

/**
 * A stored record from a row of its fields in `StoredRecord`'s field order, checked as `Schema.is(StoredRecord)`
 * would, or undefined: a store's hot read path decodes every row it returns with this.
 */
export const storedRecordOf = (row: ReadonlyArray<unknown>): StoredRecord | undefined => {
  if (row.length !== storedFields.length) return undefined
  const record: { -readonly [K in keyof StoredRecord]?: unknown } = {}
  for (let i = 0; i < storedFields.length; i++) record[storedFields[i]!] = row[i]
  return isStoredRecord(record) ? record : undefined
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const SHA256_HEX = /^[0-9a-f]{64}$/
const recordTypes: ReadonlySet<unknown> = new Set(RecordType.literals)

const isUuid = (value: unknown) => typeof value === "string" && UUID.test(value)

const isSha256 = (value: unknown) => typeof value === "string" && SHA256_HEX.test(value)

/** `Schema.is` of the EvidenceRecord fields written out: every store checks every record it is handed with this. */
export const isEvidenceRecord = (value: unknown): value is EvidenceRecord => {
  if (typeof value !== "object" || value === null) return false
  const r = value as { readonly [K in keyof StoredRecord]: unknown }
  return isUuid(r.record_id) && recordTypes.has(r.record_type) && isUuid(r.chain_id) &&
    (r.operation_id === null || isUuid(r.operation_id)) && Number.isSafeInteger(r.sequence) &&
    (r.sequence as number) >= 0 && isText(r.policy_id) &&
    isText(r.policy_version) && isText(r.payload_json) && isSha256(r.payload_digest) &&
    (r.previous_chain_hash === null || isSha256(r.previous_chain_hash)) && isSha256(r.chain_hash) &&
    (r.supersedes_record_id === null || isUuid(r.supersedes_record_id)) && isText(r.created_at) &&
    isInstant(r.created_at) && isText(r.hash_algorithm)
}

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
