import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Option, Schema, Stream } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryEvidenceStore from "../../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as SqlExecutorRegistry from "../../adapters/node/SqlExecutorRegistry.ts"
import * as SqlEvidenceStore from "../../adapters/sql/SqlEvidenceStore.ts"
import * as SqlStateStore from "../../adapters/sql/SqlStateStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { Digest } from "../../core/base/Digest.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { Uuid } from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import * as Evidence from "../../core/evidence/Evidence.ts"
import type { RecordType, StoredRecord } from "../../core/evidence/Evidence.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import {
  Cursor,
  EvidenceProjectionSource,
  EvidenceStore,
  EvidenceUnavailableError
} from "../../core/evidence/EvidenceStore.ts"
import type { ExecutorRegistry } from "../../core/evidence/ExecutorRegistry.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { ProjectionStore } from "../../core/state/ProjectionStore.ts"
import * as StateStore from "../../core/state/StateStore.ts"
import { appendGranted } from "../fixtures/evidence.ts"
import { run } from "../fixtures/layers.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"
import { patched } from "../fixtures/state.ts"

const platform = Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)

const memoryStores = Layer.mergeAll(MemoryEvidenceStore.layer, MemoryStateStore.layer, MemoryExecutorRegistry.layer)

const sqlStores = Layer.mergeAll(SqlEvidenceStore.layer, SqlStateStore.layer, SqlExecutorRegistry.layer).pipe(
  Layer.provideMerge(sqliteLayer())
)

type Stores = Layer.Layer<
  EvidenceStore | EvidenceProjectionSource | StateStore.StateStores | ExecutorRegistry,
  never,
  IdGenerator.IdGenerator | Digest
>

/** What a test body may use. */
type Context =
  | ExecutorRegistry
  | EvidenceStore
  | EvidenceProjectionSource
  | StateStore.StateStores
  | Governance.EvidenceWriter
  | IdGenerator.IdGenerator
  | Digest

const backends: ReadonlyArray<readonly [string, Stores]> = [["memory", memoryStores], ["sql", sqlStores]]

/** Every projection commit a drain makes, and an optional injected failure of the n-th (1-based). */
interface Spy {
  readonly batches: Array<StateStore.ApplyProjection>
  failAt?: number
}

const spied = (spy: Spy) =>
  patched(ProjectionStore, (store) => ({
    applyProjection: (input) =>
      Effect.suspend(() => {
        spy.batches.push(input)
        return spy.batches.length === spy.failAt
          ? Effect.fail(new StateStore.StateStoreUnavailableError({ detail: "injected" }))
          : store.applyProjection(input)
      })
  }))

/** The stores of one backend, a spy on projection commits, the shared writer, digest and ids. */
const storesWith = <R>(stores: Layer.Layer<R, never, IdGenerator.IdGenerator | Digest>, spy: Spy) =>
  Governance.layerWriter.pipe(
    Layer.provideMerge(spied(spy)),
    Layer.provideMerge(stores),
    Layer.provideMerge(platform)
  )

/** One record appended by the test's writer, which opens each chain as a boundary of its own before its first record. */
const append = (chain_id: Uuid, record_type: RecordType, operation_id: Uuid | null, step: string) =>
  Effect.flatMap(Governance.EvidenceWriter, (writer) =>
    Effect.zipRight(
      Effect.flatMap(EvidenceStore, (store) => store.head(chain_id)).pipe(
        Effect.flatMap((head) =>
          Option.isSome(head) ? Effect.void : Effect.flatMap(IdGenerator.uuid, (task_boundary_id) =>
            writer.open(
              new Governance.TaskBoundary({
                task_boundary_id,
                chain_id,
                policy: { policy_id: "projector", version: "1", digest: Sha256Hex.make("0".repeat(64)) },
                opened_at: Time.fromMicros(0)
              })
            ))
        )
      ),
      appendGranted(writer, chain_id, {
        record_type,
        operation_id,
        policy_id: "projector",
        policy_version: "1",
        payload: { step }
      })
    ))

