/**
 * The evidence projector and crash recovery: durable state is only a projection of committed
 * evidence. The projector scans from its durable cursor, re-reads and verifies each record, and
 * commits rows and cursor together; recovery drains it and closes each orphaned operation with
 * `external_result_ambiguous`, never inventing a result and never invoking anything.
 */
import { Chunk, Effect, Either, Exit, Option, Schema, Stream } from "effect"
import { Digest } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { OperationAttempt } from "../state/Attempt.ts"
import { AttemptStore } from "../state/AttemptStore.ts"
import { ProjectedRecord } from "../state/Projection.ts"
import { ProjectionStore } from "../state/ProjectionStore.ts"
import { RunTerminal } from "../state/Run.ts"
import { RunStore } from "../state/RunStore.ts"
import * as Evidence from "./Evidence.ts"
import { EvidenceProjectionSource, EvidenceStore } from "./EvidenceStore.ts"
import type { Cursor } from "./EvidenceStore.ts"
import { ExecutorRegistry, LiveExecutorsError } from "./ExecutorRegistry.ts"
import { EvidenceWriter } from "./Governance.ts"
import { summaryOf } from "./internal/ledger.ts"
import { closeOperation } from "./internal/writer.ts"

/** The projection version rows are keyed by, with chain and record id. */
export const projectionVersion = 1

/** The projector's default name in the ProjectionStore cursor table. */
export const defaultProjector = "evidence"

/**
 * A committed record the projector cannot trust: its content does not recompute to its hashes, its algorithm is
 * unknown, it does not link to the record before it on its chain, or it is malformed (`missing` and
 * `receipt_mismatch` are kept for earlier readers: records are now scanned whole). Operator attention.
 */
export class ProjectionIntegrityError extends Schema.TaggedError<ProjectionIntegrityError>()(
  "ProjectionIntegrityError",
  {
    reason: Schema.Literal(
      "missing",
      "content_mismatch",
      "receipt_mismatch",
      "broken_link",
      "unsupported_algorithm",
      "malformed"
    ),
    chain_id: Schema.String,
    record_id: Schema.String
  }
) {
  override get message() {
    return `evidence record ${this.record_id} on chain ${this.chain_id} cannot be projected: ${this.reason}`
  }
}

/** Drain options that cannot be honoured: nothing is scanned, projected or appended. */
export class DrainOptionsError extends Schema.TaggedError<DrainOptionsError>()("DrainOptionsError", {
  detail: Schema.String
}) {
  override get message() {
    return `invalid projector options: ${this.detail}`
  }
}

/** What one drain did. */
export interface DrainReport {
  readonly inserted: number
  readonly unchanged: number
  readonly cursor: Cursor | null
}

/** Options of a drain. */
export interface DrainOptions {
  readonly projector?: string
  /** Receipts per scan, a positive integer (default 500). */
  readonly batch?: number
}

const decodeRow = Schema.decodeUnknownEither(ProjectedRecord)

const decodeAttempt = Schema.decodeUnknownEither(OperationAttempt)

// The Run a start names, if any, and what the Run's attempt takes from it.
const runOfStart = Schema.decodeUnknownEither(Schema.parseJson(Schema.Struct({
  scope: Schema.optional(Schema.Struct({ run_id: Schema.optional(Schema.NullOr(Schema.String)) }))
})))
const startPayload = Schema.decodeUnknownEither(Schema.parseJson(Schema.Struct({
  attempt_id: Schema.String,
  request_id: Schema.String,
  scope: Schema.Struct({ run_id: Schema.String }),
  action: Schema.Struct({ name: Schema.String, version: Schema.NullOr(Schema.String) }),
  arguments_digest: Schema.NullOr(Schema.String)
})))

/** A started operation's attempt facts if it names a durable Run and states them (as the executor's start does), else null. */
const startOf = (started: Evidence.StoredRecord) => {
  const run = runOfStart(started.payload_json)
  if (Either.isRight(run) && (run.right.scope?.run_id ?? null) === null) return null
  return Either.getOrNull(startPayload(started.payload_json))
}

