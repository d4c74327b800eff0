/**
 * The executor's private append capability: a store admits an operation record (every type but `task_closed` and
 * `record_superseded`) only if a writer sealed it for the governed executor, a governed harness run or recovery, which
 * alone reach that writer path. The mark lives in a module-private WeakSet keyed by the sealed, frozen record: it
 * cannot be read, copied or transferred to another record, so a store or writer substituted to capture it captures nothing it can reuse.
 */
import type { EvidenceRecord } from "./record.ts"
import { RecordType } from "./record.ts"

/** The record types that open, gate or close a governed operation: a store admits them only under the capability. */
export const operationTypes: ReadonlySet<string> = new Set<RecordType>(
  RecordType.literals.filter((type) => type !== "task_closed" && type !== "record_superseded")
)

const granted = new WeakSet<EvidenceRecord>()

/** Grant records just sealed the capability (the writer's operation path only). */
export const grantRecords = (records: ReadonlyArray<EvidenceRecord>, count = records.length): void => {
  for (let i = 0; i < count; i++) granted.add(records[i]!)
}

/** Whether a store may admit a record: it is no operation record, or one sealed under the capability. */
export const isAdmissible = (record: EvidenceRecord): boolean =>
  !operationTypes.has(record.record_type) || granted.has(record)
