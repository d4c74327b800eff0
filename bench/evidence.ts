/**
 * The `evidence` benchmark, on SQLite temp files in WAL mode at synchronous=FULL throughout: governed execute with
 * durable evidence (concurrency 1 and 64) against raw better-sqlite3 appends at the same durability, one commit per
 * append and batched, and raw appends in the governed commit pattern alone (the ceiling at c=1); chain verification against raw SHA-256 over the same bytes; and projector replay time and
 * peak RSS as the record count grows to 1M (`WRIT_BENCH_PROJECTOR_MAX` lowers the top size).
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Either, Layer, ManagedRuntime, Schema } from "effect"
import { spawnSync } from "node:child_process"
import { hash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as MemoryEvidenceStore from "../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as MemoryStateStore from "../adapters/memory/MemoryStateStore.ts"
import * as Sqlite from "../adapters/node/Sqlite.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import * as Canonical from "../core/base/Canonical.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import { ActionRef, PrincipalRef } from "../core/base/Refs.ts"
import type { PolicySnapshotRef } from "../core/base/Refs.ts"
import * as Time from "../core/base/Time.ts"
import * as Evidence from "../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../core/evidence/EvidenceProjector.ts"
import { EvidenceProjectionSource, EvidenceStore } from "../core/evidence/EvidenceStore.ts"
import * as Governance from "../core/evidence/Governance.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../core/execution/ExecutionScope.ts"
import * as Governed from "../core/execution/Governed.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import * as PermissionPolicy from "../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../core/policy/PolicySnapshotStore.ts"
import { ProjectionStore } from "../core/state/ProjectionStore.ts"
import * as Embedded from "../runtime/Embedded.ts"
import { addAction, declaration } from "./internal/governedFixture.ts"
import type { Benchmark } from "./internal/measure.ts"
import { collect, loop, median } from "./internal/measure.ts"

const ROUNDS = 5
const WARMUP = 1
const C1_ACTIONS = 100
const C1_RAW_APPENDS = 400
const C1_TARGET = 0.6
const FIBERS = 64
const C64_ACTIONS_PER_FIBER = 16
const WARMUP_ACTIONS_PER_FIBER = 24
const RAW_BATCH = 64
const RAW_BATCHES = 200
const VERIFY_RECORDS = 20_000
const VERIFY_ROUNDS = 5
const CHAIN_LENGTH = 500
const GENERATE_TRANSACTION = 20_000
const PROJECTOR_SIZES = [10_000, 100_000, 1_000_000] as const
const RSS_SAMPLE_MS = 20

// better-sqlite3 has no bundled types; this is the little of it the raw side uses.
interface RawStatement {
  readonly run: (...params: ReadonlyArray<unknown>) => unknown
  readonly all: (...params: ReadonlyArray<unknown>) => Array<unknown>
}
interface RawDatabase {
  readonly pragma: (source: string, options?: { readonly simple?: boolean }) => unknown
  readonly exec: (source: string) => unknown
  readonly prepare: (source: string) => RawStatement
  readonly close: () => unknown
}
const requireCjs = createRequire(import.meta.url)
const Database = requireCjs("better-sqlite3") as new(filename: string) => RawDatabase

// --------------------------------------------------------------------------------------------
// The governed side: the real governed executor over the embedded SQLite stores
// --------------------------------------------------------------------------------------------

const storesLayer = (filename: string) => Embedded.layerStores({ filename, synchronous: "FULL" })

// The same stores in memory: what the governed executor costs with no SQLite at all.
const memoryStoresLayer = Governance.layerWriter.pipe(
  Layer.provideMerge(
    Layer.mergeAll(
      MemoryEvidenceStore.layer,
      MemoryStateStore.layer,
      MemoryPolicySnapshotStore.layer,
      MemoryExecutorRegistry.layer
    )
  ),
  Layer.provideMerge(Embedded.layerPlatform)
)

const governedOn = <E, R>(stores: Layer.Layer<R, E>) =>
  Governed.layer().pipe(
    Layer.provideMerge(Layer.merge(ActionRegistry.layerWith([addAction]), InProcessBackend.layer)),
    Layer.provideMerge(stores)
  )

const memoryRuntime = () => ManagedRuntime.make(governedOn(memoryStoresLayer))

/**
 * The in-memory evidence store, each commit also written raw with better-sqlite3 to a migrated file at the same
 * durability, in the same step (a batch of several in one BEGIN IMMEDIATE .. COMMIT): the governed executor's own
 * work with exactly its commits interleaved, as evidence-as-control-flow requires, and no storage layer at all.
 */
const rawCommittingStore = (filename: string) =>
  Layer.scopedContext(Effect.gen(function*() {
    const store = yield* MemoryEvidenceStore.make
    const db = yield* Effect.acquireRelease(
      Effect.sync(() => new Database(filename)),
      (db) => Effect.sync(() => db.close())
    )
    db.pragma("journal_mode = WAL")
    db.pragma("synchronous = FULL")
    const insert = db.prepare(INSERT)
    const commitRaw = (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
      if (records.length > 1) db.exec("BEGIN IMMEDIATE")
      for (const r of records) {
        insert.run(
          r.record_id,
          r.record_type,
          r.chain_id,
          r.operation_id,
          r.sequence,
          r.policy_id,
          r.policy_version,
          r.payload_json,
          r.payload_digest,
          r.previous_chain_hash,
          r.chain_hash,
          r.supersedes_record_id,
          r.created_at,
          r.hash_algorithm
        )
      }
      if (records.length > 1) db.exec("COMMIT")
    }
    const now = store.appendAll.now!
    const appendAll = Object.assign(
      (records: ReadonlyArray<Evidence.EvidenceRecord>) =>
        Effect.tap(store.appendAll(records), () => Effect.sync(() => commitRaw(records))),
      {
        now: (records: ReadonlyArray<Evidence.EvidenceRecord>) => {
          const placed = now(records)
          if (placed !== undefined && Either.isRight(placed)) commitRaw(records)
          return placed
        }
      }
    )
    return Context.make(EvidenceStore, { ...store, appendAll }).pipe(Context.add(EvidenceProjectionSource, store))
  }))