type Start = NonNullable<ReturnType<typeof startOf>>

// The digest of the arguments an attempt last had, as its terminal record states it (a recovery's close does not).
const terminalArguments = Schema.decodeUnknownEither(Schema.parseJson(Schema.Struct({
  arguments_digest: Schema.optional(Schema.String)
})))

/** The attempt a terminal record concludes in its Run, or undefined if the records do not make one. */
const attemptOf = (start: Start, terminal: Evidence.StoredRecord) => {
  const outcome = summaryOf(terminal)
  if (outcome === undefined) return undefined
  const ran = Either.getOrUndefined(terminalArguments(terminal.payload_json))?.arguments_digest
  const attempt = decodeAttempt({
    attempt_id: start.attempt_id,
    run_id: start.scope.run_id,
    request_id: start.request_id,
    action_name: start.action.name,
    action_version: start.action.version,
    arguments_digest: ran ?? start.arguments_digest,
    outcome: { ...outcome },
    created_at: terminal.created_at
  })
  return Either.getOrUndefined(attempt)
}

// Chains whose last hash one drain remembers; past it the map starts again and a chain's predecessor is read back.
const REMEMBERED_CHAINS = 10_000

/** Project every committed append after the durable cursor; replay is a no-op; a conflict fails closed. */
export const drain = Effect.fn("EvidenceProjector.drain")(function*(options: DrainOptions = {}) {
  const source = yield* EvidenceProjectionSource
  const store = yield* EvidenceStore
  const state = yield* ProjectionStore
  const digest = yield* Digest
  const projector = options.projector ?? defaultProjector
  const batch = options.batch ?? 500
  // A batch that scans nothing would report an empty drain, and recovery would then act on a stale projection.
  if (!Number.isSafeInteger(batch) || batch < 1) {
    return yield* new DrainOptionsError({ detail: `batch must be a positive integer, got ${batch}` })
  }
  let cursor = Option.getOrNull(yield* state.projectionCursor(projector))
  let inserted = 0
  let unchanged = 0
  // The hash each chain's record at `sequence` carries: what the chain's next record must name as its previous.
  const heads = new Map<string, { readonly sequence: number; readonly hash: string }>()
  // The predecessor's hash for a chain this drain has not just seen: as projected when it was verified (a store
  // rewritten since cannot move it), else, for one in this drain's uncommitted page, read back from the store.
  const previousOf = (record: Evidence.StoredRecord) =>
    Effect.flatMap(
      state.projectedHash(record.chain_id, record.sequence - 1),
      (projected) =>
        Option.isSome(projected) ? Effect.succeed<string | undefined>(projected.value) : Effect.map(
          Stream.runHead(store.read(record.chain_id, record.sequence - 2)),
          (before) =>
            Option.isSome(before) && before.value.sequence === record.sequence - 1 ? before.value.chain_hash : undefined
        )
    )
  // Operations this drain saw start, until their terminal record: their Run attempt's facts, or null outside a Run.
  const starts = new Map<string, Start | null>()
  // The start of an operation whose start an earlier drain projected, read back from the store.
  const storedStart = (terminal: Evidence.StoredRecord) =>
    Effect.gen(function*() {
      const [operation] = yield* state.projectedOperations({ operation_id: terminal.operation_id! })
      if (operation?.started_record_id == null) return null
      const started = yield* source.get(operation.chain_id, operation.started_record_id)
      return Option.isNone(started) ? null : startOf(started.value)
    })
  while (true) {
    const page = yield* source.scanRecords(cursor, batch)
    if (page.records.length === 0 || page.next_cursor === null) break
    const rows: Array<ProjectedRecord> = []
    const attempts: Array<OperationAttempt> = []
    for (const record of page.records) {
      const fail = (reason: ProjectionIntegrityError["reason"]) =>
        new ProjectionIntegrityError({ reason, chain_id: record.chain_id, record_id: record.record_id })
      const content = yield* Effect.provideService(Evidence.checkContent(record), Digest, digest)
      if (Either.isLeft(content)) return yield* fail(content.left)
      const known = heads.get(record.chain_id)
      const previous = record.sequence === 0
        ? null
        : known !== undefined && known.sequence === record.sequence - 1
        ? known.hash
        : yield* previousOf(record)
      if (previous !== record.previous_chain_hash) return yield* fail("broken_link")
      if (heads.size >= REMEMBERED_CHAINS && !heads.has(record.chain_id)) heads.clear()
      heads.set(record.chain_id, { sequence: record.sequence, hash: record.chain_hash })
      const row = decodeRow(Object.assign({}, record, { projection_version: projectionVersion }))
      if (Either.isLeft(row)) return yield* fail("malformed")
      rows.push(row.right)
      const operation_id = record.operation_id
      if (operation_id === null) continue
      if (record.record_type === "operation_started") {
        starts.set(operation_id, startOf(record))
      } else if (Evidence.terminalTypes.has(record.record_type)) {
        const start = starts.has(operation_id) ? starts.get(operation_id)! : yield* storedStart(record)
        starts.delete(operation_id)
        const attempt = start === null ? undefined : attemptOf(start, record)
        if (attempt !== undefined) attempts.push(attempt)
      }
    }
    const applied = yield* state.applyProjection({ projector, rows, cursor: page.next_cursor, attempts })
    inserted += applied.inserted
    unchanged += applied.unchanged
    cursor = page.next_cursor
  }
  return { inserted, unchanged, cursor } satisfies DrainReport
})

