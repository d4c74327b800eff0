import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import type { Context } from "effect"
import { Deferred, Effect, Layer, Schema } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import type { StoredRecord } from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Governed from "../../core/execution/Governed.ts"
import { BudgetLedger } from "../../core/policy/BudgetLedger.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { install, minute, summary } from "../fixtures/budgets.ts"
import { root } from "../fixtures/child.ts"
import { chainRecords, run } from "../fixtures/layers.ts"
import { tempDir } from "../fixtures/sqlite.ts"

/** How many times the action's handler ran, in this process. */
const invoked = { count: 0 }

const complete = Action.make({
  name: "model.complete",
  input: Schema.Struct({}),
  output: Schema.String,
  handler: () => Effect.sync(() => (invoked.count++, "done"))
})

/** A gate's peeks wait here, once armed, until two have arrived: both executors read the window before either commits. */
const makeBarrier = Effect.map(Deferred.make<void>(), (both) => {
  const state = { armed: false, arrived: 0 }
  const wait = Effect.suspend(() =>
    !state.armed ? Effect.void : ++state.arrived === 2 ? Deferred.succeed(both, undefined) : Deferred.await(both)
  )
  return { state, wait }
})

const peekingAt = (barrier: Effect.Effect<unknown>) =>
  Layer.effect(
    BudgetLedger,
    Effect.map(BudgetLedger, (ledger) => ({
      ...ledger,
      peek: (...args: Parameters<BudgetLedger.Service["peek"]>) => Effect.zipLeft(ledger.peek(...args), barrier)
    }))
  )

/** An evidence store whose appends cannot carry budget places: its `appendAll` replaced, as any decorator does. */
const withoutPlaces = Layer.effect(
  EvidenceStore,
  Effect.map(
    EvidenceStore,
    (store) => ({ ...store, appendAll: (records) => store.appendAll(records) })
  ) satisfies Effect.Effect<EvidenceStore.Service, never, EvidenceStore>
)

/** A governed executor over every store on `filename` (its own connections), as a process of its own would build it. */
const executorOn = (filename: string, options: { peek?: Effect.Effect<unknown>; plainStore?: boolean } = {}) =>
  Governed.layer().pipe(
    Layer.provideMerge(Layer.merge(ActionRegistry.layerWith([complete]), InProcessBackend.layer)),
    Layer.provideMerge(options.peek === undefined ? Layer.empty : peekingAt(options.peek)),
    Layer.provideMerge(options.plainStore === true ? withoutPlaces : Layer.empty),
    Layer.provideMerge(Embedded.layerStores({ filename }))
  )

type Executor = Context.Context<Layer.Layer.Success<ReturnType<typeof executorOn>>>

/** One call in a boundary of its own, and that boundary's chain once closed. */
const callIn = (executor: Executor, ref: PolicySnapshotRef) =>
  Effect.provide(
    Effect.gen(function*() {
      const boundary = yield* Governance.openBoundary(ref)
      const outcome = yield* run("model.complete", {}, {}, { policy_snapshot: ref }, { boundary })
      yield* Governance.closeBoundary(boundary)
      const store = yield* EvidenceStore
      const verified = yield* store.verify(boundary.chain_id)
      return { outcome, records: yield* chainRecords(boundary.chain_id), valid: verified.valid }
    }),
    executor
  )

/** The gate results a chain records, as `gate_id decision`. */
const gateResults = (records: ReadonlyArray<StoredRecord>) =>
  records.filter((record) => record.record_type === "gate_evaluated").map((record) => {
    const payload = JSON.parse(record.payload_json) as { readonly gate_id: string; readonly decision: string }
    return `${payload.gate_id} ${payload.decision}`
  })

const admissionRows = (executor: Executor) =>
  Effect.provide(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ readonly n: number }>`SELECT count(*) AS n FROM budget_admissions`),
    executor
  ).pipe(Effect.map(([row]) =>
    Number(row?.n)
  ))

/**
 * The commits in the database's write-ahead log: frames whose commit field (the database size after the commit) is
 * set, among those of the log's current salt. Nothing checkpoints a log this small while its connections are open.
 */
const walCommits = (filename: string) => {
  const wal = fs.readFileSync(`${filename}-wal`)
  const pageSize = wal.readUInt32BE(8)
  const [salt1, salt2] = [wal.readUInt32BE(16), wal.readUInt32BE(20)]
  let commits = 0
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    if (wal.readUInt32BE(at + 8) !== salt1 || wal.readUInt32BE(at + 12) !== salt2) break
    if (wal.readUInt32BE(at + 4) !== 0) commits++
  }
  return commits
}