const interleavedRuntime = (filename: string) =>
  ManagedRuntime.make(governedOn(Governance.layerWriter.pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        rawCommittingStore(filename),
        MemoryStateStore.layer,
        MemoryPolicySnapshotStore.layer,
        MemoryExecutorRegistry.layer
      )
    ),
    Layer.provideMerge(Embedded.layerPlatform)
  )))

const install = Effect.gen(function*() {
  const store = yield* PolicySnapshotStore
  const policy = Either.getOrThrow(PermissionPolicy.decode(declaration))
  const snapshot = yield* Effect.orDie(PolicySnapshot.compile(policy))
  yield* store.put(snapshot)
  yield* store.activate("bench", "1", "bench", Time.fromMicros(0))
  return { policy_id: "bench", version: "1", digest: snapshot.digest } satisfies PolicySnapshotRef
})

interface Services {
  readonly executor: Context.Tag.Service<typeof ActionExecutor.ActionExecutor>
  readonly ids: IdGenerator.IdGenerator.Service
}

/** One governed call as an agent makes it: a fresh scope, context and request, inside the fiber's boundary. */
const governedCall = (services: Services, ref: PolicySnapshotRef, boundary: Governance.TaskBoundary) =>
  Effect.gen(function*() {
    const { executor, ids } = services
    const scope = EphemeralOperation.make({ scope_id: yield* ids.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: PrincipalRef.make({ id: "bench" }),
      effect_backend: InProcessBackend.make.ref,
      policy_snapshot: ref
    })
    const request = ExecutionRequest.make({
      request_id: yield* ids.uuid,
      action: ActionRef.make({ name: "bench.add" }),
      arguments: { a: 1, b: 2 },
      execution_scope: scope
    })
    const outcome = yield* executor.execute(request, { context, boundary })
    if (outcome._tag !== "succeeded" || outcome.result !== 3) {
      return yield* Effect.dieMessage(`evidence bench: expected a succeeded outcome with result 3, got ${outcome._tag}`)
    }
  }).pipe(Effect.provideService(IdGenerator.IdGenerator, services.ids))

const Position = Schema.Struct({ position: Schema.NullOr(Schema.Number) })

/** The last committed evidence position (rows are append-only, so the count of appends between two reads). */
const lastPosition = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    Effect.flatMap(
      sql`SELECT MAX(position) AS position FROM evidence_records`,
      Schema.decodeUnknown(Schema.Array(Position))
    ),
    (rows) => rows[0]?.position ?? 0
  ))

/** `journal_mode` and `synchronous` as the connection reports them. */
const durabilityOf = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.gen(function*() {
    const journal = yield* sql.unsafe<{ journal_mode: string }>("PRAGMA journal_mode")
    const synchronous = yield* sql.unsafe<{ synchronous: number }>("PRAGMA synchronous")
    return describeDurability(journal[0]?.journal_mode, synchronous[0]?.synchronous)
  }))

const describeDurability = (journal: unknown, synchronous: unknown) =>
  `journal_mode=${String(journal)}, synchronous=${
    ["OFF", "NORMAL", "FULL", "EXTRA"][Number(synchronous)] ?? String(synchronous)
  }`

const Row = Evidence.StoredRecord

type Row = typeof Row.Type

const COLUMNS = `record_id, record_type, chain_id, operation_id, sequence, policy_id, policy_version, payload_json,
  payload_digest, previous_chain_hash, chain_hash, supersedes_record_id, created_at, hash_algorithm`

/** The records of the first governed operation, in chain order: the shape every generated or raw row copies. */
const firstOperation = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.flatMap(
    sql`SELECT ${sql.unsafe(COLUMNS)}
      FROM evidence_records WHERE operation_id = (SELECT operation_id FROM evidence_records
      WHERE record_type = 'operation_started' ORDER BY position LIMIT 1) ORDER BY sequence`,
    Schema.decodeUnknown(Schema.Array(Row))
  ))

// --------------------------------------------------------------------------------------------
// The raw side: better-sqlite3 directly on the same migrated table, at the same durability
// --------------------------------------------------------------------------------------------

