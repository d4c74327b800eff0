/**
 * Gate 14, projection recovery: a child process runs a fixed governed workload on a real SQLite file and is
 * SIGKILLed immediately before or after every evidence append commit and every ProjectionStore projection commit.
 * Recovery then runs here, on the same file, and the audit proves at-least-once discovery, atomic cursor
 * advancement, idempotent replay, and an eventual projection that closes every operation without repeating
 * (or inventing) a call.
 */
import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Schema, Stream } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import type { StoredRecord } from "../../core/evidence/Evidence.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceProjectionSource, EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { ProjectionStore } from "../../core/state/ProjectionStore.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { bundleChild, root } from "../fixtures/child.ts"
import { callableRequests, expectedTerminal } from "../fixtures/crash-workload.ts"

/** Where a child is killed: immediately before or after the n-th (1-based) commit of one kind. */
interface KillPoint {
  readonly target: "append" | "projection"
  readonly when: "before" | "after"
  readonly n: number
}

const label = (kill: KillPoint | undefined) => kill === undefined ? "no kill" : `${kill.when} ${kill.target} #${kill.n}`

interface ChildExit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

let work = ""
let script = ""
let template = ""

// The concurrent workload runs from source (its evidence commit thread needs its script beside the module).
const concurrentChild = [
  "--import",
  path.join(root, "test/fixtures/typescript-hooks.mjs"),
  path.join(root, "test/fixtures/crash-child.ts")
]

/** Run the child (bundled, or from source for `fibers` > 1) on `filename` until it exits or dies. */
const runChild = (filename: string, markers: string, kill: KillPoint | undefined, fibers = 1) =>
  Effect.async<ChildExit>((resume) => {
    const child = spawn(process.execPath, [...(fibers > 1 ? concurrentChild : [script]), filename, markers], {
      env: {
        PATH: process.env.PATH ?? "",
        NODE_PATH: path.join(root, "node_modules"),
        // SIGKILL is not a power loss: WAL commits in the page cache survive it, so no fsync per commit is needed.
        WRIT_SYNCHRONOUS: "NORMAL",
        CRASH_FIBERS: String(fibers),
        ...(kill === undefined ? {} : { KILL_TARGET: kill.target, KILL_WHEN: kill.when, KILL_AT: String(kill.n) })
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => stdout += chunk)
    child.stderr.on("data", (chunk) => stderr += chunk)
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const Marker = Schema.parseJson(
  Schema.Struct({ attempt_id: Schema.String, request_id: Schema.String, call_id: Schema.String })
)

const readMarkers = (file: string) =>
  fs.existsSync(file)
    ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) =>
      Schema.decodeUnknownSync(Marker)(line)
    )
    : []

const everything = 1_000_000

/** The workload step a request id belongs to: fiber f > 0 of the concurrent workload appends `.f` to it. */
const stepOf = (request_id: string) => request_id.replace(/\.\d+$/, "")

/** Every committed record, in commit (cursor) order. */
const committed = Effect.gen(function*() {
  const source = yield* EvidenceProjectionSource
  const store = yield* EvidenceStore
  const { receipts } = yield* source.scan(null, everything)
  const byChain = new Map<string, ReadonlyArray<StoredRecord>>()
  for (const chain_id of yield* store.chains) {
    byChain.set(chain_id, Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id))))
  }
  return receipts.map((receipt) => byChain.get(receipt.chain_id)!.find((r) => r.record_id === receipt.record_id)!)
})

interface Operation {
  readonly operation_id: string
  readonly chain_id: string
  readonly started: { readonly request_id: string; readonly attempt_id: string } | undefined
  readonly terminals: ReadonlyArray<string>
}

const operationsOf = (records: ReadonlyArray<StoredRecord>): Map<string, Operation> => {
  const operations = new Map<string, Operation>()
  for (const record of records) {
    if (record.operation_id === null) continue
    const known = operations.get(record.operation_id) ??
      { operation_id: record.operation_id, chain_id: record.chain_id, started: undefined, terminals: [] }
    const payload = JSON.parse(record.payload_json)
    operations.set(record.operation_id, {
      ...known,
      started: record.record_type === "operation_started"
        ? { request_id: payload.request_id, attempt_id: payload.attempt_id }
        : known.started,
      terminals: terminalTypes.has(record.record_type) ? [...known.terminals, record.record_type] : known.terminals
    })
  }
  return operations
}

