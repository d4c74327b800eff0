/**
 * The EvidenceStore port: append-only, hash-chained evidence with compare-and-append per chain,
 * read, head and verify, and never update or delete. EvidenceProjectionSource enumerates every
 * committed append in a durable cursor order for the projector.
 */
import { Context, Effect, Either, Schema } from "effect"
import type { Option, Stream } from "effect"
import * as Canonical from "../base/Canonical.ts"
import type { Digest } from "../base/Digest.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { trustedMake } from "../base/internal/trusted.ts"
import type { BudgetSpentError, PendingAdmission } from "../policy/BudgetLedger.ts"
import * as Evidence from "./Evidence.ts"
import type { EvidenceRecord, StoredRecord, VerificationResult } from "./Evidence.ts"
import { isAdmissible } from "./internal/capability.ts"

/** What a committed append returns; nothing returns one before its transaction commits. */
export class AppendReceipt extends Schema.Class<AppendReceipt>("AppendReceipt")({
  chain_id: Uuid,
  record_id: Uuid,
  sequence: Schema.NonNegativeInt,
  head_hash: Sha256Hex
}) {}

/** A chain's current head. */
export interface ChainHead {
  readonly sequence: number
  readonly hash: Sha256Hex
}

/** A record whose own content is wrong: not canonical, hashes that do not recompute, or an unknown algorithm. */
export class EvidenceIntegrityError extends Schema.TaggedError<EvidenceIntegrityError>()("EvidenceIntegrityError", {
  reason: Schema.Literal("payload_digest", "chain_hash", "not_canonical", "unsupported_algorithm", "malformed"),
  chain_id: Schema.String,
  record_id: Schema.String
}) {
  override get message() {
    return `evidence record ${this.record_id} on chain ${this.chain_id} refused: ${this.reason}`
  }
}

/** A record that does not extend its chain's head: wrong sequence, stale head, or a duplicate record id or hash. */
export class EvidenceConflictError extends Schema.TaggedError<EvidenceConflictError>()("EvidenceConflictError", {
  reason: Schema.Literal("sequence", "stale_head", "duplicate_record", "duplicate_hash"),
  chain_id: Schema.String,
  record_id: Schema.String
}) {
  override get message() {
    return `evidence record ${this.record_id} conflicts with chain ${this.chain_id}: ${this.reason}`
  }
}

/**
 * A record only the governed executor or recovery may append: an operation record (policy_bound, operation_started,
 * gate_evaluated, exception_granted, operation_denied or a terminal) offered without the executor's private append
 * capability (`operation_record`), or a recovery close for an operation its chain does not show started and still open
 * (`not_open`).
 */
export class EvidenceForbiddenError extends Schema.TaggedError<EvidenceForbiddenError>()("EvidenceForbiddenError", {
  reason: Schema.Literal("operation_record", "not_open"),
  record_type: Schema.String,
  chain_id: Schema.String,
  operation_id: Schema.NullOr(Schema.String),
  /** The record refused, or null for a draft a writer refused before sealing it. */
  record_id: Schema.NullOr(Schema.String)
}) {
  override get message() {
    return this.reason === "operation_record"
      ? `evidence record ${this.record_type} on chain ${this.chain_id} refused: only the governed executor appends operation records`
      : `evidence record ${this.record_type} on chain ${this.chain_id} refused: operation ${this.operation_id} is not started and open on it`
  }
}

/** The store could not be reached or could not commit. */
export class EvidenceUnavailableError extends Schema.TaggedError<EvidenceUnavailableError>()(
  "EvidenceUnavailableError",
  { detail: Schema.String }
) {
  override get message() {
    return `evidence store unavailable: ${this.detail}`
  }
}

/** Any way an append can fail. */
export type AppendError =
  | EvidenceIntegrityError
  | EvidenceForbiddenError
  | EvidenceConflictError
  | EvidenceUnavailableError

/** Append-only, hash-chained evidence. */
export class EvidenceStore extends Context.Tag("writ/EvidenceStore")<EvidenceStore, EvidenceStore.Service>() {}

/** The EvidenceStore service. */
export declare namespace EvidenceStore {
  /**
   * `appendAll`, with `now` where the store can commit synchronously: the same commit in the calling step, and with
   * `admitting` where it can commit budget admissions with the records. Both belong to the function they extend, so a
   * decorator that replaces `appendAll` drops them (a governed executor over it then admits through its BudgetLedger).
   */
  export interface AppendAll {
    (records: ReadonlyArray<EvidenceRecord>): Effect.Effect<ReadonlyArray<AppendReceipt>, AppendError>
    readonly now?: AppendNow
    readonly admitting?: AppendAdmitting
  }

  /**
   * `appendAll` with budget admissions written to its database's ledger in the same commit: every admission and every
   * record, or nothing (BudgetSpentError when an admission's window is full).
   */
  export interface AppendAdmitting {
    (
      records: ReadonlyArray<EvidenceRecord>,
      admissions: ReadonlyArray<PendingAdmission>
    ): Effect.Effect<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>
    /** The same commit in the calling step, as `AppendNow`. */
    readonly now?: (
      records: ReadonlyArray<EvidenceRecord>,
      admissions: ReadonlyArray<PendingAdmission>
    ) => Either.Either<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError> | undefined
    /** The database whose BudgetLedger (`BudgetLedger.Service.database`) the admissions are written to. */
    readonly ledger: unknown
  }

