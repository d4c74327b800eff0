/**
 * The in-memory EvidenceStore and EvidenceProjectionSource: reference semantics for every other layer, lost on
 * restart (`durable: false`). Also exports the admission check every layer applies before it commits a record.
 *
 * Runtimes: every one (effect only).
 */
import { Context, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import * as Canonical from "../core/Canonical.ts"
import type { Digest } from "../core/Digest.ts"
import * as Evidence from "../core/Evidence.ts"
import type { ChainHead } from "../core/EvidenceStore.ts"
import {
  AppendReceipt,
  Cursor,
  EvidenceConflictError,
  EvidenceIntegrityError,
  EvidenceProjectionSource,
  EvidenceStore,
  EvidenceUnavailableError
} from "../core/EvidenceStore.ts"

const isRecord = Schema.is(Schema.Struct(Evidence.EvidenceRecord.fields))

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

/**
 * The admission check of every EvidenceStore layer: the record decodes, its algorithm is `sha256-v1`, its payload is
 * a canonical JSON object, and both hashes recompute.
 */
export const admit = (
  record: Evidence.EvidenceRecord
): Effect.Effect<Evidence.EvidenceRecord, EvidenceIntegrityError, Digest> => {
  const refuse = (reason: EvidenceIntegrityError["reason"]) =>
    Effect.fail(
      new EvidenceIntegrityError({ reason, chain_id: String(record?.chain_id), record_id: String(record?.record_id) })
    )
  if (!isRecord(record)) return refuse("malformed")
  if (record.hash_algorithm !== Evidence.hashAlgorithm) return refuse("unsupported_algorithm")
  if (!isCanonicalPayload(record.payload_json)) return refuse("not_canonical")
  return Effect.matchEffect(Evidence.rehash(record), {
    onFailure: () => refuse("malformed"),
    onSuccess: (hashes) =>
      hashes.payload_digest !== record.payload_digest
        ? refuse("payload_digest")
        : hashes.chain_hash !== record.chain_hash
        ? refuse("chain_hash")
        : Effect.succeed(record)
  })
}

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

const receiptOf = (record: Evidence.EvidenceRecord): AppendReceipt =>
  new AppendReceipt({
    chain_id: record.chain_id,
    record_id: record.record_id,
    sequence: record.sequence,
    head_hash: record.chain_hash
  }, { disableValidation: true })

// A cursor is the count of appends already delivered.
const positionOf = (cursor: Cursor | null): number | undefined =>
  cursor === null ? 0 : /^(0|[1-9][0-9]{0,14})$/.test(cursor) ? Number(cursor) : undefined

/** A fresh in-memory store, serving as both the EvidenceStore and its EvidenceProjectionSource. */
export const make: Effect.Effect<EvidenceStore.Service & EvidenceProjectionSource.Service, never, Digest> = Effect.map(
  Effect.context<Digest>(),
  (context) => {
    const chains = new Map<string, Array<Evidence.EvidenceRecord>>()
    const byId = new Map<string, Evidence.EvidenceRecord>()
    const hashes = new Set<string>()
    const log: Array<Evidence.EvidenceRecord> = []

    // Synchronous, so the head compare and the append are one atomic step.
    const commit = (record: Evidence.EvidenceRecord): Effect.Effect<AppendReceipt, EvidenceConflictError> => {
      const chain = chains.get(record.chain_id)
      const last = chain?.[chain.length - 1]
      const conflict = conflictOf(
        record,
        last === undefined ? undefined : { sequence: last.sequence, hash: last.chain_hash },
        byId.has(record.record_id) ? "duplicate_record" : hashes.has(record.chain_hash) ? "duplicate_hash" : undefined
      )
      if (conflict !== undefined) return Effect.fail(conflict)
      if (chain === undefined) chains.set(record.chain_id, [record])
      else chain.push(record)
      byId.set(record.record_id, record)
      hashes.add(record.chain_hash)
      log.push(record)
      return Effect.succeed(receiptOf(record))
    }

    const read = (chain_id: string, after_sequence = -1): Stream.Stream<Evidence.StoredRecord> =>
      Stream.suspend(() =>
        Stream.fromIterable((chains.get(chain_id) ?? []).slice(Math.max(0, Math.floor(after_sequence) + 1)))
      )

    return {
      durable: false,
      append: Effect.fn("MemoryEvidenceStore.append")(function*(record: Evidence.EvidenceRecord) {
        return yield* commit(yield* Effect.provide(admit(record), context))
      }),
      read,
      head: (chain_id) =>
        Effect.sync(() => {
          const chain = chains.get(chain_id)
          const last = chain?.[chain.length - 1]
          return last === undefined
            ? Option.none()
            : Option.some<ChainHead>({ sequence: last.sequence, hash: last.chain_hash })
        }),
      verify: Effect.fn("MemoryEvidenceStore.verify")(function*(chain_id: string, expected_head?: string) {
        return yield* Effect.provide(Evidence.verify(chain_id, read(chain_id), expected_head), context)
      }),
      chains: Effect.sync(() => [...chains.keys()]),
      scan: (after, limit) =>
        Effect.suspend(() => {
          const from = positionOf(after)
          if (from === undefined) {
            return Effect.fail(new EvidenceUnavailableError({ detail: `malformed projection cursor: ${after}` }))
          }
          const page = log.slice(from, from + Math.max(0, Math.floor(limit)))
          return Effect.succeed({
            receipts: page.map(receiptOf),
            next_cursor: page.length === 0 ? after : Cursor.make(String(from + page.length))
          })
        }),
      get: (chain_id, record_id) =>
        Effect.sync(() => {
          const record = byId.get(record_id)
          return record === undefined || record.chain_id !== chain_id
            ? Option.none()
            : Option.some<Evidence.StoredRecord>(record)
        })
    }
  }
)

/** The in-memory EvidenceStore and its EvidenceProjectionSource. */
export const layer: Layer.Layer<EvidenceStore | EvidenceProjectionSource, never, Digest> = Layer.effectContext(
  Effect.map(make, (store) => Context.make(EvidenceStore, store).pipe(Context.add(EvidenceProjectionSource, store)))
)