const INSERT = `INSERT INTO evidence_records (record_id, record_type, chain_id, operation_id, sequence, policy_id,
  policy_version, payload_json, payload_digest, previous_chain_hash, chain_hash, supersedes_record_id, created_at,
  hash_algorithm) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

const HEAD = `SELECT sequence, chain_hash FROM evidence_records WHERE chain_id = ? ORDER BY sequence DESC LIMIT 1`

// A governed operation under the bench's one-gate policy commits three times (stage 4's policy_bound and
// operation_started, the pre-call checkpoint's gate result, the terminal record); the pattern's chain is its own.
const GOVERNED_COMMITS = [2, 1, 1] as const
const PATTERN_CHAIN = -1

/**
 * Raw appends of rows shaped like the governed records, onto `chains` chains in turn (as many as the governed side
 * appends to), with fresh ids and random chain hashes drawn from a pool made beforehand: the same index work per row
 * as real evidence (random record ids and hashes, interleaved chains), none of the governance.
 */
const makeRaw = (filename: string, templates: ReadonlyArray<Row>) => {
  const db = new Database(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  const insert = db.prepare(INSERT)
  let hashes: Array<string> = []
  const head = db.prepare(HEAD)
  const chains = new Map<number, { readonly chain_id: string; sequence: number; previous: string | null }>()
  const stateOf = (chain: number) => {
    let state = chains.get(chain)
    if (state === undefined) {
      state = { chain_id: mintId(), sequence: 0, previous: null }
      chains.set(chain, state)
    }
    return state
  }
  const append = (chain: number) => {
    const state = stateOf(chain)
    const t = templates[state.sequence % templates.length]!
    const chain_hash = hashes.pop()!
    insert.run(
      mintId(),
      t.record_type,
      state.chain_id,
      t.operation_id,
      state.sequence,
      t.policy_id,
      t.policy_version,
      t.payload_json,
      t.payload_digest,
      state.previous,
      chain_hash,
      null,
      t.created_at,
      t.hash_algorithm
    )
    state.sequence++
    state.previous = chain_hash
  }
  return {
    durability: describeDurability(
      db.pragma("journal_mode", { simple: true }),
      db.pragma("synchronous", { simple: true })
    ),
    /** Draw the chain hashes the next `appends` appends use, outside the timed run. */
    prepare: (appends: number) => {
      hashes = Array.from({ length: appends }, () => randomBytes(32).toString("hex"))
    },
    /** Each append an INSERT in its own BEGIN IMMEDIATE .. COMMIT, all on one chain. */
    oneCommitEach: (appends: number) => {
      for (let i = 0; i < appends; i++) {
        db.exec("BEGIN IMMEDIATE")
        append(0)
        db.exec("COMMIT")
      }
    },
    /**
     * The commits governed operations make, with none of their other work: per operation, commits of
     * `GOVERNED_COMMITS` appends on one chain, each its chain's head looked up (the store's compare-and-append does
     * that in each insert), a lone append one statement, several in one BEGIN IMMEDIATE .. COMMIT.
     */
    governedPattern: (operations: number) => {
      for (let o = 0; o < operations; o++) {
        for (const size of GOVERNED_COMMITS) {
          if (size > 1) db.exec("BEGIN IMMEDIATE")
          head.all(stateOf(PATTERN_CHAIN).chain_id)
          for (let i = 0; i < size; i++) append(PATTERN_CHAIN)
          if (size > 1) db.exec("COMMIT")
        }
      }
    },
    /** `size` INSERTs per BEGIN IMMEDIATE .. COMMIT, onto `spread` chains in turn. */
    batched: (batches: number, size: number, spread: number) => {
      for (let b = 0; b < batches; b++) {
        db.exec("BEGIN IMMEDIATE")
        for (let i = 0; i < size; i++) append(1 + ((b * size + i) % spread))
        db.exec("COMMIT")
      }
    },
    close: () => db.close()
  }
}

// --------------------------------------------------------------------------------------------
// Side-by-side rates
// --------------------------------------------------------------------------------------------

interface Work {
  readonly ops: number
  readonly appends: number
}

interface Side {
  /** Untimed setup before each run. */
  readonly prepare?: () => void
  readonly run: () => Promise<Work>
}

interface Rate {
  readonly opsPerSecond: number
  readonly appendsPerSecond: number
  readonly appendsPerOp: number
  /** Process CPU time (every thread) per op, in µs: on a shared machine, work done as against time waited. */
  readonly cpuPerOp: number
}

// No forced GC before a round: it shrinks V8's heap, and the side that allocates (governed) then pays for regrowing
// it; a long-running process never does that (governed c=1 spent 4.1 ms of CPU per action that way, 2.5 ms without).
const rate = async (side: Side): Promise<Rate> => {
  side.prepare?.()
  const cpu = process.cpuUsage()
  const start = performance.now()
  const work = await side.run()
  const seconds = (performance.now() - start) / 1000
  const used = process.cpuUsage(cpu)
  return {
    opsPerSecond: work.ops / seconds,
    appendsPerSecond: work.appends / seconds,
    appendsPerOp: work.appends / work.ops,
    cpuPerOp: (used.user + used.system) / work.ops
  }
}

/** Warm both sides up, then alternate which goes first, round by round; the median of each side's rates. */
const alternate = async (a: Side, b: Side) => {
  for (let i = 0; i < WARMUP; i++) {
    a.prepare?.()
    await a.run()
    b.prepare?.()
    await b.run()
  }
  const rounds: Array<{ readonly a: Rate; readonly b: Rate }> = []
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2 === 0) {
      const first = await rate(a)
      rounds.push({ a: first, b: await rate(b) })
    } else {
      const first = await rate(b)
      rounds.push({ a: await rate(a), b: first })
    }
  }
  const summary = (pick: (round: { readonly a: Rate; readonly b: Rate }) => Rate): Rate => ({
    opsPerSecond: median(rounds.map((round) => pick(round).opsPerSecond)),
    appendsPerSecond: median(rounds.map((round) => pick(round).appendsPerSecond)),
    appendsPerOp: median(rounds.map((round) => pick(round).appendsPerOp)),
    cpuPerOp: median(rounds.map((round) => pick(round).cpuPerOp))
  })
  return { a: summary((round) => round.a), b: summary((round) => round.b), rounds }
}

const perSecond = (value: number) => value.toFixed(value < 100 ? 1 : 0)

/** Governed c=1 over in-memory stores, warmed up: the executor's own time per action, with no commit to wait for. */
const memorySide = async (memory: ReturnType<typeof memoryRuntime>) => {
  const ref = await memory.runPromise(install)
  const services: Services = {
    executor: await memory.runPromise(ActionExecutor.ActionExecutor),
    ids: await memory.runPromise(IdGenerator.IdGenerator)
  }
  const boundaries = await memory.runPromise(
    Effect.forEach(Array.from({ length: FIBERS }), () => Governance.openBoundary(ref))
  )
  const length = Effect.flatMap(
    EvidenceStore,
    (store) =>
      Effect.reduce(
        boundaries,
        0,
        (sum, boundary) =>
          Effect.map(
            store.head(boundary.chain_id),
            (head) => sum + (head._tag === "Some" ? head.value.sequence + 1 : 0)
          )
      )
  )
  const run = async (fibers: number, perFiber: number) => {
    const before = await memory.runPromise(length)
    await memory.runPromise(
      Effect.forEach(
        boundaries.slice(0, fibers),
        (boundary) => loop(() => governedCall(services, ref, boundary), perFiber),
        { concurrency: "unbounded", discard: true }
      )
    )
    return { ops: fibers * perFiber, appends: (await memory.runPromise(length)) - before }
  }
  await run(FIBERS, WARMUP_ACTIONS_PER_FIBER)
  return {
    one: { run: () => run(1, C1_ACTIONS) } satisfies Side,
    many: { run: () => run(FIBERS, C64_ACTIONS_PER_FIBER) } satisfies Side
  }
}

/**
 * What the c=1 target leaves the executor: the time per action the target allows, less the time the governed commit
 * pattern takes alone, against what the executor takes on in-memory stores.
 */
const budget = (pattern: Rate, onMemory: Rate, appendsPerOperation: number) => {
  const allowed = 1e6 * appendsPerOperation / (C1_TARGET * pattern.appendsPerSecond)
  const commits = 1e6 * appendsPerOperation / pattern.appendsPerSecond
  const executor = 1e6 / onMemory.opsPerSecond
  console.log(
    `  c=1 budget: ${C1_TARGET}x of the commit pattern allows ${
      allowed.toFixed(0)
    } µs/action; the pattern alone takes ${commits.toFixed(0)}, leaving ${
      (allowed - commits).toFixed(0)
    } µs for all other work; the executor alone (in memory) takes ${executor.toFixed(0)}`
  )
}

/** Governed execute at concurrency 1 and 64 against raw appends; returns the first operation's records. */
const appends = async (dir: string) => {
  const runtime = ManagedRuntime.make(governedOn(storesLayer(path.join(dir, "governed.db"))))
  const memory = memoryRuntime()
  let interleaved: ReturnType<typeof interleavedRuntime> | undefined
  let raw: ReturnType<typeof makeRaw> | undefined
  try {
    const ref = await runtime.runPromise(install)
    const governedDurability = await runtime.runPromise(durabilityOf)
    const services: Services = {
      executor: await runtime.runPromise(ActionExecutor.ActionExecutor),
      ids: await runtime.runPromise(IdGenerator.IdGenerator)
    }
    const governed = (boundaries: ReadonlyArray<Governance.TaskBoundary>, perFiber: number): Side => ({
      run: async () => {
        const before = await runtime.runPromise(lastPosition)
        await runtime.runPromise(
          Effect.forEach(boundaries, (boundary) => loop(() => governedCall(services, ref, boundary), perFiber), {
            concurrency: "unbounded",
            discard: true
          })
        )
        return { ops: boundaries.length * perFiber, appends: (await runtime.runPromise(lastPosition)) - before }
      }
    })
    const one = [await runtime.runPromise(Governance.openBoundary(ref))]
    const inMemory = await memorySide(memory)
    const many = await runtime.runPromise(
      Effect.forEach(Array.from({ length: FIBERS }), () => Governance.openBoundary(ref))
    )
    await governed(one, 1).run()
    // Warm the whole governed path up before either pair is timed (c=1 is timed first): V8 is still compiling it
    // for the first ~1,000 actions, and its compiler threads take CPU from the timed ones.
    await governed(many, WARMUP_ACTIONS_PER_FIBER).run()
    const templates = await runtime.runPromise(firstOperation)
    // The raw side's file is migrated by adapters/node/Sqlite.ts too: the same table, indexes and triggers.
    await migrate(path.join(dir, "raw.db"))
    raw = makeRaw(path.join(dir, "raw.db"), templates)
    const rawDb = raw

    const oneCommitEach: Side = {
      prepare: () => rawDb.prepare(C1_RAW_APPENDS),
      run: () => {
        rawDb.oneCommitEach(C1_RAW_APPENDS)
        return Promise.resolve({ ops: C1_RAW_APPENDS, appends: C1_RAW_APPENDS })
      }
    }
    const c1 = await alternate(oneCommitEach, governed(one, C1_ACTIONS))
    const appendsPerOperation = GOVERNED_COMMITS.reduce((sum, size) => sum + size, 0)
    if (appendsPerOperation !== templates.length) {
      throw new Error(
        `evidence bench: a governed operation appends ${templates.length} records, the pattern assumes ${appendsPerOperation}`
      )
    }
    const pattern = await alternate(oneCommitEach, {
      prepare: () => rawDb.prepare(C1_ACTIONS * appendsPerOperation),
      run: () => {
        rawDb.governedPattern(C1_ACTIONS)
        return Promise.resolve({ ops: C1_ACTIONS * appendsPerOperation, appends: C1_ACTIONS * appendsPerOperation })
      }
    })
    const onMemory = await alternate(oneCommitEach, inMemory.one)
    await migrate(path.join(dir, "interleaved.db"))
    interleaved = interleavedRuntime(path.join(dir, "interleaved.db"))
    const inStep = await alternate(oneCommitEach, (await memorySide(interleaved)).one)
    const batched: Side = {
      prepare: () => rawDb.prepare(RAW_BATCHES * RAW_BATCH),
      run: () => {
        rawDb.batched(RAW_BATCHES, RAW_BATCH, FIBERS)
        return Promise.resolve({ ops: RAW_BATCHES * RAW_BATCH, appends: RAW_BATCHES * RAW_BATCH })
      }
    }
    const c64 = await alternate(batched, governed(many, C64_ACTIONS_PER_FIBER))
    const c64OnMemory = await alternate(batched, inMemory.many)
    const bytes = templates.reduce((sum, row) => sum + row.payload_json.length, 0) / templates.length
    console.log(
      `evidence appends: SQLite temp files, governed (${governedDurability}) and raw better-sqlite3 (${raw.durability})`
    )
    console.log(
      `  policy: 1 gate, 2 rules; action bench.add in-process; records per operation: ${
        templates.map((row) => row.record_type).join(", ")
      } (mean payload ${bytes.toFixed(0)} chars)`
    )
    console.log(
      `  ${ROUNDS} alternating rounds per pair after ${WARMUP} warm-up, medians; CPU is the process's (all threads)`
    )
    const rawLine = (label: string, rate: Rate) =>
      console.log(
        `  ${label.padEnd(56)} ${perSecond(rate.appendsPerSecond).padStart(6)} appends/s, CPU ${
          rate.cpuPerOp.toFixed(0)
        } µs/append`
      )
    const governedLine = (label: string, rate: Rate) =>
      console.log(
        `  ${label.padEnd(56)} ${perSecond(rate.appendsPerSecond).padStart(6)} appends/s, ${
          perSecond(rate.opsPerSecond)
        } actions/s, ${rate.appendsPerOp.toFixed(2)} appends/action, CPU ${rate.cpuPerOp.toFixed(0)} µs/action`
      )
    const rounds = (pairs: ReadonlyArray<{ readonly a: Rate; readonly b: Rate }>) =>
      console.log(
        `  per round (raw / governed appends/s): ${
          pairs.map((r) => `${perSecond(r.a.appendsPerSecond)}/${perSecond(r.b.appendsPerSecond)}`).join(" ")
        }`
      )
    rawLine(`raw, one commit per append (${C1_RAW_APPENDS} per round):`, c1.a)
    governedLine(`governed c=1 (${C1_ACTIONS} actions per round):`, c1.b)
    rounds(c1.rounds)
    const ceiling = pattern.b.appendsPerSecond / pattern.a.appendsPerSecond
    const c1Ratio = c1.b.appendsPerSecond / c1.a.appendsPerSecond
    rawLine(`raw, governed commit pattern (${GOVERNED_COMMITS.join("+")} per operation):`, pattern.b)
    console.log(
      `  the commit pattern alone reaches ${ceiling.toFixed(2)}x of one commit per append (its own pair of rounds); ` +
        `governed c=1 reaches ${(c1Ratio / ceiling).toFixed(2)} of that ceiling`
    )
    governedLine(`governed c=1 on in-memory stores (no SQLite; ${C1_ACTIONS} per round):`, onMemory.b)
    budget(pattern.b, onMemory.b, appendsPerOperation)
    governedLine(
      `governed c=1 on in-memory stores, its commits also made raw in step (the interleaved floor):`,
      inStep.b
    )
    const interleavedRatio = (c1.b.appendsPerSecond / c1.a.appendsPerSecond) /
      (inStep.b.appendsPerSecond / inStep.a.appendsPerSecond)
    console.log(
      `  governed c=1 on SQLite reaches ${
        interleavedRatio.toFixed(2)
      } of the interleaved floor (each against its own ` +
        `raw rounds); the floor itself reaches ${
          ((inStep.b.appendsPerSecond / inStep.a.appendsPerSecond) / ceiling).toFixed(2)
        } of the commit pattern`
    )
    rawLine(`raw, ${RAW_BATCH} appends per commit on ${FIBERS} chains (${RAW_BATCHES * RAW_BATCH} per round):`, c64.a)
    governedLine(
      `governed c=${FIBERS} (${FIBERS} fibers x ${C64_ACTIONS_PER_FIBER} actions, own boundary each):`,
      c64.b
    )
    rounds(c64.rounds)
    governedLine(`governed c=${FIBERS} on in-memory stores (no SQLite; same shape):`, c64OnMemory.b)
    console.log(
      `  c=${FIBERS} ceiling: the executor alone (in memory) reaches ${
        (c64OnMemory.b.appendsPerSecond / c64OnMemory.a.appendsPerSecond).toFixed(2)
      }x of the raw batched rate (its own pair of rounds); governed c=${FIBERS} on SQLite reaches ${
        (c64.b.appendsPerSecond / c64OnMemory.b.appendsPerSecond).toFixed(2)
      } of the in-memory rate`
    )
    return {
      templates,
      c1: c1Ratio / ceiling,
      c1OneCommit: c1Ratio,
      c1Interleaved: interleavedRatio,
      c64: c64.b.appendsPerSecond / c64.a.appendsPerSecond
    }
  } finally {
    raw?.close()
    await interleaved?.dispose()
    await memory.dispose()
    await runtime.dispose()
  }
}