/**
 * Recover what a (killed) child left on `filename` and audit the result; returns counts for the caller. With several
 * fibers the commit order is not the workload's, so what was committed at the kill is not checked against it.
 */
const recoverAndAudit = (filename: string, markersFile: string, kill: KillPoint | undefined, fibers = 1) =>
  Effect.gen(function*() {
    const at = `${label(kill)}${fibers > 1 ? ` (${fibers} fibers)` : ""}`
    const inOrder = fibers === 1
    const store = yield* EvidenceStore
    const source = yield* EvidenceProjectionSource
    const state = yield* ProjectionStore
    const sql = yield* SqlClient.SqlClient
    const projectedIds = Effect.map(
      sql<{ record_id: string }>`SELECT record_id FROM projected_records`,
      (rows) => new Set(rows.map((row) => row.record_id))
    )

    // What the crash left: the projection and its cursor agree (rows and cursor commit together).
    const before = yield* committed
    const cursor = yield* state.projectionCursor(EvidenceProjector.defaultProjector)
    const pending = (yield* source.scan(cursor._tag === "Some" ? cursor.value : null, everything)).receipts
    const pendingIds = new Set<string>(pending.map((receipt) => receipt.record_id))
    const projectedBefore = yield* projectedIds
    assert.deepStrictEqual(
      [...projectedBefore].sort(),
      before.filter((r) => !pendingIds.has(r.record_id)).map((r) => r.record_id).sort(),
      `${at}: the projected rows are exactly the records up to the committed cursor`
    )
    if (kill?.target === "projection") {
      assert.strictEqual(cursor._tag === "Some", kill.when === "after" || kill.n > 1, `${at}: a cursor once committed`)
    }
    if (inOrder && kill?.target === "append") {
      const appended = counts.appendSizes.slice(0, kill.when === "after" ? kill.n : kill.n - 1)
      assert.strictEqual(before.length, sum(appended), `${at}: records committed`)
    }
    const lastAppended = inOrder && kill?.target === "append" && kill.when === "after" ? before.at(-1)! : undefined
    if (lastAppended !== undefined) {
      assert.isFalse(projectedBefore.has(lastAppended.record_id), `${at}: the last append was not projected yet`)
    }
    const open = [...operationsOf(before).values()]
      .filter((op) => op.started !== undefined && op.terminals.length === 0)
      .map((op) => op.operation_id)

    // Recovery: drain, close each orphan as ambiguous, drain again.
    const report = yield* EvidenceProjector.recover()
    assert.deepStrictEqual(report.unclosable, [], `${at}: nothing unclosable`)
    assert.deepStrictEqual([...report.closed].sort(), [...open].sort(), `${at}: exactly the open operations closed`)
    const after = yield* committed
    assert.deepStrictEqual(
      after.slice(0, before.length).map((r) => r.record_id),
      before.map((r) => r.record_id),
      `${at}: recovery only appends`
    )
    const added = after.slice(before.length)
    assert.deepStrictEqual(
      added.map((r) => [r.record_type, r.operation_id]).sort(),
      open.map((id) => ["external_result_ambiguous", id]).sort(),
      `${at}: recovery appends one external_result_ambiguous per open operation and nothing else`
    )

    // Every chain verifies.
    for (const chain_id of yield* store.chains) {
      const verified = yield* store.verify(chain_id)
      assert.isTrue(verified.valid, `${at}: chain ${chain_id} verifies (${verified.failure_code})`)
    }

    // Every started operation has exactly one terminal: the workload's, or ambiguous when the crash cut it.
    const markers = readMarkers(markersFile)
    const markedAttempts = new Map<string, number>()
    for (const marker of markers) {
      markedAttempts.set(marker.attempt_id, (markedAttempts.get(marker.attempt_id) ?? 0) + 1)
    }
    const operations = operationsOf(after)
    const started = [...operations.values()].filter((op) => op.started !== undefined)
    for (const op of operations.values()) {
      if (op.started === undefined) {
        assert.deepStrictEqual(op.terminals, [], `${at}: an operation that never started has no terminal record`)
        continue
      }
      const { attempt_id, request_id } = op.started
      assert.strictEqual(op.terminals.length, 1, `${at}: ${request_id} has exactly one terminal record`)
      const wasOpen = open.includes(op.operation_id)
      const terminal = op.terminals[0]!
      assert.strictEqual(
        terminal,
        wasOpen ? "external_result_ambiguous" : expectedTerminal.get(stepOf(request_id)),
        `${at}: ${request_id} closes with the workload's terminal record, or ambiguous if the crash cut it`
      )
      const marked = markedAttempts.get(attempt_id) ?? 0
      assert.isAtMost(marked, 1, `${at}: ${request_id}'s callable ran at most once`)
      if (terminal === "callable_completed" || terminal === "callable_failed") {
        assert.strictEqual(marked, 1, `${at}: ${request_id} has a call result only if its callable ran`)
      }
      if (!callableRequests.has(stepOf(request_id))) {
        assert.strictEqual(marked, 0, `${at}: ${request_id} is never called`)
      }
    }
    const startedAttempts = new Set(started.map((op) => op.started!.attempt_id))
    for (const marker of markers) {
      assert.isTrue(startedAttempts.has(marker.attempt_id), `${at}: ${marker.request_id} ran only after it started`)
    }
    assert.strictEqual(new Set(markers.map((m) => m.call_id)).size, markers.length, `${at}: unique call ids`)
    assert.isAtMost(markers.length, started.length, `${at}: no more calls than started operations`)

    // The projection matches the evidence.
    assert.strictEqual(yield* state.projectedRecordCount(), after.length, `${at}: every record projected`)
    if (lastAppended !== undefined) {
      assert.isTrue((yield* projectedIds).has(lastAppended.record_id), `${at}: at-least-once discovery`)
    }
    assert.deepStrictEqual(yield* state.projectedOperations({ open_only: true }), [], `${at}: no open operation`)
    const projected = yield* state.projectedOperations()
    assert.deepStrictEqual(
      projected.filter((op) => op.started_record_id !== null).map((op) => `${op.operation_id} ${op.terminal_type}`)
        .sort(),
      started.map((op) => `${op.operation_id} ${op.terminals[0]}`).sort(),
      `${at}: projected terminal types are the chains'`
    )
    assert.isTrue(projected.every((op) => op.terminal_count <= 1), `${at}: one projected terminal per operation`)

    // Recovery again is a no-op; a replay from the start under another projector name inserts nothing.
    const again = yield* EvidenceProjector.recover()
    assert.deepStrictEqual(
      [again.drained.inserted, again.closed.length, again.unclosable.length],
      [0, 0, 0],
      `${at}: recovering twice changes nothing`
    )
    assert.strictEqual((yield* committed).length, after.length, `${at}: no new record on the second recovery`)
    const replay = yield* EvidenceProjector.drain({ projector: "replay" })
    assert.deepStrictEqual([replay.inserted, replay.unchanged], [0, after.length], `${at}: replay is idempotent`)
    const openCalled = open.filter((id) => markedAttempts.has(operations.get(id)!.started!.attempt_id)).length
    return { records: after.length, open: open.length, openCalled, markers: markers.length, pending: pending.length }
  }).pipe(Effect.provide(Embedded.layerStores({ filename, synchronous: "NORMAL" })))

