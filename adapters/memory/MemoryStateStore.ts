/**
 * The in-memory state stores: a StateStorage of maps under the shared Run, attempt and projection rules. It is not
 * durable, so it cannot claim resume or history: everything is gone when its layer is released.
 *
 * Runtimes: every one (Node, Deno, edge).
 */
import { Effect, Layer, Option } from "effect"
import type { IdGenerator } from "../../core/base/IdGenerator.ts"
import type { Cursor } from "../../core/evidence/EvidenceStore.ts"
import * as StateStore from "../../core/state/StateStore.ts"

const positionKey = (chain_id: string, sequence: number) => `${chain_id}#${sequence}`

const append = <K, V>(index: Map<K, Array<V>>, key: K, value: V) => {
  const values = index.get(key)
  if (values === undefined) index.set(key, [value])
  else values.push(value)
}

const matchesOperation = (operation: StateStore.ProjectedOperation, filter: StateStore.OperationFilter) =>
  (filter.chain_id === undefined || operation.chain_id === filter.chain_id) &&
  (filter.operation_id === undefined || operation.operation_id === filter.operation_id) &&
  (filter.open_only !== true || (operation.started_record_id !== null && operation.terminal_count === 0))

/** A fresh in-memory StateStorage: each write is one synchronous step, and a transaction holds one lock. */
export const makeStorage = Effect.gen(function*() {
  const lock = yield* Effect.makeSemaphore(1)
  const runs = new Map<string, StateStore.Run>()
  const observations = new Map<string, Array<StateStore.RunObservation>>()
  const attempts = new Map<string, StateStore.OperationAttempt>()
  const intents = new Map<string, StateStore.OutboxIntent>()
  const cursors = new Map<string, Cursor>()
  const records = new Map<string, StateStore.ProjectedRecord>()
  const recordsById = new Map<string, Array<StateStore.ProjectedRecord>>()
  const recordsAt = new Map<string, Array<StateStore.ProjectedRecord>>()
  const operations = new Map<string, StateStore.ProjectedOperation>()

  const keepAttempt = ({ attempt, intents: committed }: StateStore.CommittedAttempt) => {
    attempts.set(attempt.attempt_id, attempt)
    for (const intent of committed) intents.set(intent.intent_id, intent)
  }

  const storage: StateStore.StateStorage.Service = {
    durable: false,
    transaction: lock.withPermits(1),
    getRun: (run_id) => Effect.sync(() => Option.fromNullable(runs.get(run_id))),
    insertRun: (run) => Effect.sync(() => void runs.set(run.run_id, run)),
    replaceRun: (next, expected) =>
      Effect.sync(() => {
        if (runs.get(next.run_id)?.status !== expected) return false
        runs.set(next.run_id, next)
        return true
      }),
    listRuns: (filter) =>
      Effect.sync(() =>
        [...runs.values()].filter((run) =>
          (filter.status === undefined || filter.status.includes(run.status)) &&
          (filter.parent_run_id === undefined || run.parent_run_id === filter.parent_run_id)
        )
      ),
    insertObservation: (observation) => Effect.sync(() => append(observations, observation.run_id, observation)),
    observations: (run_id) => Effect.sync(() => [...(observations.get(run_id) ?? [])]),
    hasAttempt: (attempt_id) => Effect.sync(() => attempts.has(attempt_id)),
    insertAttempt: (committed) => Effect.sync(() => keepAttempt(committed)),
    listAttempts: (run_id) => Effect.sync(() => [...attempts.values()].filter((attempt) => attempt.run_id === run_id)),
    getIntent: (intent_id) => Effect.sync(() => Option.fromNullable(intents.get(intent_id))),
    saveDelivery: (intent) => Effect.sync(() => void intents.set(intent.intent_id, intent)),
    pendingIntents: (limit) =>
      Effect.sync(() => [...intents.values()].filter((intent) => intent.delivery_state === "pending").slice(0, limit)),
    cursor: (projector) => Effect.sync(() => Option.fromNullable(cursors.get(projector))),
    projectionBasis: (rows) =>
      Effect.sync(() => ({
        records: [
          ...new Set(rows.map((row) => row.record_id))
        ].flatMap((id) => recordsById.get(id) ?? []).concat(
          [...new Set(rows.map((row) => positionKey(row.chain_id, row.sequence)))].flatMap((at) =>
            recordsAt.get(at) ?? []
          )
        ),
        operations: rows.flatMap((row) => {
          const operation = row.operation_id === null ? undefined : operations.get(row.operation_id)
          return operation === undefined ? [] : [operation]
        })
      })),
    writeProjection: (write) =>
      Effect.sync(() => {
        for (const row of write.inserts) {
          records.set(`${row.chain_id}/${row.record_id}/${row.projection_version}`, row)
          append(recordsById, row.record_id, row)
          append(recordsAt, positionKey(row.chain_id, row.sequence), row)
        }
        for (const operation of write.operations) operations.set(operation.operation_id, operation)
        write.attempts.forEach(keepAttempt)
        cursors.set(write.projector, write.cursor)
      }),
    operations: (filter) =>
      Effect.sync(() => [...operations.values()].filter((operation) => matchesOperation(operation, filter))),
    recordCount: (filter) =>
      Effect.sync(() =>
        filter.chain_id === undefined
          ? records.size
          : [...records.values()].filter((row) => row.chain_id === filter.chain_id).length
      ),
    // Every row at a position is one record with one hash (applyProjection refuses any other): the first stands for all.
    hashAt: (chain_id, sequence) =>
      Effect.sync(() =>
        Option.map(Option.fromNullable(recordsAt.get(positionKey(chain_id, sequence))?.[0]), (row) => row.chain_hash)
      )
  }
  return storage
})

/** The in-memory StateStorage (not durable). */
export const layerStorage: Layer.Layer<StateStore.StateStorage> = Layer.effect(StateStore.StateStorage, makeStorage)

/** The in-memory Run, attempt and projection stores (not durable); needs an IdGenerator. */
export const layer: Layer.Layer<StateStore.StateStores, never, IdGenerator> = StateStore.layer.pipe(
  Layer.provide(layerStorage)
)