// --------------------------------------------------------------------------------------------
// Generated chains: correctly hashed records written straight into a migrated database
// --------------------------------------------------------------------------------------------

const sha256 = (text: string) => hash("sha256", text, "hex")

const json = (value: string | null) => (value === null ? "null" : JSON.stringify(value))

/** The `sha256-v1` chain-hash input of a record: its fields but the chain hash, keys in code-point order. */
const chainInput = (r: Omit<Row, "chain_hash">) =>
  `{"chain_id":${json(r.chain_id)},"created_at":${json(r.created_at)},"hash_algorithm":${
    json(r.hash_algorithm)
  },"operation_id":${json(r.operation_id)},"payload_digest":${json(r.payload_digest)},"payload_json":${
    json(r.payload_json)
  },"policy_id":${json(r.policy_id)},"policy_version":${json(r.policy_version)},"previous_chain_hash":${
    json(r.previous_chain_hash)
  },"record_id":${json(r.record_id)},"record_type":${json(r.record_type)},"sequence":${r.sequence},` +
  `"supersedes_record_id":${json(r.supersedes_record_id)}}`

/** Create and migrate an empty database with adapters/node/Sqlite.ts. */
const migrate = async (filename: string) => {
  const runtime = ManagedRuntime.make(Sqlite.layer({ filename, synchronous: "FULL" }))
  await runtime.runPromise(Effect.void)
  await runtime.dispose()
}