/** Why a drain stopped: bad options, a record it cannot trust, a conflicting projection, or an unavailable store. */
export type DrainError = Effect.Effect.Error<ReturnType<typeof drain>>

/**
 * A drain shared by everyone who asks for one, one at a time: each caller gets the result of the latest drain that
 * began after it asked, succeeded or failed, so calls that conclude together share one drain instead of queueing one
 * each. Only an interrupted drain is not shared: whoever waits next runs its own.
 */
export const makeShared = (options: DrainOptions = {}) =>
  Effect.gen(function*() {
    const services = yield* Effect.context<EvidenceProjectionSource | EvidenceStore | ProjectionStore | Digest>()
    const lock = yield* Effect.makeSemaphore(1)
    let asked = 0
    // The latest drain that ended: the last ticket asked before it began, and its result.
    let settled: { readonly through: number; readonly exit: Exit.Exit<void, DrainError> } | undefined
    return Effect.suspend(() => {
      const ticket = ++asked
      return lock.withPermits(1)(Effect.suspend(() => {
        if (settled !== undefined && settled.through >= ticket) return settled.exit
        const through = asked
        return Effect.onExit(Effect.asVoid(drain(options)), (exit) =>
          Effect.sync(() => {
            if (!Exit.isInterrupted(exit)) settled = { through, exit }
          }))
      }))
    }).pipe(Effect.provide(services))
  })

/** A Run recovery found left running with no executor: how many attempts it had committed, and how it was ended. */
export interface OrphanedRun {
  readonly run_id: string
  readonly attempts: number
  /** Whether this recovery's finish ended it; false when another terminal outcome had won meanwhile. */
  readonly won: boolean
  /** Why it could not be ended, if it could not. */
  readonly error?: string
}

/**
 * What recovery did: its drains together, the operations it closed as ambiguous (or could not, with why), and the Runs
 * it found left running by a crash and ended.
 */
export interface RecoveryReport {
  readonly drained: DrainReport
  readonly closed: ReadonlyArray<string>
  readonly unclosable: ReadonlyArray<{ readonly operation_id: string; readonly reason: string }>
  readonly runs: ReadonlyArray<OrphanedRun>
}

/**
 * How recovery ends a Run its process left running: it did not complete, and what its work came to is unknown. Not a
 * failed call: the attempt its process may have been making (durable-ungoverned attempts commit only after the call)
 * stays unknown and no attempt is invented for it.
 */
export const orphanedRunTerminal = RunTerminal.make({
  status: "failed",
  acceptance: "unknown",
  quality: "indeterminate",
  reason_code: "recovery.orphaned_run",
  evidence: [],
  cost: null
})

