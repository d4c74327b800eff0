/** `sha256-v1` payload and chain hashes, sealing, and chain verification against a trusted expected head. */
import { Chunk, Effect, Either, Stream } from "effect"
import * as Canonical from "../../base/Canonical.ts"
import type { Sha256Hex } from "../../base/Digest.ts"
import { Digest, sha256TextWith } from "../../base/Digest.ts"
import type { Uuid } from "../../base/IdGenerator.ts"
import { trustedMake } from "../../base/internal/trusted.ts"
import type { Timestamp } from "../../base/Time.ts"
import type { FailureCode, StoredRecord } from "./record.ts"
import { type Draft, EvidenceRecord, hashAlgorithm, type Position, VerificationResult } from "./record.ts"

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

const nullable = (value: string | null) => value === null ? "null" : Canonical.quote(value)

/**
 * The `sha256-v1` chain-hash input of a record: the canonical JSON of every field but `chain_hash`, written field by
 * field in code-point key order (the same text `Canonical.stringify` gives); undefined when a field cannot be canonical.
 */
export const chainInput = (r: Omit<StoredRecord, "chain_hash">): string | undefined => {
  if (!Number.isSafeInteger(r.sequence)) return undefined
  const chain_id = Canonical.quote(r.chain_id)
  const created_at = Canonical.quote(r.created_at)
  const hash_algorithm = Canonical.quote(r.hash_algorithm)
  const operation_id = nullable(r.operation_id)
  const payload_digest = Canonical.quote(r.payload_digest)
  const payload_json = Canonical.quote(r.payload_json)
  const policy_id = Canonical.quote(r.policy_id)
  const policy_version = Canonical.quote(r.policy_version)
  const previous_chain_hash = nullable(r.previous_chain_hash)
  const record_id = Canonical.quote(r.record_id)
  const record_type = Canonical.quote(r.record_type)
  const supersedes_record_id = nullable(r.supersedes_record_id)
  if (
    chain_id === undefined || created_at === undefined || hash_algorithm === undefined ||
    operation_id === undefined || payload_digest === undefined || payload_json === undefined ||
    policy_id === undefined || policy_version === undefined || previous_chain_hash === undefined ||
    record_id === undefined || record_type === undefined || supersedes_record_id === undefined
  ) return undefined
  return `{"chain_id":${chain_id},"created_at":${created_at},"hash_algorithm":${hash_algorithm},"operation_id":${operation_id},"payload_digest":${payload_digest},"payload_json":${payload_json},"policy_id":${policy_id},"policy_version":${policy_version},"previous_chain_hash":${previous_chain_hash},"record_id":${record_id},"record_type":${record_type},"sequence":${
    r.sequence === 0 ? "0" : String(r.sequence)
  },"supersedes_record_id":${supersedes_record_id}}`
}

// The chain-input text of a record; a field that cannot be canonical fails as Canonical does.
const chainInputOf = (
  fields: Omit<StoredRecord, "chain_hash">
): Effect.Effect<string, Canonical.CanonicalJsonError> => {
  const text = chainInput(fields)
  return text === undefined
    ? Effect.flatMap(
      Canonical.stringify(chainFields(fields)),
      () => Effect.dieMessage("Evidence.chainInput refused a record Canonical.stringify accepts")
    )
    : Effect.succeed(text)
}

// The chain hash of a record whose payload digest is known.
const chainHashWith = (digest: Digest.Service, fields: Omit<StoredRecord, "chain_hash">) =>
  Effect.flatMap(chainInputOf(fields), (text) => sha256TextWith(digest, text))

// The chain-input text each record sealed here was hashed from, until a store admits it: a sealed record is frozen, so
// the text stays its own, and it is held no longer than the append, or every stored record would keep a second copy.
const sealedInputs = new WeakMap<EvidenceRecord, string>()

/**
 * The chain-input text of a record sealed in this process (its payload then canonical by construction), taken once:
 * the first admission reads it, and any later one recomputes it.
 */
export const takeSealedInput = (record: EvidenceRecord): string | undefined => {
  const text = sealedInputs.get(record)
  if (text !== undefined) sealedInputs.delete(record)
  return text
}

// The `sha256-v1` payload digest and chain hash a record's content recomputes to, with a Digest service.
const rehashWith = (
  digest: Digest.Service,
  record: Omit<StoredRecord, "chain_hash" | "payload_digest"> & { payload_digest?: string }
): Effect.Effect<{ payload_digest: Sha256Hex; chain_hash: Sha256Hex }, Canonical.CanonicalJsonError> =>
  Effect.flatMap(sha256TextWith(digest, record.payload_json), (payload_digest) =>
    Effect.map(
      chainHashWith(digest, Object.assign({}, record, { payload_digest })),
      (chain_hash) => ({ payload_digest, chain_hash })
    ))