interface Generated {
  readonly chains: number
  readonly last: { readonly chain_id: string; readonly head: string }
  readonly seconds: number
}

// The identifiers writ mints (time-ordered), so the generated tables' id indexes are shaped as writ's are.
const mintId = Effect.runSync(
  Effect.map(Effect.provide(IdGenerator.IdGenerator, IdGenerator.layerCrypto), (ids) => ids.uuidSync!)
)

/**
 * Append `total` records in chains of `chainLength` (operations of the templates' record types), hashed with
 * node:crypto and inserted in big transactions; `onRecord` sees each record's payload and chain-input text.
 */
const generate = (
  filename: string,
  total: number,
  chainLength: number,
  templates: ReadonlyArray<Row>,
  onRecord?: (payload_json: string, input: string) => void
): Generated => {
  const start = performance.now()
  const db = new Database(filename)
  // Setup only: the measured connections open the file again at synchronous=FULL.
  db.pragma("synchronous = OFF")
  const insert = db.prepare(INSERT)
  const payloads = templates.map((t) => ({ ...t, payload_digest: sha256(t.payload_json) }))
  const epoch = Time.toMicros(Time.Timestamp.make("2026-01-01T00:00:00.000000Z"))
  let chains = 0
  let chain_id = ""
  let operation_id = ""
  let previous: string | null = null
  let sequence = 0
  for (let i = 0; i < total;) {
    db.exec("BEGIN")
    for (const end = Math.min(total, i + GENERATE_TRANSACTION); i < end; i++) {
      if (i % chainLength === 0) {
        chain_id = mintId()
        previous = null
        sequence = 0
        chains++
      }
      const t = payloads[sequence % payloads.length]!
      if (sequence % payloads.length === 0) operation_id = mintId()
      const record = {
        record_id: mintId(),
        record_type: t.record_type,
        chain_id,
        operation_id,
        sequence,
        policy_id: t.policy_id,
        policy_version: t.policy_version,
        payload_json: t.payload_json,
        payload_digest: t.payload_digest,
        previous_chain_hash: previous,
        supersedes_record_id: null,
        created_at: Time.fromMicros(epoch + i),
        hash_algorithm: Evidence.hashAlgorithm
      }
      const input = chainInput(record)
      if (i === 0) {
        // The hand-built input must be exactly core's canonical text of the same fields.
        const canonical = Either.getOrThrow(Canonical.stringify(record))
        if (canonical !== input) throw new Error(`evidence bench: chain input differs:\n${canonical}\n${input}`)
      }
      onRecord?.(record.payload_json, input)
      const chain_hash = sha256(input)
      insert.run(
        record.record_id,
        record.record_type,
        chain_id,
        operation_id,
        sequence,
        record.policy_id,
        record.policy_version,
        record.payload_json,
        record.payload_digest,
        previous,
        chain_hash,
        null,
        record.created_at,
        record.hash_algorithm
      )
      previous = chain_hash
      sequence++
    }
    db.exec("COMMIT")
  }
  db.pragma("wal_checkpoint(TRUNCATE)")
  db.close()
  return { chains, last: { chain_id, head: previous ?? "" }, seconds: (performance.now() - start) / 1000 }
}

