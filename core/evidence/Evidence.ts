/**
 * Governed evidence records (spec/evidence.md): the closed record taxonomy, `sha256-v1` payload
 * and chain hashes, and chain verification against a trusted expected head.
 */
export type {
  /** What a writer supplies for a record; the chain position and hashes are filled in when it is sealed. */
  Draft,
  /** Where a sealed record goes: its identity, chain position and time. */
  Position
} from "./internal/record.ts"

export {
  /** One evidence record, as appended and stored. */
  EvidenceRecord,
  /** Why a chain failed verification. */
  FailureCode,
  /** The only hash algorithm this version verifies. */
  hashAlgorithm,
  /** `Schema.is` of the EvidenceRecord fields written out: every store checks every record it is handed with this. */
  isEvidenceRecord,
  /** The closed record taxonomy. */
  RecordType,
  /** A record as read back from storage, before anything about it is trusted: plain strings, numbers and nulls. */
  StoredRecord,
  /** A stored record from a row of its fields in `StoredRecord`'s field order, checked as `Schema.is(StoredRecord)` does. */
  storedRecordOf,
  /** The record types that close a governed operation; each `operation_started` needs exactly one. */
  terminalTypes,
  /** A chain's verification: valid, how many records were fully verified, the last good hash, and the first failure. */
  VerificationResult
} from "./internal/record.ts"

export type {
  /** Where consecutive sealed records go: the first one's chain position, every record's id, and when they are sealed. */
  Positions
} from "./internal/chain.ts"

export {
  /** The `sha256-v1` chain-hash input of a record: the canonical JSON of every field but `chain_hash`. */
  chainInput,
  /** A record's own content checked: its recomputed chain hash, or why it fails (unknown algorithm, hashes that do not recompute). */
  checkContent,
  /** The `sha256-v1` payload digest and chain hash a record's content recomputes to; fails when a field is not canonical. */
  rehash,
  /** Seal a draft at a chain position: canonical payload, both hashes. Fails when the payload is not canonical JSON. */
  seal,
  /** `sealAllWith` over a synchronous SHA-256, with no Effect. */
  sealAllSync,
  /** Seal drafts in turn with a Digest service, each extending the one before it from `at`. */
  sealAllWith,
  /** The chain-input text of a record sealed in this process, taken once: the first admission reads it, later ones recompute it. */
  takeSealedInput,
  /** Verify a chain read in ascending sequence against a trusted expected head (without one, only its internal links). */
  verify,
  /** `verify` in the calling step, over a synchronous SHA-256 and the chain's pages read synchronously. */
  verifyPages
} from "./internal/chain.ts"