/** One crash: a fresh copy of the template, the child killed at `kill`, recovery and audit here. */
const crash = (kill: KillPoint, fibers = 1) =>
  Effect.acquireUseRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(work, "kill-"))),
    (dir) =>
      Effect.gen(function*() {
        const filename = path.join(dir, "writ.db")
        fs.copyFileSync(template, filename)
        const markers = path.join(dir, "markers.ndjson")
        const exit = yield* runChild(filename, markers, kill, fibers)
        assert.deepStrictEqual(
          [exit.code, exit.signal],
          [null, "SIGKILL"],
          `${label(kill)}: the child dies by SIGKILL (${exit.stderr})`
        )
        assert.notInclude(
          exit.stderr,
          "evidence commits stay on the main thread",
          `${label(kill)}: the thread stayed up`
        )
        return yield* recoverAndAudit(filename, markers, kill, fibers)
      }),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** How many commits of each kind the uninstrumented workload makes. */
// The uninstrumented run's commits: appends (with how many records each committed) and projections.
let counts: { appends: number; projections: number; appendSizes: ReadonlyArray<number> } = {
  appends: 0,
  projections: 0,
  appendSizes: []
}

const sum = (values: ReadonlyArray<number>) => values.reduce((total, value) => total + value, 0)

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), "writ-gate14-"))
  script = path.join(work, "crash-child.cjs")
  await bundleChild({ entry: path.join(root, "test/fixtures/crash-child.ts") }, script)
  // The template: migrated, the policy installed, no evidence (a child killed before its first append).
  template = path.join(work, "template.db")
  const exit = await Effect.runPromise(
    runChild(template, path.join(work, "template.markers"), { target: "append", when: "before", n: 1 })
  )
  if (exit.signal !== "SIGKILL") throw new Error(`template child: ${exit.code} ${exit.signal} ${exit.stderr}`)
  // The uninstrumented run on a fresh file counts the kill points.
  const full = await Effect.runPromise(
    runChild(path.join(work, "count.db"), path.join(work, "count.markers"), undefined)
  )
  if (full.code !== 0) throw new Error(`uninstrumented child: ${full.code} ${full.signal} ${full.stderr}`)
  counts = JSON.parse(full.stdout.trim())
  await Effect.runPromise(
    Effect.provide(
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql`PRAGMA wal_checkpoint(TRUNCATE)`),
      Embedded.layerStores({ filename: template, synchronous: "NORMAL" })
    )
  )
}, 120_000)

