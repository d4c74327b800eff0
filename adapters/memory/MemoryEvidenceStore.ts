/**
 * The in-memory EvidenceStore and EvidenceProjectionSource: reference semantics for every other layer, lost on
 * restart (`durable: false`).
 *
 * Runtimes: every one (effect only).
 */
import { Context, Effect, Either, Layer, Option, Stream } from "effect"
import { Digest } from "../../core/base/Digest.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import type { AppendReceipt, ChainHead } from "../../core/evidence/EvidenceStore.ts"
import {
  admitAll,
  admitAllNow,
  conflictOf,
  Cursor,
  EvidenceConflictError,
  EvidenceProjectionSource,
  EvidenceStore,
  EvidenceUnavailableError,
  receiptOf
} from "../../core/evidence/EvidenceStore.ts"

// A cursor is the count of appends already delivered.
const positionOf = (cursor: Cursor | null): number | undefined =>
  cursor === null ? 0 : /^(0|[1-9][0-9]{0,14})$/.test(cursor) ? Number(cursor) : undefined

/** A fresh in-memory store, serving as both the EvidenceStore and its EvidenceProjectionSource. */
export const make: Effect.Effect<EvidenceStore.Service & EvidenceProjectionSource.Service, never, Digest> = Effect.map(
  Digest,
  (digest) => {
    const chains = new Map<string, Array<Evidence.EvidenceRecord>>()
    const byId = new Map<string, Evidence.EvidenceRecord>()
    const hashes = new Set<string>()
    const log: Array<Evidence.EvidenceRecord> = []

    // Synchronous, so the head compare and the append are one atomic step.
    const commit = (record: Evidence.EvidenceRecord): EvidenceConflictError | AppendReceipt => {
      const chain = chains.get(record.chain_id)
      const last = chain?.[chain.length - 1]
      const conflict = conflictOf(
        record,
        last === undefined ? undefined : { sequence: last.sequence, hash: last.chain_hash },
        byId.has(record.record_id) ? "duplicate_record" : hashes.has(record.chain_hash) ? "duplicate_hash" : undefined
      )
      if (conflict !== undefined) return conflict
      if (chain === undefined) chains.set(record.chain_id, [record])
      else chain.push(record)
      byId.set(record.record_id, record)
      hashes.add(record.chain_hash)
      log.push(record)
      return receiptOf(record)
    }

    // Admitted whole, then committed in turn: the first refusal fails the call, and the records before it stay.
    const commitAll = (
      admitted: ReadonlyArray<Evidence.EvidenceRecord>
    ): Either.Either<ReadonlyArray<AppendReceipt>, EvidenceConflictError> => {
      const receipts: Array<AppendReceipt> = []
      for (const record of admitted) {
        const placed = commit(record)
        if (placed instanceof EvidenceConflictError) return Either.left(placed)
        receipts.push(placed)
      }
      return Either.right(receipts)
    }

    const appendAllEffect = (records: ReadonlyArray<Evidence.EvidenceRecord>) =>
      Effect.flatMap(admitAll(digest, records), (admitted) => Effect.suspend(() => commitAll(admitted)))
    const sha256 = digest.sha256TextSync
    const appendAll: EvidenceStore.AppendAll = sha256 === undefined ? appendAllEffect : Object.assign(appendAllEffect, {
      now: (records: ReadonlyArray<Evidence.EvidenceRecord>) => Either.flatMap(admitAllNow(sha256, records), commitAll)
    })

    const read = (chain_id: string, after_sequence = -1): Stream.Stream<Evidence.StoredRecord> =>
      Stream.suspend(() =>
        Stream.fromIterable((chains.get(chain_id) ?? []).slice(Math.max(0, Math.floor(after_sequence) + 1)))
      )

    const scanRecords = (after: Cursor | null, limit: number) =>
      Effect.suspend(() => {
        const from = positionOf(after)
        if (from === undefined) {
          return Effect.fail(new EvidenceUnavailableError({ detail: `malformed projection cursor: ${after}` }))
        }
        const records = log.slice(from, from + Math.max(0, Math.floor(limit)))
        return Effect.succeed({
          records,
          next_cursor: records.length === 0 ? after : Cursor.make(String(from + records.length))
        })
      })

    return {
      durable: false,
      append: (record) => Effect.map(appendAll([record]), (receipts) => receipts[0]!),
      appendAll,
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
        return yield* Effect.provideService(Evidence.verify(chain_id, read(chain_id), expected_head), Digest, digest)
      }),
      chains: Effect.sync(() => [...chains.keys()]),
      scan: (after, limit) =>
        Effect.map(scanRecords(after, limit), ({ next_cursor, records }) => ({
          receipts: records.map(receiptOf),
          next_cursor
        })),
      scanRecords,
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
