/**
 * The evidence projection (spec/runs.md): committed evidence records projected under a projector's cursor, and the
 * governed operations those records show.
 */
import { Schema } from "effect"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { RecordType } from "../evidence/Evidence.ts"
import { Cursor } from "../evidence/EvidenceStore.ts"
import type { OperationAttempt } from "./Attempt.ts"

/** One committed evidence record as projected; its idempotency key is (chain_id, record_id, projection_version). */
export class ProjectedRecord extends Schema.Class<ProjectedRecord>("ProjectedRecord")({
  chain_id: Uuid,
  record_id: Uuid,
  projection_version: Schema.NonNegativeInt,
  chain_hash: Sha256Hex,
  sequence: Schema.NonNegativeInt,
  record_type: RecordType,
  operation_id: Schema.NullOr(Uuid)
}) {}

/** One governed operation as its projected records show it: started, and how many terminal records it has. */
export class ProjectedOperation extends Schema.Class<ProjectedOperation>("ProjectedOperation")({
  operation_id: Uuid,
  chain_id: Uuid,
  started_record_id: Schema.NullOr(Uuid),
  terminal_record_id: Schema.NullOr(Uuid),
  terminal_type: Schema.NullOr(RecordType),
  terminal_count: Schema.NonNegativeInt
}) {}

/**
 * What one projection batch commits: rows under a projector's name, its advanced cursor, and the attempts of governed
 * operations in a durable Run that the batch concluded, each with its outcome intent (one already stored is kept; one
 * whose Run this store does not hold is not an attempt here).
 */
export interface ApplyProjection {
  readonly projector: string
  readonly rows: ReadonlyArray<ProjectedRecord>
  readonly cursor: Cursor
  readonly attempts?: ReadonlyArray<OperationAttempt>
}

/** A committed projection batch: rows newly inserted, rows already present (replay), and the stored cursor. */
export class ProjectionApplied extends Schema.Class<ProjectionApplied>("ProjectionApplied")({
  projector: Schema.String,
  cursor: Cursor,
  inserted: Schema.NonNegativeInt,
  unchanged: Schema.NonNegativeInt
}) {}

/** Optional filters for the operations projection; `open_only` keeps started operations with no terminal record. */
export interface OperationFilter {
  readonly chain_id?: string
  readonly operation_id?: string
  readonly open_only?: boolean
}

/** Optional filters for counting projected records. */
export interface RecordFilter {
  readonly chain_id?: string
}

/**
 * What a store already holds for a batch: every row sharing a record id or a chain position (chain id and sequence)
 * with it, every operation it names.
 */
export interface ProjectionBasis {
  readonly records: ReadonlyArray<ProjectedRecord>
  readonly operations: ReadonlyArray<ProjectedOperation>
}