/** A governed operation's records: bound, started, one gate, and its terminal record if it has one. */
const operation = (chain_id: Uuid, terminal: RecordType | undefined) =>
  Effect.gen(function*() {
    const operation_id = yield* IdGenerator.uuid
    for (const type of ["policy_bound", "operation_started", "gate_evaluated"] as const) {
      yield* append(chain_id, type, operation_id, type)
    }
    if (terminal !== undefined) yield* append(chain_id, terminal, operation_id, "end")
    return operation_id
  })

/** Two chains: A with a success, a captured failure and an open operation; B with a denial, then closed. 16 records. */
const workload = Effect.gen(function*() {
  const [a, b] = [yield* IdGenerator.uuid, yield* IdGenerator.uuid]
  const completed = yield* operation(a, "callable_completed")
  const failed = yield* operation(a, "callable_failed")
  const denied = yield* operation(b, "operation_denied")
  const open = yield* operation(a, undefined)
  yield* append(b, "task_closed", null, "close")
  return { a, b, completed, failed, denied, open }
})

const recordsOf = (chain_id: string) =>
  Effect.flatMap(
    EvidenceStore,
    (store) => Effect.map(Stream.runCollect(store.read(chain_id)), (chunk) => Chunk.toReadonlyArray(chunk))
  )

const cursorOf = Effect.flatMap(
  ProjectionStore,
  (state) => state.projectionCursor(EvidenceProjector.defaultProjector)
)

/** What the source still holds after the projector's cursor. */
const unprojected = Effect.gen(function*() {
  const source = yield* EvidenceProjectionSource
  return (yield* source.scan(Option.getOrNull(yield* cursorOf), 10_000)).receipts
})

const terminalsBy = (operations: ReadonlyArray<StateStore.ProjectedOperation>) =>
  Object.fromEntries(operations.map((op) => [op.operation_id, [op.terminal_type, op.terminal_count]]))

