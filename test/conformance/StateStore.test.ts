import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option, TestClock } from "effect"
import * as path from "node:path"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlStateStore from "../../adapters/sql/SqlStateStore.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import type { RecordType } from "../../core/evidence/Evidence.ts"
import { Cursor } from "../../core/evidence/EvidenceStore.ts"
import {
  ComparedInputs,
  Failed,
  FailureSummary,
  PolicyInputs,
  Recheck,
  Succeeded
} from "../../core/execution/ExecutionOutcome.ts"
import * as StateStore from "../../core/state/StateStore.ts"
import { sqliteLayer, tempDir } from "../fixtures/sqlite.ts"
import { attempt, hash, stateStores } from "../fixtures/state.ts"

const layers = [
  ["memory", MemoryStateStore.layer],
  ["sqlite", SqlStateStore.layer.pipe(Layer.provide(sqliteLayer()))]
] as const

const terminal = (status: StateStore.TerminalStatus, reason_code = `run.${status}`) =>
  StateStore.RunTerminal.make({
    status,
    acceptance: status === "completed" ? "accepted" : "unknown",
    quality: status === "completed" ? "full" : "indeterminate",
    reason_code,
    evidence: [],
    cost: null
  })

const intent = (topic: string) => StateStore.IntentDraft.make({ topic, payload_json: JSON.stringify({ topic }) })

const record = (
  chain_id: Uuid,
  record_id: Uuid,
  sequence: number,
  record_type: RecordType,
  operation_id: Uuid | null,
  chain_hash = hash(String(sequence % 10)),
  projection_version = 1
) =>
  StateStore.ProjectedRecord.make({
    chain_id,
    record_id,
    projection_version,
    chain_hash,
    sequence,
    record_type,
    operation_id
  })

const uuids = (n: number) => Effect.all(Array.from({ length: n }, () => IdGenerator.uuid))

const running = Effect.gen(function*() {
  const store = yield* StateStore.RunStore
  const run = yield* store.createRun()
  yield* store.transition(run.run_id, "preparing", "queued")
  return yield* store.transition(run.run_id, "queued", "running")
})