  /**
   * A commit in the calling step: the receipts or the refusal, or `undefined` (nothing appended) when the store cannot
   * commit at this moment. `blocking`: the commit holds the thread on I/O (a file's sync), so it is for an append that
   * has no other to share a group commit with.
   */
  export interface AppendNow {
    (records: ReadonlyArray<EvidenceRecord>): Either.Either<ReadonlyArray<AppendReceipt>, AppendError> | undefined
    readonly blocking?: boolean
  }

  /** Append, read, head, verify; no update, no delete. */
  export interface Service {
    /** Whether appends survive a restart. */
    readonly durable: boolean
    /**
     * Compare-and-append: recompute both hashes, refuse an operation record the executor did not seal
     * (EvidenceForbiddenError), then commit only the chain's next record.
     */
    readonly append: (record: EvidenceRecord) => Effect.Effect<AppendReceipt, AppendError>
    /**
     * Append records in order, committed together: every record is admitted before any is committed, then each is
     * compare-and-appended as if appended alone; the first refusal fails the call, and the records before it stay.
     */
    readonly appendAll: AppendAll
    /** A chain's records after `after_sequence` (default -1), ascending, exactly as stored. */
    readonly read: (
      chain_id: string,
      after_sequence?: number
    ) => Stream.Stream<StoredRecord, EvidenceUnavailableError>
    /** A chain's current head, if it has any record. */
    readonly head: (chain_id: string) => Effect.Effect<Option.Option<ChainHead>, EvidenceUnavailableError>
    /** Verify a chain from sequence 0 against a trusted expected head. */
    readonly verify: (
      chain_id: string,
      expected_head?: string
    ) => Effect.Effect<VerificationResult, EvidenceUnavailableError>
    /** Every chain id, in first-append order. */
    readonly chains: Effect.Effect<ReadonlyArray<string>, EvidenceUnavailableError>
  }
}

/** An opaque position in the projection source; it survives restart. */
export const Cursor = Schema.String.pipe(Schema.brand("EvidenceCursor"))

/** An opaque position in the projection source. */
export type Cursor = typeof Cursor.Type

/** One page of committed appends after a cursor. */
export interface ScanPage {
  readonly receipts: ReadonlyArray<AppendReceipt>
  readonly next_cursor: Cursor | null
}

/** One page of committed records after a cursor, as stored: `ScanPage` with each record whole. */
export interface RecordPage {
  readonly records: ReadonlyArray<StoredRecord>
  readonly next_cursor: Cursor | null
}

/** Every committed append, exactly once in cursor order, delivered at least once. */
export class EvidenceProjectionSource extends Context.Tag("writ/EvidenceProjectionSource")<
  EvidenceProjectionSource,
  EvidenceProjectionSource.Service
>() {}

/** The EvidenceProjectionSource service. */
export declare namespace EvidenceProjectionSource {
  /** Scan committed appends after a cursor (null: from the start). */
  export interface Service {
    readonly scan: (after: Cursor | null, limit: number) => Effect.Effect<ScanPage, EvidenceUnavailableError>
    /** `scan` with each record whole, a page in one read: what the projector replays. */
    readonly scanRecords: (after: Cursor | null, limit: number) => Effect.Effect<RecordPage, EvidenceUnavailableError>
    /** One record by chain and id, as stored. */
    readonly get: (
      chain_id: string,
      record_id: string
    ) => Effect.Effect<Option.Option<StoredRecord>, EvidenceUnavailableError>
  }
}