afterAll(() => {
  if (work !== "") fs.rmSync(work, { recursive: true, force: true })
})

describe("gate 14: projection recovery", () => {
  it.live(
    "the uninstrumented workload runs to the end on a fresh file, and recovering it changes nothing",
    () =>
      Effect.acquireUseRelease(
        Effect.sync(() => fs.mkdtempSync(path.join(work, "full-"))),
        (dir) =>
          Effect.gen(function*() {
            const markers = path.join(dir, "markers.ndjson")
            const filename = path.join(dir, "writ.db")
            const exit = yield* runChild(filename, markers, undefined)
            assert.strictEqual(exit.code, 0, exit.stderr)
            assert.deepStrictEqual(JSON.parse(exit.stdout.trim()), counts, "the workload is deterministic")
            const audit = yield* recoverAndAudit(filename, markers, undefined)
            assert.deepStrictEqual(audit, {
              records: sum(counts.appendSizes),
              open: 0,
              openCalled: 0,
              markers: callableRequests.size,
              pending: 0
            })
          }),
        (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
      ),
    60_000
  )

  it.live(
    "a SIGKILL before or after every append and every projection commit: recovery verifies, closes, projects, never repeats a call",
    () =>
      Effect.gen(function*() {
        const points: Array<KillPoint> = []
        for (const target of ["append", "projection"] as const) {
          const total = target === "append" ? counts.appends : counts.projections
          for (let n = 1; n <= total; n++) {
            for (const when of ["before", "after"] as const) points.push({ target, when, n })
          }
        }
        const started = Date.now()
        const audits = yield* Effect.forEach(points, (kill) => crash(kill), {
          concurrency: Math.min(4, Math.max(2, os.cpus().length))
        })
        const seconds = (Date.now() - started) / 1000
        console.log(`gate 14: ${points.length} kill points in ${seconds.toFixed(1)} s`)
        assert.isAtLeast(points.length, 200)
        // The kill points reach every situation recovery must handle.
        assert.isTrue(audits.some((audit) => audit.open > 0), "some crash leaves an open operation")
        assert.isTrue(audits.some((audit) => audit.pending > 0), "some crash leaves committed records unprojected")
        assert.isTrue(
          audits.some((audit) => audit.openCalled > 0),
          "some crash cuts an operation after its call ran"
        )
      }),
    1_500_000
  )

  it.live(
    "with 4 fibers committing on the evidence commit thread, a SIGKILL before or after appends across the run: the same audit holds",
    () =>
      Effect.gen(function*() {
        const fibers = 4
        const full = yield* runChild(
          path.join(work, "concurrent.db"),
          path.join(work, "concurrent.markers"),
          undefined,
          fibers
        )
        assert.strictEqual(full.code, 0, full.stderr)
        const { appends, threaded } = JSON.parse(full.stdout.trim())
        assert.isTrue(threaded, "evidence commits ran on the commit thread")
        assert.isAtLeast(appends, fibers * counts.appends - fibers)
        const points = Array.from({ length: 12 }, (_, i) => 1 + Math.floor(i * (appends - 1) / 11)).flatMap((n) =>
          (["before", "after"] as const).map((when): KillPoint => ({ target: "append", when, n }))
        )
        const audits = yield* Effect.forEach(points, (kill) => crash(kill, fibers), { concurrency: 2 })
        assert.isTrue(audits.some((audit) => audit.open > 0), "some crash leaves an open operation")
      }),
    600_000
  )
})