const removeDb = (filename: string) => {
  for (const suffix of ["", "-wal", "-shm"]) fs.rmSync(filename + suffix, { force: true })
}

// --------------------------------------------------------------------------------------------
// Verification
// --------------------------------------------------------------------------------------------

const verification = async (dir: string, templates: ReadonlyArray<Row>) => {
  const filename = path.join(dir, "verify.db")
  await migrate(filename)
  const payloads: Array<Uint8Array> = []
  const inputs: Array<Uint8Array> = []
  const generated = generate(filename, VERIFY_RECORDS, VERIFY_RECORDS, templates, (payload_json, input) => {
    payloads.push(Buffer.from(payload_json, "utf8"))
    inputs.push(Buffer.from(input, "utf8"))
  })
  const bytes = payloads.reduce((sum, b) => sum + b.length, 0) + inputs.reduce((sum, b) => sum + b.length, 0)
  const runtime = ManagedRuntime.make(storesLayer(filename))
  try {
    const store = await runtime.runPromise(EvidenceStore)
    const { chain_id, head } = generated.last
    const writ = async () => {
      const result = await runtime.runPromise(store.verify(chain_id, head))
      if (!result.valid || result.checked_records !== VERIFY_RECORDS) {
        throw new Error(`evidence bench: verify failed: ${result.failure_code} after ${result.checked_records}`)
      }
    }
    let sink = 0
    const rawHash = () => {
      for (let i = 0; i < payloads.length; i++) {
        const payload = hash("sha256", payloads[i]!, "hex")
        const chain = hash("sha256", inputs[i]!, "hex")
        sink += payload.length + chain.length
      }
      return Promise.resolve()
    }
    const timed = async (run: () => Promise<void>) => {
      collect()
      const start = performance.now()
      await run()
      return VERIFY_RECORDS / ((performance.now() - start) / 1000)
    }
    // A reference floor, not the target's baseline: the same rows read raw with better-sqlite3, page by page as the
    // store reads them, each row's payload and chain-hash input (built by hand) hashed, nothing checked.
    const reader = new Database(filename)
    const page = reader.prepare(`SELECT ${COLUMNS} FROM evidence_records WHERE chain_id = ? AND sequence > ?
      ORDER BY sequence LIMIT 1000`)
    const readAndHash = () => {
      for (let after = -1;;) {
        const rows = page.all(chain_id, after) as Array<Row>
        for (const row of rows) {
          sink += hash("sha256", row.payload_json, "hex").length + hash("sha256", chainInput(row), "hex").length
        }
        if (rows.length < 1000) return Promise.resolve()
        after = rows[rows.length - 1]!.sequence
      }
    }
    await writ()
    await rawHash()
    await readAndHash()
    const rounds: Array<{ readonly raw: number; readonly writ: number; readonly floor: number }> = []
    for (let i = 0; i < VERIFY_ROUNDS; i++) {
      if (i % 2 === 0) {
        const raw = await timed(rawHash)
        const floor = await timed(readAndHash)
        rounds.push({ raw, floor, writ: await timed(writ) })
      } else {
        const w = await timed(writ)
        const floor = await timed(readAndHash)
        rounds.push({ raw: await timed(rawHash), floor, writ: w })
      }
    }
    reader.close()
    if (sink < 0) console.log(sink)
    const raw = median(rounds.map((r) => r.raw))
    const writRate = median(rounds.map((r) => r.writ))
    console.log(
      `evidence verify: one chain of ${VERIFY_RECORDS} records (${(bytes / VERIFY_RECORDS).toFixed(0)} bytes hashed ` +
        `per record), generated in ${generated.seconds.toFixed(1)} s; ${VERIFY_ROUNDS} alternating rounds, medians`
    )
    console.log(`  raw SHA-256 (node:crypto hash) over payload + chain-hash input bytes: ${perSecond(raw)} records/s`)
    const floor = median(rounds.map((r) => r.floor))
    console.log(
      `  reference: raw better-sqlite3 read of the same rows + the same hashes: ${perSecond(floor)} records/s`
    )
    console.log(`  EvidenceStore.verify (SQL store, expected head):              ${perSecond(writRate)} records/s`)
    console.log(`  verify / the read-and-hash reference: ${(writRate / floor).toFixed(2)}x`)
    console.log(
      `  per round (raw / verify records/s): ${rounds.map((r) => `${perSecond(r.raw)}/${perSecond(r.writ)}`).join(" ")}`
    )
    return { reference: writRate / floor, sha256: writRate / raw }
  } finally {
    await runtime.dispose()
    removeDb(filename)
  }
}