for (const [name, layer] of layers) {
  describe(`StateStore conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, StateStore.StateStores | IdGenerator.IdGenerator>) =>
      Effect.provide(effect, Layer.fresh(layer).pipe(Layer.provideMerge(IdGenerator.layerCrypto)))

    it.effect("only the SQL store claims durability", () =>
      provided(Effect.gen(function*() {
        assert.strictEqual((yield* StateStore.RunStore).durable, name === "sqlite")
      })))

    it.effect("createRun mints the id and starts in preparing; a child names an existing parent", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const root = yield* store.createRun()
        assert.deepStrictEqual(
          [root.status, root.lineage, root.parent_run_id, root.started_at, root.ended_at, root.terminal],
          ["preparing", "root", null, null, null, null]
        )
        assert.deepStrictEqual(yield* store.getRun(root.run_id), root)
        const child = yield* store.createRun({ lineage: "retry", parent_run_id: root.run_id })
        assert.notStrictEqual(child.run_id, root.run_id)
        assert.deepStrictEqual([child.lineage, child.parent_run_id], ["retry", root.run_id])
        assert.deepStrictEqual(yield* store.listRuns({ parent_run_id: root.run_id }), [child])
        assert.deepStrictEqual((yield* store.listRuns()).map((run) => run.run_id), [root.run_id, child.run_id])
        const [ghost] = yield* uuids(1)
        const orphan = yield* Effect.flip(store.createRun({ lineage: "fork", parent_run_id: ghost! }))
        assert.isTrue(orphan._tag === "StateNotFoundError" && orphan.reason === "run" && orphan.id === ghost)
        const missing = yield* Effect.flip(store.getRun(ghost!))
        assert.strictEqual(missing._tag, "StateNotFoundError")
        assert.strictEqual((yield* store.listRuns()).length, 2)
      })))

    it.effect("createRun started: the Run is running from its creation, and only the edges out of running remain", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const root = yield* store.createRun({ started: true })
        assert.deepStrictEqual(
          [root.status, root.lineage, root.started_at, root.ended_at, root.terminal],
          ["running", "root", root.created_at, null, null]
        )
        assert.deepStrictEqual(yield* store.getRun(root.run_id), root)
        const child = yield* store.createRun({ lineage: "retry", parent_run_id: root.run_id, started: true })
        assert.deepStrictEqual([child.status, child.parent_run_id], ["running", root.run_id])
        assert.deepStrictEqual(
          (yield* store.listRuns({ status: ["running"] })).map((run) => run.run_id),
          [root.run_id, child.run_id]
        )
        const restart = yield* Effect.flip(store.transition(root.run_id, "preparing", "queued"))
        assert.isTrue(restart._tag === "IllegalTransitionError" && restart.actual === "running")
        assert.strictEqual((yield* store.transition(root.run_id, "running", "paused")).status, "paused")
        const completed = yield* store.finish(child.run_id, terminal("completed"))
        assert.deepStrictEqual([completed.won, completed.run.status], [true, "completed"])
        const [ghost] = yield* uuids(1)
        const orphan = yield* Effect.flip(store.createRun({ lineage: "fork", parent_run_id: ghost!, started: true }))
        assert.strictEqual(orphan._tag, "StateNotFoundError")
        assert.strictEqual((yield* store.listRuns()).length, 2)
      })))

    it.effect("a child Run naming a malformed parent id is StateNotFoundError, and no Run is created", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        for (const parent of ["not-a-run", "", " "]) {
          const exit = yield* Effect.exit(store.createRun({ lineage: "retry", parent_run_id: parent as Uuid }))
          assert.isTrue(Exit.isFailure(exit) && !Cause.isDie(exit.cause), "a typed failure, not a defect")
          const error = yield* Effect.flip(store.createRun({ lineage: "fork", parent_run_id: parent as Uuid }))
          assert.deepStrictEqual([error._tag, error._tag === "StateNotFoundError" && error.reason], [
            "StateNotFoundError",
            "run"
          ])
        }
        assert.deepStrictEqual(yield* store.listRuns(), [])
      })))

    it.effect("lifecycle: legal edges move by compare-and-set; illegal edges and stale statuses are refused", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* store.createRun()
        const skip = yield* Effect.flip(store.transition(run.run_id, "preparing", "running"))
        assert.isTrue(skip._tag === "IllegalTransitionError" && skip.reason === "not_an_edge")
        assert.strictEqual((yield* store.getRun(run.run_id)).status, "preparing")
        assert.strictEqual((yield* store.transition(run.run_id, "preparing", "queued")).status, "queued")
        const stale = yield* Effect.flip(store.transition(run.run_id, "preparing", "queued"))
        assert.isTrue(stale._tag === "IllegalTransitionError" && stale.reason === "stale_status")
        assert.strictEqual(stale._tag === "IllegalTransitionError" ? stale.actual : null, "queued")
        yield* store.transition(run.run_id, "queued", "running")
        yield* store.transition(run.run_id, "running", "paused")
        assert.strictEqual((yield* store.transition(run.run_id, "paused", "running")).status, "running")
        const back = yield* Effect.flip(store.transition(run.run_id, "running", "queued"))
        assert.isTrue(back._tag === "IllegalTransitionError" && back.reason === "not_an_edge")
        assert.deepStrictEqual((yield* store.listRuns({ status: ["running"] })).map((r) => r.run_id), [run.run_id])

        const early = yield* store.createRun()
        const completedEarly = yield* Effect.flip(store.finish(early.run_id, terminal("completed")))
        assert.isTrue(completedEarly._tag === "IllegalTransitionError" && completedEarly.reason === "not_an_edge")
        const failed = yield* store.finish(early.run_id, terminal("failed"))
        assert.deepStrictEqual([failed.won, failed.run.status, failed.run.started_at], [true, "failed", null])

        yield* store.finish(run.run_id, terminal("completed"))
        const afterEnd = yield* Effect.flip(store.transition(run.run_id, "running", "paused"))
        assert.isTrue(afterEnd._tag === "IllegalTransitionError" && afterEnd.actual === "completed")
        const [ghost] = yield* uuids(1)
        assert.strictEqual(
          (yield* Effect.flip(store.transition(ghost!, "preparing", "queued")))._tag,
          "StateNotFoundError"
        )
        assert.strictEqual((yield* Effect.flip(store.finish(ghost!, terminal("failed"))))._tag, "StateNotFoundError")
      })))

    it.effect("exactly one of 20 concurrent terminal outcomes wins; every other is observed and sees the winner", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const statuses = ["completed", "failed", "cancelled", "timed_out"] as const
        const offered = Array.from({ length: 20 }, (_, i) => terminal(statuses[i % 4]!, `race.${i}`))
        const results = yield* Effect.all(offered.map((t) => store.finish(run.run_id, t)), { concurrency: "unbounded" })
        const winners = results.filter((result) => result.won)
        assert.strictEqual(winners.length, 1)
        const winner = winners[0]!.run
        assert.isNotNull(winner.terminal)
        for (const result of results) assert.deepStrictEqual(result.run, winner)
        assert.deepStrictEqual(yield* store.getRun(run.run_id), winner)
        const observed = yield* store.observations(run.run_id)
        assert.deepStrictEqual(observed.map((o) => o.sequence), Array.from({ length: 19 }, (_, i) => i))
        assert.deepStrictEqual(
          [...observed.map((o) => o.terminal.reason_code), winner.terminal!.reason_code].sort(),
          offered.map((t) => t.reason_code).sort()
        )
        const late = yield* store.finish(run.run_id, terminal("cancelled", "late.cancel"))
        assert.isFalse(late.won)
        assert.deepStrictEqual(late.run, winner)
        assert.strictEqual((yield* store.observations(run.run_id)).length, 20)
      })))

    it.effect("a terminal outcome that is not a valid RunTerminal is a defect, and the Run is left as it was", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const forged = { ...terminal("completed"), reason_code: "", cost: -3 } as unknown as StateStore.RunTerminal
        const exit = yield* Effect.exit(store.finish(run.run_id, forged))
        assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
        assert.strictEqual((yield* store.getRun(run.run_id)).status, "running")
        assert.deepStrictEqual(yield* store.observations(run.run_id), [])
      })))

    it.effect("timestamps come from the Clock and stay ordered even when the clock goes back", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        yield* TestClock.setTime(10_000)
        const run = yield* store.createRun()
        yield* TestClock.adjust("1 second")
        yield* store.transition(run.run_id, "preparing", "queued")
        yield* TestClock.adjust("1 second")
        yield* store.transition(run.run_id, "queued", "running")
        yield* TestClock.adjust("1 second")
        yield* store.transition(run.run_id, "running", "paused")
        yield* store.transition(run.run_id, "paused", "running")
        yield* TestClock.adjust("1 second")
        const ended = (yield* store.finish(run.run_id, terminal("completed"))).run
        assert.deepStrictEqual(
          [ended.created_at, ended.started_at, ended.ended_at],
          [Time.fromMicros(10_000_000), Time.fromMicros(12_000_000), Time.fromMicros(14_000_000)]
        )
        yield* TestClock.adjust("1 second")
        yield* store.finish(run.run_id, terminal("failed"))
        assert.deepStrictEqual(yield* store.getRun(run.run_id), ended)

        const skewed = yield* store.createRun()
        yield* TestClock.setTime(5_000)
        yield* store.transition(skewed.run_id, "preparing", "queued")
        const started = yield* store.transition(skewed.run_id, "queued", "running")
        yield* TestClock.setTime(1_000)
        const closed = (yield* store.finish(skewed.run_id, terminal("timed_out"))).run
        assert.strictEqual(started.started_at, skewed.created_at)
        assert.strictEqual(closed.ended_at, skewed.created_at)
      })))

    it.effect("commitAttempt commits the attempt and its intents together; a duplicate attempt id commits nothing", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a, b, ghost] = yield* uuids(3)
        const committed = yield* store.commitAttempt({
          attempt: attempt(run.run_id, a!),
          intents: [intent("audit.sink"), intent("billing.sink")]
        })
        assert.strictEqual(committed.intents.length, 2)
        for (const i of committed.intents) {
          assert.deepStrictEqual(
            [i.run_id, i.attempt_id, i.delivery_state, i.delivery_attempts],
            [run.run_id, a!, "pending", 0]
          )
        }
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [committed.attempt])
        assert.deepStrictEqual(yield* store.pendingIntents(10), committed.intents)

        const duplicate = yield* Effect.flip(store.commitAttempt({
          attempt: attempt(run.run_id, a!, "changed"),
          intents: [intent("x.sink"), intent("y.sink"), intent("z.sink")]
        }))
        assert.deepStrictEqual([duplicate._tag, duplicate._tag === "DuplicateAttemptError" && duplicate.attempt_id], [
          "DuplicateAttemptError",
          a!
        ])
        const orphan = yield* Effect.flip(store.commitAttempt({
          attempt: attempt(ghost!, b!),
          intents: [intent("orphan.sink")]
        }))
        assert.strictEqual(orphan._tag, "StateNotFoundError")
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [committed.attempt])
        assert.deepStrictEqual(yield* store.pendingIntents(10), committed.intents)
        assert.deepStrictEqual(yield* store.listAttempts(ghost!), [])

        assert.throws(() => StateStore.IntentDraft.make({ topic: "bad", payload_json: "{not json" }))
        const retry = yield* store.commitAttempt({ attempt: attempt(run.run_id, b!, "retry.ok"), intents: [] })
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [committed.attempt, retry.attempt])
      })))

    it.effect("an attempt's stage-10 recheck and the inputs it compared read back as committed", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a, b] = yield* uuids(2)
        const recheck = Recheck.make({
          ran: false,
          reason: "inputs_unchanged",
          evaluators: [],
          digest_before: hash("c"),
          digest_after: hash("c"),
          compared: [
            ComparedInputs.make({
              evaluator: "policy.guards",
              decided: PolicyInputs.make({ snapshot: hash("d"), resolved_path: "/work/a", time_or_budget: false }),
              current: PolicyInputs.make({ snapshot: hash("d"), resolved_path: "/work/a", time_or_budget: false })
            })
          ]
        })
        const rechecked = StateStore.OperationAttempt.make({ ...attempt(run.run_id, a!), recheck })
        yield* store.commitAttempt({ attempt: rechecked, intents: [] })
        yield* store.commitAttempt({ attempt: attempt(run.run_id, b!), intents: [] })
        const [first, second] = yield* store.listAttempts(run.run_id)
        assert.deepStrictEqual(first, rechecked)
        assert.deepStrictEqual(first!.recheck?.compared?.[0]?.decided.resolved_path, "/work/a")
        assert.isFalse("recheck" in second!, "an attempt without a recheck reads back without one")
      })))

    it.effect("a Run and an attempt keep the policy snapshot they were created under; one without reads back without", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const policy = { policy_id: "repo-agent", version: "3", digest: hash("e") }
        const pinned = yield* store.createRun({ started: true, policy })
        const plain = yield* store.createRun({ started: true })
        assert.deepStrictEqual(pinned.policy, policy)
        assert.deepStrictEqual((yield* store.getRun(pinned.run_id)).policy, policy)
        assert.isFalse("policy" in (yield* store.getRun(plain.run_id)), "an unpinned Run reads back without a policy")
        const [a, b] = yield* uuids(2)
        const attempted = StateStore.OperationAttempt.make({ ...attempt(pinned.run_id, a!), policy })
        yield* store.commitAttempt({ attempt: attempted, intents: [] })
        yield* store.commitAttempt({ attempt: attempt(pinned.run_id, b!), intents: [] })
        const [first, second] = yield* store.listAttempts(pinned.run_id)
        assert.deepStrictEqual(first, attempted)
        assert.isFalse("policy" in second!, "an attempt without a policy reads back without one")
        const ended = yield* store.finish(pinned.run_id, terminal("completed"))
        assert.deepStrictEqual([ended.run.status, ended.run.policy], ["completed", policy])
        assert.deepStrictEqual((yield* store.getRun(pinned.run_id)).policy, policy)
      })))

    it.effect("a malformed attempt is a StateInputError naming it, stores nothing, and a corrected retry commits", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a, b] = yield* uuids(2)
        const plain = {
          ...attempt(run.run_id, a!),
          request_id: "",
          created_at: "yesterday"
        } as unknown as StateStore.OperationAttempt
        // A Schema class instance built without validation carries whatever it was given.
        const forged = new StateStore.OperationAttempt({ ...attempt(run.run_id, b!), action_name: "Not An Action" }, {
          disableValidation: true
        })
        for (const malformed of [plain, forged]) {
          const exit = yield* Effect.exit(store.commitAttempt({ attempt: malformed, intents: [intent("audit.sink")] }))
          assert.isTrue(Exit.isFailure(exit) && !Cause.isDie(exit.cause), "a typed failure, not a defect")
          const error = yield* Effect.flip(store.commitAttempt({ attempt: malformed, intents: [] }))
          assert.strictEqual(error._tag, "StateInputError")
          if (error._tag === "StateInputError") {
            assert.strictEqual(error.reason, "attempt")
            assert.match(error.message, malformed === plain ? /request_id/ : /action_name/)
          }
        }
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [])
        assert.deepStrictEqual(yield* store.pendingIntents(10), [])
        const corrected = yield* store.commitAttempt({ attempt: attempt(run.run_id, a!), intents: [] })
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [corrected.attempt])
        assert.deepStrictEqual(corrected.attempt, attempt(run.run_id, a!))
      })))

    it.effect("an outbox intent whose payload is not JSON (or whose topic is blank) is a StateInputError and commits nothing", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a] = yield* uuids(1)
        const drafts = [
          { topic: "audit.sink", payload_json: "{not json" },
          new StateStore.IntentDraft({ topic: "audit.sink", payload_json: "" }, { disableValidation: true }),
          { topic: " ", payload_json: "{}" }
        ] as unknown as ReadonlyArray<StateStore.IntentDraft>
        for (const draft of drafts) {
          const error = yield* Effect.flip(store.commitAttempt({
            attempt: attempt(run.run_id, a!),
            intents: [intent("billing.sink"), draft]
          }))
          assert.strictEqual(error._tag, "StateInputError")
          if (error._tag === "StateInputError") {
            assert.strictEqual(error.reason, "intent")
            assert.match(error.message, /\[1\]/, "names the intent")
          }
        }
        assert.deepStrictEqual(yield* store.pendingIntents(10), [])
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [])
        const committed = yield* store.commitAttempt({
          attempt: attempt(run.run_id, a!),
          intents: [intent("audit.sink")]
        })
        assert.deepStrictEqual(yield* store.pendingIntents(10), committed.intents)
      })))

    it.effect("an attempt stores its outcome's summary, never the raw result", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a, b] = yield* uuids(2)
        const common = {
          request_id: "req-1",
          action: { name: "notes.write" },
          profile: "durable",
          decisions: []
        } as const
        const ok = new Succeeded({ ...common, attempt_id: a!, stage: "persist", result: { secret: "s3cr3t" } })
        const failed = new Failed({
          ...common,
          attempt_id: b!,
          stage: "invoke",
          failure: FailureSummary.make({ code: "action.crashed" })
        })
        const summary = StateStore.summarize(ok, hash("c"))
        assert.deepStrictEqual(
          [summary.tag, summary.reason_code, summary.call_executed, summary.result_digest],
          ["succeeded", "ok", true, hash("c")]
        )
        assert.deepStrictEqual(
          [StateStore.summarize(failed).tag, StateStore.summarize(failed).reason_code],
          ["failed", "action.crashed"]
        )
        const stored = StateStore.OperationAttempt.make({ ...attempt(run.run_id, a!), outcome: summary })
        yield* store.commitAttempt({ attempt: stored, intents: [] })
        const [read] = yield* store.listAttempts(run.run_id)
        assert.deepStrictEqual(read, stored)
        assert.notInclude(JSON.stringify(read), "s3cr3t")
      })))

    it.effect("outbox: pending until delivered; a failed delivery is retried or failed for good, and a settled intent stays settled; the attempt never changes", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [a] = yield* uuids(1)
        const { attempt: committed, intents } = yield* store.commitAttempt({
          attempt: attempt(run.run_id, a!),
          intents: [intent("one"), intent("two"), intent("three")]
        })
        const [one, two, three] = intents.map((i) => i.intent_id)
        assert.deepStrictEqual((yield* store.pendingIntents(2)).map((i) => i.intent_id), [one, two])
        assert.deepStrictEqual(yield* store.pendingIntents(0), [])
        for (const [limit, taken] of [[Infinity, 3], [2.7, 2], [-1, 0], [Number.NaN, 0]] as const) {
          assert.strictEqual((yield* store.pendingIntents(limit)).length, taken, `limit ${limit}`)
        }

        yield* TestClock.adjust("3 seconds")
        const delivered = yield* store.markDelivered(one!)
        assert.deepStrictEqual(
          [delivered.delivery_state, delivered.delivery_attempts, delivered.delivered_at],
          ["delivered", 1, Time.fromMicros(3_000_000)]
        )
        assert.deepStrictEqual(yield* store.markDelivered(one!), delivered)
        assert.deepStrictEqual(yield* store.markFailed(one!, "sink.late"), delivered)

        const retrying = yield* store.markFailed(two!, "sink.timeout", { retry: true })
        assert.deepStrictEqual(
          [retrying.delivery_state, retrying.delivery_attempts, retrying.last_reason_code],
          ["pending", 1, "sink.timeout"]
        )
        assert.deepStrictEqual((yield* store.pendingIntents(10)).map((i) => i.intent_id), [two, three])
        const dead = yield* store.markFailed(two!, "sink.rejected")
        assert.deepStrictEqual(
          [dead.delivery_state, dead.delivery_attempts, dead.last_reason_code],
          ["failed", 2, "sink.rejected"]
        )
        assert.deepStrictEqual((yield* store.pendingIntents(10)).map((i) => i.intent_id), [three])
        assert.deepStrictEqual(yield* store.markFailed(two!, "sink.back", { retry: true }), dead)
        assert.deepStrictEqual(yield* store.markDelivered(two!), dead)
        assert.deepStrictEqual((yield* store.pendingIntents(10)).map((i) => i.intent_id), [three])
        assert.deepStrictEqual([dead.topic, dead.payload_json, dead.attempt_id], ["two", "{\"topic\":\"two\"}", a!])
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [committed])

        const [ghost] = yield* uuids(1)
        const missing = yield* Effect.flip(store.markDelivered(ghost!))
        assert.deepStrictEqual([missing._tag, missing._tag === "StateNotFoundError" && missing.reason], [
          "StateNotFoundError",
          "intent"
        ])
      })))

    it.effect("projection: rows and the advanced cursor commit together, and replay is a no-op", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const [chain, r0, r1, r2, r3, r4, op] = yield* uuids(7)
        assert.isTrue(Option.isNone(yield* store.projectionCursor("ops")))
        const rows = [
          record(chain!, r0!, 0, "policy_bound", null),
          record(chain!, r1!, 1, "operation_started", op!),
          record(chain!, r2!, 2, "gate_evaluated", op!),
          record(chain!, r3!, 3, "callable_completed", op!)
        ]
        const first = yield* store.applyProjection({ projector: "ops", rows, cursor: Cursor.make("c1") })
        assert.deepStrictEqual([first.inserted, first.unchanged], [4, 0])
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c1")))
        const operations = yield* store.projectedOperations()

        const replay = yield* store.applyProjection({ projector: "ops", rows, cursor: Cursor.make("c1") })
        assert.deepStrictEqual([replay.inserted, replay.unchanged], [0, 4])
        assert.strictEqual(yield* store.projectedRecordCount(), 4)
        assert.deepStrictEqual(yield* store.projectedOperations(), operations)
        assert.strictEqual(operations[0]!.terminal_count, 1)

        const closing = record(chain!, r4!, 4, "task_closed", null)
        const overlap = yield* store.applyProjection({
          projector: "ops",
          rows: [rows[2]!, rows[3]!, closing],
          cursor: Cursor.make("c2")
        })
        assert.deepStrictEqual([overlap.inserted, overlap.unchanged], [1, 2])
        assert.strictEqual(yield* store.projectedRecordCount(), 5)
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c2")))
        assert.isTrue(Option.isNone(yield* store.projectionCursor("other")))

        const advanced = yield* store.applyProjection({ projector: "ops", rows: [], cursor: Cursor.make("c3") })
        assert.deepStrictEqual([advanced.inserted, advanced.unchanged], [0, 0])
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c3")))
        assert.deepStrictEqual(
          [yield* store.projectedHash(chain!, 1), yield* store.projectedHash(chain!, 4)],
          [Option.some(rows[1]!.chain_hash), Option.some(closing.chain_hash)]
        )
        assert.isTrue(Option.isNone(yield* store.projectedHash(chain!, 5)))
        assert.isTrue(Option.isNone(yield* store.projectedHash(r0!, 0)), "another chain's position")
      })))

    it.effect("projection: attempts are committed once each with one intent; one offered twice keeps the first; one whose Run is not stored is skipped", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const run = yield* running
        const [first, elsewhere, unknownRun] = yield* uuids(3)
        yield* store.applyProjection({
          projector: "ops",
          rows: [],
          cursor: Cursor.make("c1"),
          attempts: [
            attempt(run.run_id, first!, "ok"),
            attempt(run.run_id, first!, "replayed"),
            attempt(unknownRun!, elsewhere!)
          ]
        })
        yield* store.applyProjection({
          projector: "ops",
          rows: [],
          cursor: Cursor.make("c2"),
          attempts: [attempt(run.run_id, first!, "again")]
        })
        const attempts = yield* store.listAttempts(run.run_id)
        assert.deepStrictEqual(attempts.map((a) => [a.attempt_id, a.outcome.reason_code]), [[first, "ok"]])
        assert.deepStrictEqual((yield* store.pendingIntents(10)).map((i) => [i.attempt_id, i.topic]), [[
          first,
          "writ.outcome"
        ]])
        assert.deepStrictEqual(yield* store.listAttempts(unknownRun!), [])
      })))

    it.effect("projection: a conflicting chain hash fails the whole batch, commits nothing and keeps the cursor", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const [chain, other, r0, r1, r2, r3, op, op2] = yield* uuids(8)
        yield* store.applyProjection({
          projector: "ops",
          rows: [record(chain!, r0!, 0, "operation_started", op!), record(chain!, r1!, 1, "gate_evaluated", op!)],
          cursor: Cursor.make("c1")
        })
        const conflict = yield* Effect.flip(store.applyProjection({
          projector: "ops",
          rows: [
            record(chain!, r2!, 2, "operation_started", op2!),
            record(chain!, r1!, 1, "gate_evaluated", op!, hash("f"))
          ],
          cursor: Cursor.make("c2")
        }))
        assert.strictEqual(conflict._tag, "ProjectionConflictError")
        if (conflict._tag === "ProjectionConflictError") {
          assert.deepStrictEqual(
            [conflict.reason, conflict.chain_id, conflict.record_id, conflict.stored, conflict.offered],
            ["chain_hash", chain!, r1!, hash("1"), hash("f")]
          )
        }
        assert.strictEqual(yield* store.projectedRecordCount(), 2)
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c1")))
        assert.deepStrictEqual((yield* store.projectedOperations()).map((o) => o.operation_id), [op!])

        const inBatch = yield* Effect.flip(store.applyProjection({
          projector: "ops",
          rows: [
            record(chain!, r3!, 3, "gate_evaluated", op!),
            record(chain!, r3!, 3, "gate_evaluated", op!, hash("e"))
          ],
          cursor: Cursor.make("c2")
        }))
        assert.strictEqual(inBatch._tag, "ProjectionConflictError")

        const crossChain = yield* Effect.flip(store.applyProjection({
          projector: "ops",
          rows: [record(other!, r3!, 0, "callable_completed", op!)],
          cursor: Cursor.make("c2")
        }))
        assert.isTrue(crossChain._tag === "ProjectionConflictError" && crossChain.reason === "operation_chain")
        assert.strictEqual(yield* store.projectedRecordCount(), 2)
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c1")))
      })))

    it.effect("projection: a record is one fact under every version: another hash or position for it, or another record at its position, is a conflict", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const [chain, r0, r1, intruder] = yield* uuids(4)
        yield* store.applyProjection({
          projector: "v1",
          rows: [
            record(chain!, r0!, 0, "policy_bound", null, hash("1")),
            record(chain!, r1!, 1, "gate_evaluated", null)
          ],
          cursor: Cursor.make("1")
        })
        const offers = [
          [record(chain!, r0!, 0, "policy_bound", null, hash("2"), 2), "chain_hash", hash("1"), hash("2")],
          [record(chain!, r0!, 5, "policy_bound", null, hash("1"), 2), "chain_position", "0", "5"],
          [record(chain!, intruder!, 0, "policy_bound", null, hash("1"), 1), "chain_position", r0!, intruder!],
          [record(chain!, intruder!, 1, "policy_bound", null, hash("3"), 3), "chain_position", r1!, intruder!]
        ] as const
        for (const [row, reason, stored, offered] of offers) {
          const conflict = yield* Effect.flip(
            store.applyProjection({ projector: "v2", rows: [row], cursor: Cursor.make("2") })
          )
          assert.strictEqual(conflict._tag, "ProjectionConflictError")
          if (conflict._tag === "ProjectionConflictError") {
            assert.deepStrictEqual(
              [conflict.reason, conflict.record_id, conflict.projection_version, conflict.stored, conflict.offered],
              [reason, row.record_id, row.projection_version, stored, offered]
            )
          }
        }
        // Within one batch too: the first row of a position stands, a second record there is refused.
        const [fresh, other] = yield* uuids(2)
        const inBatch = yield* Effect.flip(store.applyProjection({
          projector: "v2",
          rows: [record(chain!, fresh!, 2, "gate_evaluated", null), record(chain!, other!, 2, "gate_evaluated", null)],
          cursor: Cursor.make("2")
        }))
        assert.isTrue(inBatch._tag === "ProjectionConflictError" && inBatch.reason === "chain_position")
        assert.strictEqual(yield* store.projectedRecordCount(), 2)
        assert.deepStrictEqual(yield* store.projectionCursor("v2"), Option.none())
        // The same record and hash under another version is a new row, and the position's hash stays what it was.
        const again = yield* store.applyProjection({
          projector: "v2",
          rows: [record(chain!, r0!, 0, "policy_bound", null, hash("1"), 2)],
          cursor: Cursor.make("2")
        })
        assert.deepStrictEqual([again.inserted, again.unchanged], [1, 0])
        assert.deepStrictEqual(yield* store.projectedHash(chain!, 0), Option.some(hash("1")))
        assert.deepStrictEqual(yield* store.projectedHash(chain!, 1), Option.some(hash("1")))
        assert.deepStrictEqual(yield* store.projectedHash(chain!, 2), Option.none())
      })))

    it.effect("operations projection: started and terminal records, terminal counts, filters and versions", () =>
      provided(Effect.gen(function*() {
        const store = yield* stateStores
        const [a, b, op1, op2, op3, op4, op5] = yield* uuids(7)
        const ids = yield* uuids(10)
        const chainA = [
          record(a!, ids[0]!, 0, "operation_started", op1!),
          record(a!, ids[1]!, 1, "callable_completed", op1!),
          record(a!, ids[2]!, 2, "operation_started", op2!),
          record(a!, ids[3]!, 3, "operation_started", op3!),
          record(a!, ids[4]!, 4, "callable_failed", op3!),
          record(a!, ids[5]!, 5, "operation_timed_out", op3!),
          record(a!, ids[6]!, 6, "external_result_ambiguous", op5!)
        ]
        const chainB = [record(b!, ids[7]!, 0, "operation_started", op4!)]
        yield* store.applyProjection({ projector: "ops", rows: chainA.slice(0, 4), cursor: Cursor.make("1") })
        yield* store.applyProjection({
          projector: "ops",
          rows: [...chainA.slice(4), ...chainB],
          cursor: Cursor.make("2")
        })

        const all = yield* store.projectedOperations()
        assert.deepStrictEqual(all.map((o) => o.operation_id), [op1, op2, op3, op5, op4])
        const byId = new Map(all.map((o) => [o.operation_id, o]))
        assert.deepStrictEqual(
          byId.get(op1!),
          StateStore.ProjectedOperation.make({
            operation_id: op1!,
            chain_id: a!,
            started_record_id: ids[0]!,
            terminal_record_id: ids[1]!,
            terminal_type: "callable_completed",
            terminal_count: 1
          })
        )
        const op3Row = byId.get(op3!)!
        assert.deepStrictEqual(
          [op3Row.terminal_record_id, op3Row.terminal_type, op3Row.terminal_count],
          [ids[4]!, "callable_failed", 2]
        )
        const op5Row = byId.get(op5!)!
        assert.deepStrictEqual([op5Row.started_record_id, op5Row.terminal_count], [null, 1])
        assert.deepStrictEqual(
          (yield* store.projectedOperations({ open_only: true })).map((o) => o.operation_id),
          [op2, op4]
        )
        assert.deepStrictEqual(
          (yield* store.projectedOperations({ chain_id: a!, open_only: true })).map((o) => o.operation_id),
          [op2]
        )
        assert.deepStrictEqual((yield* store.projectedOperations({ chain_id: b! })).map((o) => o.operation_id), [op4])
        assert.strictEqual(yield* store.projectedRecordCount({ chain_id: a! }), 7)
        assert.strictEqual(yield* store.projectedRecordCount({ chain_id: b! }), 1)

        const v2 = chainA.slice(0, 2).map((row) =>
          record(row.chain_id, row.record_id, row.sequence, row.record_type, row.operation_id, row.chain_hash, 2)
        )
        const reprojected = yield* store.applyProjection({ projector: "ops-v2", rows: v2, cursor: Cursor.make("2") })
        assert.strictEqual(reprojected.inserted, 2)
        assert.strictEqual(yield* store.projectedRecordCount(), 10)
        assert.deepStrictEqual(yield* store.projectedOperations(), all)
      })))
  })
}

describe("StateStore: sqlite specifics", () => {
  const open = (filename: string) =>
    SqlStateStore.layer.pipe(
      Layer.provideMerge(Sqlite.layer({ filename })),
      Layer.provideMerge(IdGenerator.layerCrypto)
    )

  it.scoped("state survives closing and reopening the database file", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "state.db")
      const written = yield* Effect.gen(function*() {
        const store = yield* stateStores
        const parent = yield* running
        const child = yield* store.createRun({ lineage: "resume", parent_run_id: parent.run_id })
        const [a, chain, r0, op] = yield* uuids(4)
        const committed = yield* store.commitAttempt({
          attempt: attempt(parent.run_id, a!),
          intents: [intent("one"), intent("two")]
        })
        yield* store.markDelivered(committed.intents[0]!.intent_id)
        const ended = yield* store.finish(parent.run_id, terminal("completed"))
        yield* store.finish(parent.run_id, terminal("cancelled", "late"))
        yield* store.applyProjection({
          projector: "ops",
          rows: [record(chain!, r0!, 0, "operation_started", op!)],
          cursor: Cursor.make("c1")
        })
        return {
          parent: ended.run,
          child,
          committed,
          observations: yield* store.observations(parent.run_id),
          operations: yield* store.projectedOperations(),
          pending: yield* store.pendingIntents(10)
        }
      }).pipe(Effect.provide(open(filename)))

      yield* Effect.gen(function*() {
        const store = yield* stateStores
        assert.deepStrictEqual(yield* store.getRun(written.parent.run_id), written.parent)
        assert.deepStrictEqual(yield* store.getRun(written.child.run_id), written.child)
        assert.deepStrictEqual(yield* store.observations(written.parent.run_id), written.observations)
        assert.strictEqual(written.observations.length, 1)
        assert.deepStrictEqual(yield* store.listAttempts(written.parent.run_id), [written.committed.attempt])
        assert.deepStrictEqual(yield* store.pendingIntents(10), written.pending)
        assert.deepStrictEqual(written.pending.map((i) => i.intent_id), [written.committed.intents[1]!.intent_id])
        assert.deepStrictEqual(yield* store.projectionCursor("ops"), Option.some(Cursor.make("c1")))
        assert.deepStrictEqual(yield* store.projectedOperations(), written.operations)
        assert.strictEqual(yield* store.projectedRecordCount(), 1)
        const again = yield* store.finish(written.parent.run_id, terminal("failed"))
        assert.deepStrictEqual([again.won, again.run], [false, written.parent])
      }).pipe(Effect.provide(open(filename)))
    }))

  it.scoped("a write that fails midway commits none of its statements", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "state.db")
      yield* Effect.gen(function*() {
        const store = yield* stateStores
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TRIGGER refuse_boom_intent BEFORE INSERT ON outbox_intents WHEN NEW.topic = 'boom'
          BEGIN SELECT RAISE(ABORT, 'injected intent failure'); END`
        yield* sql`CREATE TRIGGER refuse_boom_cursor BEFORE INSERT ON projection_cursors WHEN NEW.projector = 'boom'
          BEGIN SELECT RAISE(ABORT, 'injected cursor failure'); END`
        const run = yield* running
        const [a, chain, r0, op] = yield* uuids(4)
        const failed = yield* Effect.flip(store.commitAttempt({
          attempt: attempt(run.run_id, a!),
          intents: [intent("fine"), intent("boom")]
        }))
        assert.strictEqual(failed._tag, "StateStoreUnavailableError")
        assert.deepStrictEqual(yield* store.listAttempts(run.run_id), [])
        assert.deepStrictEqual(yield* store.pendingIntents(10), [])

        const unprojected = yield* Effect.flip(store.applyProjection({
          projector: "boom",
          rows: [record(chain!, r0!, 0, "operation_started", op!)],
          cursor: Cursor.make("c1")
        }))
        assert.strictEqual(unprojected._tag, "StateStoreUnavailableError")
        assert.strictEqual(yield* store.projectedRecordCount(), 0)
        assert.deepStrictEqual(yield* store.projectedOperations(), [])
        assert.isTrue(Option.isNone(yield* store.projectionCursor("boom")))

        yield* store.commitAttempt({ attempt: attempt(run.run_id, a!), intents: [intent("fine")] })
        assert.strictEqual((yield* store.pendingIntents(10)).length, 1)
      }).pipe(Effect.provide(open(filename)))
    }))

  it.scoped("storage failures surface as StateStoreUnavailableError, and the database refuses to rewrite a terminal Run", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "state.db")
      yield* Effect.gen(function*() {
        const store = yield* stateStores
        const sql = yield* SqlClient.SqlClient
        const run = yield* running
        yield* store.finish(run.run_id, terminal("completed"))
        const rewrite = yield* Effect.flip(sql`UPDATE runs SET reason_code = 'rewritten' WHERE run_id = ${run.run_id}`)
        assert.include(String(rewrite.cause), "terminal run never changes")

        const [other] = yield* uuids(1)
        yield* sql`INSERT INTO runs (run_id, status, created_at, lineage) VALUES (${other!}, 'preparing', 'soon', 'root')`
        const corrupt = yield* Effect.flip(store.getRun(other!))
        assert.strictEqual(corrupt._tag, "StateStoreUnavailableError")

        yield* sql`DROP TABLE projection_cursors`
        const dropped = yield* Effect.flip(store.projectionCursor("ops"))
        assert.strictEqual(dropped._tag, "StateStoreUnavailableError")
        assert.include(dropped.message, "projection_cursors")
      }).pipe(Effect.provide(open(filename)))
    }))
})