for (const [name, stores] of backends) {
  describe(`EvidenceProjector: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, Context>, spy: Spy = { batches: [] }) =>
      Effect.provide(effect, storesWith(stores, spy))

    it.effect("drain projects every committed record exactly once, batch by batch, with its operations", () => {
      const spy: Spy = { batches: [] }
      return provided(
        Effect.gen(function*() {
          const state = yield* ProjectionStore
          const w = yield* workload
          const report = yield* EvidenceProjector.drain({ batch: 3 })
          assert.deepStrictEqual([report.inserted, report.unchanged], [16, 0])
          assert.deepStrictEqual(Option.some(report.cursor), yield* cursorOf)
          assert.deepStrictEqual(yield* unprojected, [])
          // Six commits of at most three rows; together every record once, in the source's order.
          assert.deepStrictEqual(spy.batches.map((batch) => batch.rows.length), [3, 3, 3, 3, 3, 1])
          const projected = spy.batches.flatMap((batch) => batch.rows)
          const chains = [...(yield* recordsOf(w.a)), ...(yield* recordsOf(w.b))]
          assert.deepStrictEqual(
            projected.map((row) => row.record_id).sort(),
            chains.map((record) => record.record_id).sort()
          )
          for (const row of projected) {
            const record = chains.find((r) => r.record_id === row.record_id)!
            assert.deepStrictEqual(
              [row.chain_id, row.chain_hash, row.sequence, row.record_type, row.operation_id, row.projection_version],
              [
                record.chain_id,
                record.chain_hash,
                record.sequence,
                record.record_type,
                record.operation_id,
                EvidenceProjector.projectionVersion
              ]
            )
          }
          assert.strictEqual(yield* state.projectedRecordCount(), 16)
          assert.strictEqual(yield* state.projectedRecordCount({ chain_id: w.a }), 11)
          assert.strictEqual(yield* state.projectedRecordCount({ chain_id: w.b }), 5)
          assert.deepStrictEqual(terminalsBy(yield* state.projectedOperations()), {
            [w.completed]: ["callable_completed", 1],
            [w.failed]: ["callable_failed", 1],
            [w.denied]: ["operation_denied", 1],
            [w.open]: [null, 0]
          })
          assert.deepStrictEqual(
            (yield* state.projectedOperations({ open_only: true })).map((op) => op.operation_id),
            [w.open]
          )
        }),
        spy
      )
    })

    it.effect("a drain with nothing new commits nothing; a replay from the start inserts nothing; new appends are picked up", () => {
      const spy: Spy = { batches: [] }
      return provided(
        Effect.gen(function*() {
          const state = yield* ProjectionStore
          const w = yield* workload
          const first = yield* EvidenceProjector.drain()
          const commits = spy.batches.length
          const again = yield* EvidenceProjector.drain()
          assert.deepStrictEqual(again, { inserted: 0, unchanged: 0, cursor: first.cursor })
          assert.strictEqual(spy.batches.length, commits, "nothing to project, nothing committed")
          // Another projector starts from the beginning: every row is already there with the same hash.
          const replay = yield* EvidenceProjector.drain({ projector: "replay", batch: 5 })
          assert.deepStrictEqual([replay.inserted, replay.unchanged], [0, 16])
          assert.strictEqual(yield* state.projectedRecordCount(), 16)
          assert.deepStrictEqual(yield* cursorOf, Option.some(first.cursor!))
          const closed = yield* append(w.a, "task_closed", null, "close")
          const next = yield* EvidenceProjector.drain()
          assert.deepStrictEqual([next.inserted, next.unchanged], [1, 0])
          assert.deepStrictEqual(spy.batches.at(-1)!.rows.map((row) => row.record_id), [closed.record_id])
          assert.strictEqual(yield* state.projectedRecordCount(), 17)
        }),
        spy
      )
    })

    it.effect("a failed projection commit keeps the cursor at the last committed batch; the next drain resumes there", () => {
      const spy: Spy = { batches: [], failAt: 3 }
      return provided(
        Effect.gen(function*() {
          const state = yield* ProjectionStore
          yield* workload
          const error = yield* Effect.flip(EvidenceProjector.drain({ batch: 4 }))
          assert.strictEqual(error._tag, "StateStoreUnavailableError")
          assert.strictEqual(yield* state.projectedRecordCount(), 8)
          assert.deepStrictEqual(yield* cursorOf, Option.some(spy.batches[1]!.cursor))
          const pending = yield* unprojected
          assert.strictEqual(pending.length, 8)
          assert.deepStrictEqual(
            pending.slice(0, 4).map((receipt) => receipt.record_id),
            spy.batches[2]!.rows.map((row) => row.record_id),
            "the failed batch is the first still to project"
          )
          const resumed = yield* EvidenceProjector.drain({ batch: 4 })
          assert.deepStrictEqual([resumed.inserted, resumed.unchanged], [8, 0])
          assert.strictEqual(yield* state.projectedRecordCount(), 16)
          assert.deepStrictEqual(yield* unprojected, [])
        }),
        spy
      )
    })

    // The workload's sixth record of chain a, projected by `projector` under `projection_version` with a forged hash.
    const forgedProjection = (projector: string, projection_version: number) =>
      Effect.gen(function*() {
        const state = yield* ProjectionStore
        const w = yield* workload
        const target = (yield* recordsOf(w.a))[5]!
        const forged = Sha256Hex.make("f".repeat(64))
        yield* state.applyProjection({
          projector,
          rows: [
            StateStore.ProjectedRecord.make({
              chain_id: w.a,
              record_id: target.record_id as Uuid,
              projection_version,
              chain_hash: forged,
              sequence: target.sequence,
              record_type: target.record_type as RecordType,
              operation_id: target.operation_id as Uuid
            })
          ],
          cursor: Cursor.make("0")
        })
        return { forged, target, w }
      })

    it.effect("a projection row with the same key and another chain hash fails the drain closed", () =>
      provided(Effect.gen(function*() {
        const state = yield* ProjectionStore
        const { forged, target, w } = yield* forgedProjection("forger", EvidenceProjector.projectionVersion)
        const error = yield* Effect.flip(EvidenceProjector.drain({ batch: 4 }))
        assert.strictEqual(error._tag, "ProjectionConflictError")
        if (error._tag === "ProjectionConflictError") {
          assert.deepStrictEqual(
            [error.reason, error.chain_id, error.record_id, error.stored, error.offered],
            ["chain_hash", w.a, target.record_id, forged, target.chain_hash]
          )
        }
        // The batch before the conflicting one committed; the conflicting batch committed nothing.
        assert.strictEqual(yield* state.projectedRecordCount(), 1 + 4)
        assert.strictEqual((yield* unprojected).length, 12)
        const again = yield* Effect.flip(EvidenceProjector.drain())
        assert.strictEqual(again._tag, "ProjectionConflictError", "the conflict stays until an operator resolves it")
        assert.strictEqual((yield* unprojected).length, 12)
      })))

    it.effect("a record projected under another version with another chain hash fails the drain closed, in every store alike", () =>
      provided(Effect.gen(function*() {
        const state = yield* ProjectionStore
        const { forged, target, w } = yield* forgedProjection("next-version", EvidenceProjector.projectionVersion + 1)
        assert.deepStrictEqual(yield* state.projectedHash(w.a, target.sequence), Option.some(forged))
        const error = yield* Effect.flip(EvidenceProjector.drain({ batch: 4 }))
        assert.strictEqual(error._tag, "ProjectionConflictError")
        if (error._tag === "ProjectionConflictError") {
          assert.deepStrictEqual(
            [error.reason, error.record_id, error.projection_version, error.stored, error.offered],
            ["chain_hash", target.record_id, EvidenceProjector.projectionVersion, forged, target.chain_hash]
          )
        }
        assert.strictEqual(yield* state.projectedRecordCount(), 1 + 4)
        assert.strictEqual((yield* unprojected).length, 12)
        assert.deepStrictEqual(yield* state.projectedHash(w.a, target.sequence), Option.some(forged))
      })))

    it.effect("recover closes an operation whose terminal record never committed as ambiguous, and calls nothing", () => {
      const calls = { write: 0, fail: 0 }
      const armed = { terminal: false }
      const actions = [
        Action.make({
          name: "notes.write",
          input: Schema.Struct({ text: Schema.String }),
          output: Schema.String,
          handler: ({ text }) => {
            calls.write++
            return text
          }
        }),
        Action.make({
          name: "notes.fail",
          input: Schema.Struct({}),
          output: Schema.Void,
          handler: () => {
            calls.fail++
            return Effect.fail(new Action.ActionError({ code: "notes.broken", message: "broken" }))
          }
        })
      ]
      // Refuses terminal records while armed: the callable ran, its result was never recorded.
      const lossy = Layer.effect(
        EvidenceStore,
        Effect.map(EvidenceStore, (store) =>
          EvidenceStore.of({
            ...store,
            appendAll: (records) =>
              armed.terminal && records.some((record) => terminalTypes.has(record.record_type))
                ? Effect.fail(new EvidenceUnavailableError({ detail: "injected" }))
                : store.appendAll(records)
          }))
      )
      const layer = Governed.layer().pipe(
        Layer.provideMerge(Governance.layerWriter),
        Layer.provideMerge(lossy),
        Layer.provideMerge(
          Layer.mergeAll(
            MemoryPolicySnapshotStore.layer,
            MemoryApprovalQueue.layer,
            ActionRegistry.layerWith(actions),
            InProcessBackend.layer
          )
        ),
        Layer.provideMerge(stores),
        Layer.provideMerge(platform)
      )
      return Effect.gen(function*() {
        const policies = yield* PolicySnapshotStore
        const snapshot = yield* Effect.orDie(PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode({
          policy_id: "projector",
          version: "1",
          rules: [{ rule_id: "allow-notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] }],
          gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes"] }]
        }))))
        yield* policies.put(snapshot)
        yield* policies.activate("projector", "1", "ops", Time.fromMicros(0))
        const ref: PolicySnapshotRef = { policy_id: "projector", version: "1", digest: snapshot.digest }
        const boundary = yield* Governance.openBoundary(ref)
        const exec = (n: number, action: string, args: Record<string, unknown>) =>
          run(action, args, { request_id: `op-${n}` }, { policy_snapshot: ref }, { boundary })
        assert.strictEqual((yield* exec(1, "notes.write", { text: "a" }))._tag, "succeeded")
        yield* EvidenceProjector.drain()
        armed.terminal = true
        const lost = yield* Effect.flip(exec(2, "notes.write", { text: "b" }))
        armed.terminal = false
        assert.isTrue(lost._tag === "GovernanceEvidenceError" && lost.call_executed)
        const orphan = lost._tag === "GovernanceEvidenceError" ? lost.operation_id! : ""
        assert.strictEqual((yield* exec(3, "notes.fail", {}))._tag, "failed")
        assert.deepStrictEqual(calls, { write: 2, fail: 1 })

        const state = yield* ProjectionStore
        const before = yield* recordsOf(boundary.chain_id)
        // The executor that ran it is still registered: its operation could be running, so nothing is closed.
        const refused = yield* Effect.flip(EvidenceProjector.recover({ batch: 2 }))
        assert.strictEqual(refused._tag, "LiveExecutorsError")
        assert.strictEqual(refused._tag === "LiveExecutorsError" ? refused.executors.length : 0, 1)
        assert.deepStrictEqual(yield* recordsOf(boundary.chain_id), before)
        const report = yield* EvidenceProjector.recover({ batch: 2, force: true })
        assert.deepStrictEqual(report.closed, [orphan])
        assert.deepStrictEqual(report.unclosable, [])
        assert.deepStrictEqual(calls, { write: 2, fail: 1 }, "recovery invokes nothing")
        const after = yield* recordsOf(boundary.chain_id)
        assert.deepStrictEqual(after.slice(0, before.length), before)
        assert.strictEqual(after.length, before.length + 1)
        const closing = after.at(-1)! as StoredRecord
        assert.deepStrictEqual(
          [closing.record_type, closing.operation_id, JSON.parse(closing.payload_json)],
          ["external_result_ambiguous", orphan, {
            reason_code: "recovery.orphaned_operation",
            call_executed: null,
            stage: "recover"
          }]
        )
        assert.isTrue((yield* Effect.flatMap(EvidenceStore, (store) => store.verify(boundary.chain_id))).valid)
        assert.deepStrictEqual(yield* state.projectedOperations({ open_only: true }), [])
        assert.deepStrictEqual(
          (yield* state.projectedOperations()).map((op) => [op.terminal_type, op.terminal_count]),
          [["callable_completed", 1], ["external_result_ambiguous", 1], ["callable_failed", 1]]
        )
        assert.strictEqual(yield* state.projectedRecordCount(), after.length)
        // Nothing is open now: with the executor still registered, recovery has nothing to refuse.
        const again = yield* EvidenceProjector.recover()
        assert.deepStrictEqual([again.drained.inserted, again.closed, again.unclosable], [0, [], []])
        assert.strictEqual((yield* recordsOf(boundary.chain_id)).length, after.length)
        assert.deepStrictEqual(calls, { write: 2, fail: 1 })
      }).pipe(Effect.provide(layer))
    })

    it.effect("recover reports an open operation on a closed chain as unclosable and appends nothing to it", () =>
      provided(Effect.gen(function*() {
        const chain = yield* IdGenerator.uuid
        const open = yield* operation(chain, undefined)
        yield* append(chain, "task_closed", null, "close")
        const before = yield* recordsOf(chain)
        const report = yield* EvidenceProjector.recover()
        assert.deepStrictEqual(report.closed, [])
        assert.deepStrictEqual(report.unclosable.map((u) => u.operation_id), [open])
        assert.include(report.unclosable[0]!.reason, "closed")
        assert.deepStrictEqual(yield* recordsOf(chain), before)
      })))

    it.effect("a batch that is not a positive integer is refused before anything is projected or appended", () =>
      provided(Effect.gen(function*() {
        const { a, open } = yield* workload
        yield* EvidenceProjector.drain()
        yield* append(a, "callable_completed", open, "end")
        const before = yield* recordsOf(a)
        for (const batch of [0, -1, 2.5, Number.NaN]) {
          const drained = yield* Effect.flip(EvidenceProjector.drain({ batch }))
          assert.strictEqual(drained._tag, "DrainOptionsError")
          assert.include(drained.message, `got ${batch}`)
          const recovered = yield* Effect.flip(EvidenceProjector.recover({ batch }))
          assert.strictEqual(recovered._tag, "DrainOptionsError")
        }
        assert.deepStrictEqual(yield* recordsOf(a), before)
        assert.strictEqual((yield* unprojected).length, 1)
      })))
  })
}

describe("EvidenceProjector: sql tampering", () => {
  const layer = storesWith(sqlStores, { batches: [] })

  it.effect("a record whose content changed in the database fails the drain with ProjectionIntegrityError and holds the cursor", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const state = yield* ProjectionStore
      const w = yield* workload
      yield* EvidenceProjector.drain()
      const cursor = yield* cursorOf
      const later = yield* operation(w.a, "callable_completed")
      const tampered = (yield* recordsOf(w.a)).find((r) =>
        r.operation_id === later && r.record_type === "operation_started"
      )!
      yield* sql`DROP TRIGGER evidence_records_no_update`
      yield* sql`UPDATE evidence_records SET payload_json = ${JSON.stringify({ step: "forged" })}
        WHERE record_id = ${tampered.record_id}`

      const error = yield* Effect.flip(EvidenceProjector.drain())
      assert.strictEqual(error._tag, "ProjectionIntegrityError")
      if (error._tag === "ProjectionIntegrityError") {
        assert.deepStrictEqual(
          [error.reason, error.chain_id, error.record_id],
          ["content_mismatch", w.a, tampered.record_id]
        )
        assert.include(error.message, tampered.record_id)
      }
      assert.deepStrictEqual(yield* cursorOf, cursor, "the cursor stays where it was")
      assert.strictEqual(yield* state.projectedRecordCount(), 16)

      // One record at a time: the record before it is projected, the drain stops right before the tampered one.
      const again = yield* Effect.flip(EvidenceProjector.drain({ batch: 1 }))
      assert.isTrue(again._tag === "ProjectionIntegrityError" && again.record_id === tampered.record_id)
      assert.strictEqual(yield* state.projectedRecordCount(), 17)
      assert.strictEqual((yield* unprojected)[0]!.record_id, tampered.record_id)
      const stuck = yield* Effect.flip(EvidenceProjector.drain({ batch: 1 }))
      assert.isTrue(stuck._tag === "ProjectionIntegrityError" && stuck.record_id === tampered.record_id)
      assert.strictEqual(yield* state.projectedRecordCount(), 17, "it never skips the record")
    }).pipe(Effect.provide(layer)))

  it.effect("a record rewritten with consistent hashes that no longer links to its predecessor fails the drain: broken_link", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const state = yield* ProjectionStore
      const store = yield* EvidenceStore
      const chain = yield* IdGenerator.uuid
      yield* operation(chain, "callable_completed")
      const [first, second] = yield* recordsOf(chain)
      // The second record re-sealed with other content after the first: its own hashes recompute, its link does not
      // reach the third record, which still names the original second.
      const [forged] = yield* Evidence.sealAllWith(yield* Digest, [{
        record_type: "gate_evaluated",
        operation_id: second!.operation_id as Uuid,
        policy_id: "projector",
        policy_version: "1",
        payload: { step: "forged" }
      }], {
        chain_id: chain,
        sequence: 1,
        previous_chain_hash: Sha256Hex.make(first!.chain_hash),
        record_ids: [second!.record_id as Uuid],
        created_at: Time.Timestamp.make(second!.created_at)
      })
      yield* sql`DROP TRIGGER evidence_records_no_update`
      yield* sql`UPDATE evidence_records SET record_type = ${forged!.record_type}, payload_json = ${
        forged!.payload_json
      },
        payload_digest = ${forged!.payload_digest}, chain_hash = ${forged!.chain_hash}
        WHERE record_id = ${second!.record_id}`
      assert.strictEqual((yield* store.verify(chain)).failure_code, "broken_link")
      const error = yield* Effect.flip(EvidenceProjector.drain({ batch: 1 }))
      assert.isTrue(error._tag === "ProjectionIntegrityError" && error.reason === "broken_link")
      assert.strictEqual(
        error._tag === "ProjectionIntegrityError" && error.record_id,
        (yield* recordsOf(chain))[2]!.record_id
      )
      assert.strictEqual(yield* state.projectedRecordCount(), 2, "the records before the break are projected")
    }).pipe(Effect.provide(layer)))

  it.effect("a projected record re-sealed later, with every record after it re-linked, fails the next drain: broken_link", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const state = yield* ProjectionStore
      const store = yield* EvidenceStore
      const chain = yield* IdGenerator.uuid
      yield* operation(chain, undefined)
      yield* EvidenceProjector.drain()
      const operation_id = (yield* recordsOf(chain))[1]!.operation_id as Uuid
      yield* append(chain, "callable_completed", operation_id, "end")
      const [, started, gate, end] = yield* recordsOf(chain)
      // From the projected started record on, the chain is sealed again around a forged payload: it verifies.
      const resealed = yield* Evidence.sealAllWith(
        yield* Digest,
        [started!, gate!, end!].map((record) => ({
          record_type: record.record_type as RecordType,
          operation_id,
          policy_id: record.policy_id,
          policy_version: record.policy_version,
          payload: record === started ? { step: "forged" } : JSON.parse(record.payload_json)
        })),
        {
          chain_id: chain,
          sequence: started!.sequence,
          previous_chain_hash: Sha256Hex.make(started!.previous_chain_hash!),
          record_ids: [started!, gate!, end!].map((record) => record.record_id as Uuid),
          created_at: Time.Timestamp.make(started!.created_at)
        }
      )
      yield* sql`DROP TRIGGER evidence_records_no_update`
      for (const record of resealed) {
        yield* sql`UPDATE evidence_records SET payload_json = ${record.payload_json},
          payload_digest = ${record.payload_digest}, previous_chain_hash = ${record.previous_chain_hash},
          chain_hash = ${record.chain_hash}, created_at = ${record.created_at} WHERE record_id = ${record.record_id}`
      }
      assert.isTrue((yield* store.verify(chain)).valid, "the rewritten chain verifies on its own")
      const error = yield* Effect.flip(EvidenceProjector.drain())
      assert.deepStrictEqual(
        error._tag === "ProjectionIntegrityError" ? [error.reason, error.record_id] : [error._tag],
        ["broken_link", end!.record_id]
      )
      assert.strictEqual(yield* state.projectedRecordCount(), 3, "nothing past the projected records is projected")
    }).pipe(Effect.provide(layer)))
})