/** How recovery runs: the drain's options, and `force` to close operations even while executors have the store open. */
export interface RecoverOptions extends DrainOptions {
  readonly force?: boolean
}

/**
 * Drain the projector, then close every started operation that has no terminal record with
 * `external_result_ambiguous` (the call may or may not have run), then drain again. An operation still running looks
 * just like an orphan, so while any executor registered on the store may be running (its own process's included) it
 * fails with `LiveExecutorsError` and closes nothing, unless forced. Each closing record follows the chain as
 * recovery read it: an operation concluded since is left alone, and a chain that moves on meanwhile (a writer,
 * another recovery) refuses the close, so no operation gets a second terminal; an operation the chain does not show
 * started (whatever the projection says) is unclosable (EvidenceForbiddenError `not_open`). Even forced, an operation running in
 * this process is never closed; one running in another process that a forced close ends can append nothing more.
 * Last, every Run still `running` has no live executor (a crash's, killed mid-call): it is ended as failed with
 * acceptance unknown and quality indeterminate (`recovery.orphaned_run`), and reported. A Run parked across processes
 * is `paused`, and Runs not yet started are left alone.
 */
export const recover = Effect.fn("EvidenceProjector.recover")(function*(options: RecoverOptions = {}) {
  const projection = yield* ProjectionStore
  const runStore = yield* RunStore
  const attemptStore = yield* AttemptStore
  const source = yield* EvidenceProjectionSource
  const store = yield* EvidenceStore
  const writer = yield* EvidenceWriter
  const registry = yield* ExecutorRegistry
  const before = yield* drain(options)
  const open = yield* projection.projectedOperations({ open_only: true })
  const running = yield* runStore.listRuns({ status: ["running"] })
  // Asked after the listing: an executor that started a listed operation (or Run) registered before it did.
  if ((open.length > 0 || running.length > 0) && options.force !== true) {
    const live = yield* registry.live
    if (live.length > 0) return yield* new LiveExecutorsError({ executors: live })
  }
  const closed: Array<string> = []
  const unclosable: Array<{ operation_id: string; reason: string }> = []
  for (const operation of open) {
    if (operation.started_record_id === null) continue
    const started = yield* source.get(operation.chain_id, operation.started_record_id)
    if (Option.isNone(started)) {
      unclosable.push({ operation_id: operation.operation_id, reason: "started record not found" })
      continue
    }
    const since = yield* Stream.runCollect(store.read(operation.chain_id, started.value.sequence))
    if (
      Chunk.some(since, (r) => r.operation_id === operation.operation_id && Evidence.terminalTypes.has(r.record_type))
    ) continue
    const last = Option.getOrElse(Chunk.last(since), () => started.value)
    const appended = yield* Effect.either(closeOperation(writer, Uuid.make(operation.chain_id), started.value, last, {
      record_type: "external_result_ambiguous",
      operation_id: operation.operation_id,
      policy_id: started.value.policy_id,
      policy_version: started.value.policy_version,
      payload: { reason_code: "recovery.orphaned_operation", call_executed: null, stage: "recover" }
    }))
    if (Either.isLeft(appended)) {
      unclosable.push({ operation_id: operation.operation_id, reason: appended.left.message })
    } else {
      closed.push(operation.operation_id)
    }
  }
  const after = yield* drain(options)
  const drained = {
    inserted: before.inserted + after.inserted,
    unchanged: before.unchanged + after.unchanged,
    cursor: after.cursor
  }
  // After the drain, so an ambiguous close just projected is among the Run's attempts.
  const runs: Array<OrphanedRun> = []
  for (const run of running) {
    const attempts = yield* attemptStore.listAttempts(run.run_id)
    const finished = yield* Effect.either(runStore.finish(run.run_id, orphanedRunTerminal))
    if (Either.isLeft(finished)) {
      runs.push({ run_id: run.run_id, attempts: attempts.length, won: false, error: finished.left.message })
      continue
    }
    runs.push({ run_id: run.run_id, attempts: attempts.length, won: finished.right.won })
  }
  return { drained, closed, unclosable, runs } satisfies RecoveryReport
})