const isCanonicalPayload = (payload_json: string): boolean => {
  let parsed: unknown
  try {
    parsed = JSON.parse(payload_json)
  } catch {
    return false
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return false
  const text = Canonical.stringify(parsed)
  return Either.isRight(text) && text.right === payload_json
}

const integrityError = (record: unknown, reason: EvidenceIntegrityError["reason"]) => {
  const fields = record as { readonly chain_id?: unknown; readonly record_id?: unknown } | null | undefined
  return new EvidenceIntegrityError({
    reason,
    chain_id: String(fields?.chain_id),
    record_id: String(fields?.record_id)
  })
}

/** Why a record or draft is refused: an operation record without the executor's capability, or a close not allowed. */
export const forbiddenError = (
  record: Pick<Evidence.EvidenceRecord, "record_type" | "chain_id" | "operation_id"> & { readonly record_id?: string },
  reason: EvidenceForbiddenError["reason"] = "operation_record"
) =>
  new EvidenceForbiddenError({
    reason,
    record_type: record.record_type,
    chain_id: record.chain_id,
    operation_id: record.operation_id,
    record_id: record.record_id ?? null
  })

type Form =
  | { readonly refused: EvidenceIntegrityError["reason"]; readonly input?: undefined }
  | { readonly refused?: undefined; readonly input: string }

// A record's chain-hash input, or why its form is refused before any hash is recomputed.
const formOf = (record: Evidence.EvidenceRecord): Form => {
  if (!Evidence.isEvidenceRecord(record)) return { refused: "malformed" }
  const sealed = Evidence.takeSealedInput(record)
  // Sealed here: its payload is canonical, so it is an object exactly when its text opens one.
  if (sealed !== undefined && record.payload_json.startsWith("{")) return { input: sealed }
  if (record.hash_algorithm !== Evidence.hashAlgorithm) return { refused: "unsupported_algorithm" }
  if (!isCanonicalPayload(record.payload_json)) return { refused: "not_canonical" }
  const input = Evidence.chainInput(record)
  return input === undefined ? { refused: "malformed" } : { input }
}

/**
 * The admission check of every EvidenceStore layer, record by record in order: the record decodes, its algorithm is
 * `sha256-v1`, its payload is a canonical JSON object, both hashes recompute, and an operation record was sealed under
 * the executor's private append capability (else EvidenceForbiddenError). Every record is admitted before any is
 * appended, and the first refused fails the call; the hashes of a whole batch are computed in one Digest call.
 */
export const admitAll = (
  digest: Digest.Service,
  records: ReadonlyArray<Evidence.EvidenceRecord>
): Effect.Effect<ReadonlyArray<Evidence.EvidenceRecord>, EvidenceIntegrityError | EvidenceForbiddenError> =>
  Effect.suspend(() => {
    // Hashed in this step where the Digest hashes synchronously; otherwise in one batch.
    const sync = digest.sha256TextSync
    if (sync !== undefined) return admitAllNow(sync, records)
    const formed = formsOf(records)
    return formed.inputs.length === 0
      ? checkedAgainst(records, formed, [])
      : Effect.flatMap(
        digest.sha256Texts(formed.texts.concat(formed.inputs)),
        (hashes) => checkedAgainst(records, formed, hashes)
      )
  })

/** `admitAll` in the calling step, with a synchronous SHA-256: the records admitted, or the first refusal. */
export const admitAllNow = (
  sha256: (text: string) => string,
  records: ReadonlyArray<Evidence.EvidenceRecord>
): Either.Either<ReadonlyArray<Evidence.EvidenceRecord>, EvidenceIntegrityError | EvidenceForbiddenError> => {
  const formed = formsOf(records)
  return checkedAgainst(records, formed, formed.texts.concat(formed.inputs).map(sha256))
}

interface Formed {
  readonly texts: Array<string>
  readonly inputs: Array<string>
  readonly refused: EvidenceIntegrityError | undefined
}

// The payload texts and chain inputs of the records up to the first whose form is refused.
const formsOf = (records: ReadonlyArray<Evidence.EvidenceRecord>): Formed => {
  const texts: Array<string> = []
  const inputs: Array<string> = []
  for (const record of records) {
    const form = formOf(record)
    if (form.refused !== undefined) return { texts, inputs, refused: integrityError(record, form.refused) }
    texts.push(record.payload_json)
    inputs.push(form.input)
  }
  return { texts, inputs, refused: undefined }
}

// Each formed record's hashes against those recomputed (payload digests, then chain hashes), then its capability.
const checkedAgainst = (
  records: ReadonlyArray<Evidence.EvidenceRecord>,
  { inputs, refused }: Formed,
  hashes: ReadonlyArray<string>
): Either.Either<ReadonlyArray<Evidence.EvidenceRecord>, EvidenceIntegrityError | EvidenceForbiddenError> => {
  const formed = inputs.length
  for (let i = 0; i < formed; i++) {
    const record = records[i]!
    if (hashes[i] !== record.payload_digest) return Either.left(integrityError(record, "payload_digest"))
    if (hashes[formed + i] !== record.chain_hash) return Either.left(integrityError(record, "chain_hash"))
    // After its content: a record whose hashes do not recompute is an integrity failure whoever offers it.
    if (!isAdmissible(record)) return Either.left(forbiddenError(record))
  }
  return refused === undefined ? Either.right(records) : Either.left(refused)
}

/** The receipt of a committed record: its chain, id, sequence and the head it made. */
export const receiptOf = (record: Evidence.EvidenceRecord): AppendReceipt =>
  trustedMake(AppendReceipt, {
    chain_id: record.chain_id,
    record_id: record.record_id,
    sequence: record.sequence,
    head_hash: record.chain_hash
  })

/**
 * Why a record that passed admission cannot extend a chain whose head is `head`, or none: a duplicate record id or
 * hash first (so appending the same record twice says so), then the sequence, then the previous hash.
 */
export const conflictOf = (
  record: Evidence.EvidenceRecord,
  head: { readonly sequence: number; readonly hash: string } | undefined,
  duplicate: "duplicate_record" | "duplicate_hash" | undefined
): EvidenceConflictError | undefined => {
  const reason = duplicate ??
    (record.sequence !== (head === undefined ? 0 : head.sequence + 1)
      ? "sequence"
      : record.previous_chain_hash !== (head?.hash ?? null)
      ? "stale_head"
      : undefined)
  return reason === undefined
    ? undefined
    : new EvidenceConflictError({ reason, chain_id: record.chain_id, record_id: record.record_id })
}