// --------------------------------------------------------------------------------------------
// Projector replay
// --------------------------------------------------------------------------------------------

/** What one replay measured. */
export interface Replay {
  readonly size: number
  readonly seconds: number
  /** Process CPU time (every thread) the replay used, in seconds. */
  readonly cpuSeconds: number
  readonly rssBefore: number
  readonly rssPeak: number
  readonly samples: number
  /** Heap in use after a full GC once the replay is done: what it retained, as against garbage not yet collected. */
  readonly heapAfterGc: number
}

/** A generated database to replay, and how many records it holds. */
export interface ReplayJob {
  readonly filename: string
  readonly size: number
}

/**
 * Drain each database from an empty cursor into its SQL ProjectionStore, in order, sampling RSS after every committed
 * batch and on a timer. The bench runs this in a child process of its own, so the RSS is the replay's.
 */
export const replayAll = async (jobs: ReadonlyArray<ReplayJob>): Promise<ReadonlyArray<Replay>> => {
  const results: Array<Replay> = []
  for (const job of jobs) {
    let rssPeak = 0
    let samples = 0
    const sample = () => {
      samples++
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
    }
    const sampling = Layer.effect(
      ProjectionStore,
      Effect.map(ProjectionStore, (store) =>
        ProjectionStore.of({
          ...store,
          applyProjection: (input) => Effect.tap(store.applyProjection(input), () => Effect.sync(sample))
        }))
    )
    const runtime = ManagedRuntime.make(sampling.pipe(Layer.provideMerge(storesLayer(job.filename))))
    try {
      await runtime.runPromise(Effect.void)
      collect()
      const rssBefore = process.memoryUsage().rss
      rssPeak = rssBefore
      const timer = setInterval(sample, RSS_SAMPLE_MS)
      const cpu = process.cpuUsage()
      const start = performance.now()
      const report = await runtime.runPromise(EvidenceProjector.drain()).finally(() => clearInterval(timer))
      const seconds = (performance.now() - start) / 1000
      const used = process.cpuUsage(cpu)
      sample()
      if (report.inserted !== job.size || report.unchanged !== 0) {
        throw new Error(`evidence bench: drain inserted ${report.inserted} of ${job.size}`)
      }
      collect()
      results.push({
        size: job.size,
        seconds,
        cpuSeconds: (used.user + used.system) / 1e6,
        rssBefore,
        rssPeak,
        samples,
        heapAfterGc: process.memoryUsage().heapUsed
      })
    } finally {
      await runtime.dispose()
    }
  }
  return results
}

const replayInChild = (jobs: ReadonlyArray<ReplayJob>): ReadonlyArray<Replay> => {
  const script = `const { replayAll } = await import(${JSON.stringify(import.meta.url)})
    const results = await replayAll(JSON.parse(process.env.WRIT_BENCH_REPLAY_JOBS))
    process.stdout.write(JSON.stringify(results))`
  const child = spawnSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], {
    env: { ...process.env, WRIT_BENCH_REPLAY_JOBS: JSON.stringify(jobs) },
    stdio: ["ignore", "pipe", "inherit"],
    encoding: "utf8"
  })
  if (child.status !== 0) throw new Error(`evidence bench: the replay child exited with ${child.status}`)
  return JSON.parse(child.stdout) as ReadonlyArray<Replay>
}

const projectorSizes = (): ReadonlyArray<number> => {
  const configured = process.env["WRIT_BENCH_PROJECTOR_MAX"]
  const max = configured === undefined ? PROJECTOR_SIZES[PROJECTOR_SIZES.length - 1] : Number(configured)
  // Linearity compares the smallest size with one ten times larger or more: a size compared with itself proves nothing.
  if (!Number.isSafeInteger(max) || max < PROJECTOR_SIZES[1]) {
    throw new Error(
      `evidence bench: WRIT_BENCH_PROJECTOR_MAX must be an integer >= ${PROJECTOR_SIZES[1]}, so that ${
        PROJECTOR_SIZES[0]
      } records are compared with at least ${PROJECTOR_SIZES[1]}`
    )
  }
  return [...new Set([...PROJECTOR_SIZES.filter((size) => size < max), max])]
}