/** The `sha256-v1` payload digest and chain hash a record's content recomputes to; fails when a field is not canonical. */
export const rehash = (
  record: Omit<StoredRecord, "chain_hash" | "payload_digest"> & { payload_digest?: string }
): Effect.Effect<{ payload_digest: Sha256Hex; chain_hash: Sha256Hex }, Canonical.CanonicalJsonError, Digest> =>
  Effect.flatMap(Digest, (digest) => rehashWith(digest, record))

/** Where consecutive sealed records go: the first one's chain position, every record's id, and when they are sealed. */
export interface Positions {
  readonly chain_id: Uuid
  readonly sequence: number
  readonly previous_chain_hash: Sha256Hex | null
  readonly record_ids: ReadonlyArray<Uuid>
  readonly created_at: Timestamp
}

// A draft at its chain position, before its chain hash.
const unsealedAt = (draft: Draft, at: Positions, i: number, payload_json: string, payload_digest: Sha256Hex) => ({
  record_id: at.record_ids[i]!,
  record_type: draft.record_type,
  chain_id: at.chain_id,
  operation_id: draft.operation_id,
  sequence: at.sequence + i,
  policy_id: draft.policy_id,
  policy_version: draft.policy_version,
  payload_json,
  payload_digest,
  previous_chain_hash: null as Sha256Hex | null,
  supersedes_record_id: draft.supersedes_record_id ?? null,
  created_at: at.created_at,
  hash_algorithm: hashAlgorithm
})

const sealedRecord = (unsealed: ReturnType<typeof unsealedAt>, text: string, chain_hash: Sha256Hex) => {
  const record = Object.freeze(trustedMake(EvidenceRecord, Object.assign({}, unsealed, { chain_hash })))
  sealedInputs.set(record, text)
  return record
}

const payloadsOf = (drafts: ReadonlyArray<Draft>): Either.Either<Array<string>, Canonical.CanonicalJsonError> => {
  const payloads: Array<string> = []
  for (const draft of drafts) {
    const text = Canonical.stringify(draft.payload)
    if (Either.isLeft(text)) return Either.left(text.left)
    payloads.push(text.right)
  }
  return Either.right(payloads)
}

/** `sealAllWith` over a synchronous SHA-256: no Effect at all. Fails when a payload is not canonical JSON. */
export const sealAllSync = (
  sha256: (text: string) => Sha256Hex,
  drafts: ReadonlyArray<Draft>,
  at: Positions
): Either.Either<ReadonlyArray<EvidenceRecord>, Canonical.CanonicalJsonError> =>
  Either.map(payloadsOf(drafts), (payloads) => {
    const records: Array<EvidenceRecord> = []
    let previous_chain_hash = at.previous_chain_hash
    for (let i = 0; i < drafts.length; i++) {
      const unsealed = Object.assign({}, unsealedAt(drafts[i]!, at, i, payloads[i]!, sha256(payloads[i]!)), {
        previous_chain_hash
      })
      // Every field is canonical by construction here: its id, type, times and digests are branded, its payload text.
      const text = chainInput(unsealed)
      if (text === undefined) throw new Error("Evidence.chainInput refused a record it sealed")
      const record = sealedRecord(unsealed, text, sha256(text))
      records.push(record)
      previous_chain_hash = record.chain_hash as Sha256Hex
    }
    return records
  })

/**
 * Seal drafts in turn with a Digest service, each extending the one before it from `at`: canonical payloads, both
 * hashes (synchronously where the Digest hashes synchronously). Fails when a payload is not canonical JSON.
 */
export const sealAllWith = (
  digest: Digest.Service,
  drafts: ReadonlyArray<Draft>,
  at: Positions
): Effect.Effect<ReadonlyArray<EvidenceRecord>, Canonical.CanonicalJsonError> => {
  const sync = digest.sha256TextSync
  if (sync !== undefined) return Effect.suspend(() => sealAllSync(sync, drafts, at))
  return Effect.flatMap(
    payloadsOf(drafts),
    (payloads) =>
      Effect.flatMap(digest.sha256Texts(payloads), (payloadDigests) => {
        const records: Array<EvidenceRecord> = []
        const sealFrom = (i: number, previous_chain_hash: Sha256Hex | null): Effect.Effect<
          ReadonlyArray<EvidenceRecord>,
          Canonical.CanonicalJsonError
        > => {
          if (i === drafts.length) return Effect.succeed(records)
          const unsealed = Object.assign({}, unsealedAt(drafts[i]!, at, i, payloads[i]!, payloadDigests[i]!), {
            previous_chain_hash
          })
          return Effect.flatMap(chainInputOf(unsealed), (text) =>
            Effect.flatMap(sha256TextWith(digest, text), (chain_hash) => {
              records.push(sealedRecord(unsealed, text, chain_hash))
              return sealFrom(i + 1, chain_hash)
            }))
        }
        return sealFrom(0, at.previous_chain_hash)
      })
  )
}

