/**
 * The projection reducer every store shares: a batch planned against what is stored.
 */
import { Either } from "effect"
import type { Uuid } from "../../base/IdGenerator.ts"
import { terminalTypes } from "../../evidence/Evidence.ts"
import { ProjectedOperation, type ProjectedRecord, type ProjectionBasis } from "../Projection.ts"
import { ProjectionConflictError } from "../StateError.ts"

/** What one projection batch changes: the rows to insert and every operation whose projection changes, in full. */
export interface ProjectionPlan {
  readonly inserts: ReadonlyArray<ProjectedRecord>
  readonly operations: ReadonlyArray<ProjectedOperation>
  readonly unchanged: number
}

const rowKey = (row: ProjectedRecord) => `${row.chain_id}/${row.record_id}/${row.projection_version}`
const recordKey = (row: ProjectedRecord) => `${row.chain_id}/${row.record_id}`

const positionKey = (chain_id: string, sequence: number) => `${chain_id}#${sequence}`

/**
 * Plan a batch against what is stored: a known key with the same hash is unchanged. A record is one fact of its
 * chain whatever projection version brings it, so another chain hash for it (under any version), another position
 * for it, or another record at its position is a conflict: a chain position then always has one record and one
 * hash, and every store's `projectedHash` gives the same answer. The operations projection counts each (chain,
 * record) once.
 */
export const planProjection = (
  rows: ReadonlyArray<ProjectedRecord>,
  basis: ProjectionBasis
): Either.Either<ProjectionPlan, ProjectionConflictError> => {
  const byKey = new Map<string, ProjectedRecord>()
  const byRecord = new Map<string, ProjectedRecord>()
  const byPosition = new Map<string, ProjectedRecord>()
  const remember = (row: ProjectedRecord) => {
    byKey.set(rowKey(row), row)
    if (!byRecord.has(recordKey(row))) byRecord.set(recordKey(row), row)
    const position = positionKey(row.chain_id, row.sequence)
    if (!byPosition.has(position)) byPosition.set(position, row)
  }
  basis.records.forEach(remember)
  const operations = new Map(basis.operations.map((op) => [op.operation_id, op]))
  const changed = new Set<Uuid>()
  const inserts: Array<ProjectedRecord> = []
  let unchanged = 0
  const conflict = (row: ProjectedRecord, reason: ProjectionConflictError["reason"], stored: string, offered: string) =>
    Either.left(
      new ProjectionConflictError({
        reason,
        chain_id: row.chain_id,
        record_id: row.record_id,
        projection_version: row.projection_version,
        stored,
        offered
      })
    )
  for (const row of rows) {
    const same = byRecord.get(recordKey(row))
    if (same !== undefined && same.chain_hash !== row.chain_hash) {
      return conflict(row, "chain_hash", same.chain_hash, row.chain_hash)
    }
    if (same !== undefined && same.sequence !== row.sequence) {
      return conflict(row, "chain_position", String(same.sequence), String(row.sequence))
    }
    const occupant = byPosition.get(positionKey(row.chain_id, row.sequence))
    if (occupant !== undefined && occupant.record_id !== row.record_id) {
      return conflict(row, "chain_position", occupant.record_id, row.record_id)
    }
    if (byKey.has(rowKey(row))) {
      unchanged++
      continue
    }
    const operation = row.operation_id === null ? undefined : operations.get(row.operation_id)
    if (operation !== undefined && operation.chain_id !== row.chain_id) {
      return conflict(row, "operation_chain", operation.chain_id, row.chain_id)
    }
    remember(row)
    inserts.push(row)
    if (same !== undefined) continue
    const started = row.record_type === "operation_started"
    if (row.operation_id === null || (!started && !terminalTypes.has(row.record_type))) continue
    const base = operation ?? {
      operation_id: row.operation_id,
      chain_id: row.chain_id,
      started_record_id: null,
      terminal_record_id: null,
      terminal_type: null,
      terminal_count: 0
    }
    operations.set(
      row.operation_id,
      new ProjectedOperation(
        started
          ? { ...base, started_record_id: base.started_record_id ?? row.record_id }
          : {
            ...base,
            terminal_record_id: base.terminal_record_id ?? row.record_id,
            terminal_type: base.terminal_type ?? row.record_type,
            terminal_count: base.terminal_count + 1
          },
        { disableValidation: true }
      )
    )
    changed.add(row.operation_id)
  }
  return Either.right({ inserts, unchanged, operations: [...changed].map((id) => operations.get(id)!) })
}