describe("budget places committed with the call's evidence (ledger and evidence on one SQLite file)", () => {
  for (
    const [kind, window, loser] of [
      ["windowed", minute, "deferred budget.exhausted"],
      ["lifetime", "none", "denied budget.exhausted"]
    ] as const
  ) {
    it.scoped(
      `two executors race for a ${kind} calls budget's last place: one runs, the other is ${loser}`,
      () =>
        Effect.gen(function*() {
          const filename = path.join(yield* tempDir, "writ.db")
          const barrier = yield* makeBarrier
          const first = yield* Layer.build(executorOn(filename, { peek: barrier.wait }))
          const second = yield* Layer.build(executorOn(filename, { peek: barrier.wait }))
          const ref = yield* Effect.provide(install("calls", 2, ["model.*"], window), first)
          invoked.count = 0
          assert.strictEqual(summary((yield* callIn(first, ref)).outcome), "succeeded")
          barrier.state.armed = true
          const raced = yield* Effect.all([callIn(first, ref), callIn(second, ref)], { concurrency: "unbounded" })
          assert.strictEqual(barrier.state.arrived, 2, "both executors read the window before either committed")
          const summaries = raced.map(({ outcome }) => summary(outcome))
          assert.sameMembers(summaries, ["succeeded", loser])
          assert.strictEqual(invoked.count, 2)
          assert.strictEqual(yield* admissionRows(first), 2)
          const lost = raced.find(({ outcome }) => outcome._tag !== "succeeded")!
          const won = raced.find(({ outcome }) => outcome._tag === "succeeded")!
          assert.isTrue(won.valid && lost.valid)
          const types = lost.records.map((record) => record.record_type)
          if (kind === "windowed") {
            // Deferred at its start: no operation, no gate result, exactly as a deferral at stage 3.
            assert.deepStrictEqual(types, ["task_closed"])
            assert.strictEqual(lost.outcome.stage, "governed_start")
            assert.isDefined((lost.outcome as { readonly retry_at?: unknown }).retry_at)
          } else {
            // Denied with the records of its denial, committed with its terminal: the allow's commit left nothing.
            assert.deepStrictEqual(gateResults(lost.records), [...gateResults(won.records), "writ.budget deny"])
            assert.deepStrictEqual(types.filter((type) => type !== "gate_evaluated"), [
              "policy_bound",
              "operation_started",
              "operation_denied",
              "task_closed"
            ])
          }
        }),
      60_000
    )
  }

  it.scoped(
    "a governed call with a calls budget commits no more often than one without a budget",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const perCall = (budget: "calls" | "none", plainStore = false) =>
          Effect.gen(function*() {
            const filename = path.join(dir, `${budget}-${plainStore}.db`)
            const executor = yield* Layer.build(executorOn(filename, { plainStore }))
            const ref = yield* Effect.provide(
              install("calls", 100, [budget === "calls" ? "model.*" : "none.*"], "none"),
              executor
            )
            const boundary = yield* Effect.provide(Governance.openBoundary(ref), executor)
            const before = walCommits(filename)
            for (let i = 0; i < 4; i++) {
              const outcome = yield* Effect.provide(
                run("model.complete", {}, {}, { policy_snapshot: ref }, { boundary }),
                executor
              )
              assert.strictEqual(outcome._tag, "succeeded")
            }
            return (walCommits(filename) - before) / 4
          })
        const unbudgeted = yield* perCall("none")
        const budgeted = yield* perCall("calls")
        const apart = yield* perCall("calls", true)
        // Three evidence commits per call (start, gate records, terminal); the place rides on the gate records' commit.
        assert.strictEqual(unbudgeted, 3)
        assert.strictEqual(budgeted, unbudgeted)
        // Over a store that cannot carry it, the ledger admits in a commit of its own: what the instrument sees.
        assert.strictEqual(apart, unbudgeted + 1)
      }),
    60_000
  )
})

/** The crash child run from source on `filename` until it exits or dies: its signal and output. */
const crashChild = (filename: string, markers: string, budget: string, when: string) =>
  Effect.async<{ readonly signal: string | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(process.execPath, [
      "--import",
      path.join(root, "test/fixtures/typescript-hooks.mjs"),
      path.join(root, "test/fixtures/budget-crash-child.ts"),
      filename,
      markers
    ], {
      env: {
        PATH: process.env.PATH ?? "",
        NODE_PATH: path.join(root, "node_modules"),
        BUDGET: budget,
        KILL_WHEN: when
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => stdout += chunk)
    child.stderr.on("data", (chunk) => stderr += chunk)
    child.on("close", (_, signal) => resume(Effect.succeed({ signal, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe("a crash around the commit that carries a budget place", () => {
  for (const [budget, carrier] of [["windowed", "operation_started"], ["lifetime", "gate_evaluated"]] as const) {
    for (const when of ["before", "after"] as const) {
      it.scoped(
        `${budget}: killed ${when} the commit, the place and its records are both there or neither`,
        () =>
          Effect.gen(function*() {
            const dir = yield* tempDir
            const [filename, markers] = [path.join(dir, "writ.db"), path.join(dir, "markers")]
            const died = yield* crashChild(filename, markers, budget, when)
            assert.strictEqual(died.signal, "SIGKILL", `${died.stdout}${died.stderr}`)
            const database = new Database(filename)
            const count = (query: string) => Number((database.prepare(query).all()[0] as { readonly n: number }).n)
            const places = count("SELECT count(*) AS n FROM budget_admissions")
            const carried = count(`SELECT count(*) AS n FROM evidence_records WHERE record_type = '${carrier}'`)
            database.close()
            assert.deepStrictEqual(
              { places, carried: carried > 0 },
              when === "before"
                ? { places: 0, carried: false }
                : { places: 1, carried: true }
            )
            // The kill came before the call either way: the action never ran.
            assert.isFalse(fs.existsSync(markers))
          }),
        120_000
      )
    }
  }
})