/** Seal a draft at a chain position: canonical payload, both hashes. Fails when the payload is not canonical JSON. */
export const seal = (draft: Draft, position: Position) =>
  Effect.flatMap(Digest, (digest) =>
    Effect.map(
      sealAllWith(digest, [draft], Object.assign({}, position, { record_ids: [position.record_id] })),
      (records) => records[0]!
    ))

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

interface Linked {
  /** Each linked record's payload text and chain input, in turn. */
  readonly texts: Array<string>
  readonly linked: number
  readonly head: Sha256Hex | null
  readonly structural: Walk["failure"]
}

// A chunk's links and algorithms, in order, up to the first structural failure: the texts its linked prefix hashes.
const linkChunk = (walk: Walk, records: ReadonlyArray<StoredRecord>, expected_head: string | undefined): Linked => {
  const texts: Array<string> = []
  let head = walk.head
  let structural: Walk["failure"]
  let linked = 0
  for (const record of records) {
    const inLink = record.sequence === walk.checked + linked && record.previous_chain_hash === head &&
      !(expected_head !== undefined && head === expected_head)
    const input = inLink && record.hash_algorithm === hashAlgorithm ? chainInput(record) : undefined
    if (input === undefined) {
      const code = !inLink
        ? "broken_link"
        : record.hash_algorithm !== hashAlgorithm
        ? "unsupported_algorithm"
        : "content_mismatch"
      structural = { code, record_id: record.record_id }
      break
    }
    texts.push(record.payload_json, input)
    head = record.chain_hash as Sha256Hex
    linked++
  }
  return { texts, linked, head, structural }
}

// The walk after a chunk whose linked prefix hashed to `hashes`: the first record whose hashes differ fails it.
const walkedChunk = (
  walk: Walk,
  records: ReadonlyArray<StoredRecord>,
  { head, linked, structural }: Linked,
  hashes: ReadonlyArray<string>
): Walk => {
  for (let i = 0; i < linked; i++) {
    const record = records[i]!
    if (hashes[2 * i] !== record.payload_digest || hashes[2 * i + 1] !== record.chain_hash) {
      return {
        checked: walk.checked + i,
        head: i === 0 ? walk.head : records[i - 1]!.chain_hash as Sha256Hex,
        failure: { code: "content_mismatch", record_id: record.record_id }
      }
    }
  }
  return structural === undefined
    ? { checked: walk.checked + linked, head }
    : { checked: walk.checked + linked, head, failure: structural }
}

// The verification a finished walk amounts to: an empty chain, or one that stops short of the expected head, is broken.
const resultOf = (chain_id: string, walked: Walk, expected_head: string | undefined) => {
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
  Effect.flatMap(Digest, (digest) =>
    Effect.map(
      Stream.runFoldWhileEffect(
        Stream.chunks(records),
        { checked: 0, head: null } as Walk,
        (walk) => walk.failure === undefined,
        (walk, chunk) => {
          const page = Chunk.toReadonlyArray(chunk)
          const linked = linkChunk(walk, page, expected_head)
          return Effect.map(digest.sha256Texts(linked.texts), (hashes) => walkedChunk(walk, page, linked, hashes))
        }
      ),
      (walked) => resultOf(chain_id, walked, expected_head)
    ))

/**
 * `verify` in the calling step over a synchronous SHA-256, the chain's records read page by page in ascending
 * sequence (an empty page ends it): what a store that reads synchronously verifies with.
 */
export const verifyPages = (
  chain_id: string,
  pages: Iterable<ReadonlyArray<StoredRecord>>,
  sha256: (text: string) => string,
  expected_head?: string
): VerificationResult => {
  let walk: Walk = { checked: 0, head: null }
  for (const page of pages) {
    if (walk.failure !== undefined) break
    const linked = linkChunk(walk, page, expected_head)
    walk = walkedChunk(walk, page, linked, linked.texts.map(sha256))
  }
  return resultOf(chain_id, walk, expected_head)
}