const projector = async (dir: string, templates: ReadonlyArray<Row>) => {
  // A discarded first replay, so the smallest size is not the one that pays for JIT warm-up.
  const sizes = [PROJECTOR_SIZES[0], ...projectorSizes()]
  const jobs: Array<ReplayJob & { readonly generated: Generated; readonly fileBytes: number }> = []
  try {
    for (const [i, size] of sizes.entries()) {
      const filename = path.join(dir, `projector-${i}-${size}.db`)
      await migrate(filename)
      const generated = generate(filename, size, CHAIN_LENGTH, templates)
      jobs.push({ filename, size, generated, fileBytes: fs.statSync(filename).size })
    }
    const [warm, ...runs] = replayInChild(jobs.map(({ filename, size }) => ({ filename, size })))
    console.log(
      `evidence projector: EvidenceProjector.drain from an empty cursor into the SQL ProjectionStore (same file, ` +
        `synchronous=FULL), chains of ${CHAIN_LENGTH} records, all sizes in one child process; discarded ` +
        `warm-up replay of ${warm!.size}: ${warm!.seconds.toFixed(2)} s`
    )
    runs.forEach((run, i) => {
      const job = jobs[i + 1]!
      console.log(
        `  ${String(run.size).padStart(9)} records: ${run.seconds.toFixed(2)} s, ${
          ((run.seconds * 1e6) / run.size).toFixed(1)
        } µs/record, ${perSecond(run.size / run.seconds)} records/s, CPU ${
          ((run.cpuSeconds * 1e6) / run.size).toFixed(1)
        } µs/record (generated in ${job.generated.seconds.toFixed(1)} s, ${mbOf(job.fileBytes)} MB file); child RSS ${
          mbOf(run.rssBefore)
        } MB before, ` +
          `peak ${mbOf(run.rssPeak)} MB (${run.samples} samples), heap after GC ${mbOf(run.heapAfterGc)} MB`
      )
    })
    const first = runs[0]!
    const last = runs[runs.length - 1]!
    if (last.size < 10 * first.size) {
      throw new Error(`evidence bench: projector linearity needs sizes 10x apart, got ${first.size} and ${last.size}`)
    }
    console.log(
      `  time per record, ${last.size} / ${first.size}: wall ${
        ((last.seconds / last.size) / (first.seconds / first.size)).toFixed(2)
      }x, CPU ${((last.cpuSeconds / last.size) / (first.cpuSeconds / first.size)).toFixed(2)}x (CPU is less ` +
        `sensitive to load drift on a shared machine)`
    )
    return { linearity: (last.seconds / last.size) / (first.seconds / first.size), top: last }
  } finally {
    for (const job of jobs) removeDb(job.filename)
  }
}

const mbOf = (bytes: number) => (bytes / (1024 * 1024)).toFixed(0)

const PARTS = ["appends", "verify", "projector"] as const

/** The parts to run: all, or those `WRIT_BENCH_EVIDENCE_PARTS` names (comma-separated). */
const selectedParts = (): ReadonlySet<string> => {
  const configured = process.env["WRIT_BENCH_EVIDENCE_PARTS"]
  if (configured === undefined) return new Set(PARTS)
  const names = configured.split(",").map((name) => name.trim())
  const unknown = names.filter((name) => !(PARTS as ReadonlyArray<string>).includes(name))
  if (unknown.length > 0) {
    throw new Error(`evidence bench: unknown part ${unknown.join(", ")} (known: ${PARTS.join(", ")})`)
  }
  return new Set(names)
}

const run = async (): Promise<void> => {
  const parts = selectedParts()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-bench-evidence-"))
  try {
    const appended = await appends(dir)
    if (parts.has("appends")) {
      console.log(`evidence-governed-c64: ${appended.c64.toFixed(2)}x (target >= 0.5x)`)
      console.log(
        `evidence-governed-c1: ${appended.c1.toFixed(2)}x (of the raw governed commit pattern; target >= ${C1_TARGET}x)`
      )
      console.log(
        `evidence-governed-c1-interleaved: ${
          appended.c1Interleaved.toFixed(2)
        }x (of the interleaved floor: the in-memory executor with its commits made raw in step; for information)`
      )
      console.log(
        `evidence-governed-c1-one-commit: ${
          appended.c1OneCommit.toFixed(2)
        }x (of one commit per append; for information)`
      )
    }
    if (parts.has("verify")) {
      const verified = await verification(dir, appended.templates)
      console.log(
        `evidence-verify: ${verified.reference.toFixed(2)}x (of the read-and-hash reference verifier; target >= 0.9x)`
      )
      console.log(`evidence-verify-sha256: ${verified.sha256.toFixed(2)}x (of SHA-256 alone; for information)`)
    }
    if (parts.has("projector")) {
      const projected = await projector(dir, appended.templates)
      const size = projected.top.size
      const topLabel = size % 1_000_000 === 0
        ? `${size / 1_000_000}m`
        : size % 1000 === 0
        ? `${size / 1000}k`
        : `${size}`
      console.log(`projector-linearity: ${projected.linearity.toFixed(2)}x (target <= 1.5x)`)
      console.log(`projector-rss-${topLabel}: ${mbOf(projected.top.rssPeak)} MB (target <= 256 MB)`)
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** Governed durable evidence vs raw SQLite appends, chain verification vs raw SHA-256, and projector replay. */
export const benchmark: Benchmark = { name: "evidence", run }
