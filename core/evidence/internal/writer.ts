/**
 * The evidence writer's implementation: per chain, one lock over head lookup, record construction and append, the
 * operations running here, the terminal records owed for starts whose answer was lost, and the boundary's close.
 */
import { Chunk, Effect, Either, Option, Stream } from "effect"
import type * as Canonical from "../../base/Canonical.ts"
import type { Sha256Hex } from "../../base/Digest.ts"
import { Digest } from "../../base/Digest.ts"
import { type IdGenerator, type Uuid, uuidsWith } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import type { BudgetSpentError, PendingAdmission } from "../../policy/BudgetLedger.ts"
import * as Evidence from "../Evidence.ts"
import type { AppendError, AppendReceipt, EvidenceForbiddenError, EvidenceStore } from "../EvidenceStore.ts"
import { EvidenceUnavailableError, forbiddenError } from "../EvidenceStore.ts"
import type { OperationOwnershipError } from "../TaskBoundary.ts"
import { BoundaryError, type TaskBoundary } from "../TaskBoundary.ts"
import { grantRecords, operationTypes } from "./capability.ts"
import { catchUp } from "./catchUp.ts"
import * as ChainLock from "./chainLock.ts"
import * as ChainState from "./chainState.ts"
import { admit, type Admitted, closedDraft, committed, failed, mismatchOf, positionsOf } from "./chainState.ts"

/** Why an append in the calling step failed. */
type AppendNowError =
  | AppendError
  | BudgetSpentError
  | Canonical.CanonicalJsonError
  | BoundaryError
  | OperationOwnershipError

// An append that carried no budget admission cannot be refused for one.
const plain = <A, E>(append: Effect.Effect<A, E>) => append as Effect.Effect<A, Exclude<E, BudgetSpentError>>

/** What every function of one writer shares: its store, digest, ids, and the state of each chain it holds. */
interface Writer {
  readonly store: EvidenceStore.Service
  readonly digest: Digest.Service
  readonly ids: IdGenerator.Service
  readonly chains: Map<string, ChainState.ChainState>
  /** Operations running under `track`, on every chain. */
  running: number
}

const stateOf = (w: Writer, chain_id: string) => {
  let state = w.chains.get(chain_id)
  if (state === undefined) {
    state = ChainState.make()
    w.chains.set(chain_id, state)
  }
  return state
}

// The admitted drafts sealed at the head (without an Effect where ids and hashes are synchronous) and appended; an
// operation call's records, and the owed terminals of earlier ones, are sealed under the executor's capability.
const commit = (
  w: Writer,
  chain_id: Uuid,
  admitted: Admitted,
  created_at: Time.Timestamp,
  granted: boolean,
  admissions: ReadonlyArray<PendingAdmission>
) => {
  const { drafts } = admitted
  const at = (record_ids: ReadonlyArray<Uuid>) => positionsOf(chain_id, admitted, record_ids, created_at)
  const sha256 = w.digest.sha256TextSync
  const uuid = w.ids.uuidSync
  const sealed = sha256 !== undefined && uuid !== undefined
    ? Evidence.sealAllSync(sha256, drafts, at(Array.from({ length: drafts.length }, uuid)))
    : Effect.flatMap(
      uuidsWith(w.ids, drafts.length),
      (record_ids) => Evidence.sealAllWith(w.digest, drafts, at(record_ids))
    )
  return Effect.flatMap(sealed, (records) => {
    grantRecords(records, granted ? records.length : admitted.owed)
    if (admissions.length === 0) return w.store.appendAll(records)
    const admitting = w.store.appendAll.admitting
    return admitting === undefined ? Effect.fail(cannotAdmit) : admitting(records, admissions)
  })
}

// Budget admissions offered to a store whose appends cannot carry them: refused, never dropped.
const cannotAdmit = new EvidenceUnavailableError({ detail: "the evidence store cannot commit budget admissions" })

const noAdmissions: ReadonlyArray<PendingAdmission> = []

// A call without the capability offering an operation record: refused before anything else.
const forbidden = (chain_id: Uuid, drafts: ReadonlyArray<Evidence.Draft>): EvidenceForbiddenError | undefined => {
  const draft = drafts.find((draft) => operationTypes.has(draft.record_type))
  return draft === undefined ? undefined : forbiddenError(Object.assign({}, draft, { chain_id }))
}

const appendFrom = (
  w: Writer,
  chain_id: Uuid,
  asked: ReadonlyArray<Evidence.Draft>,
  expected: ChainState.ChainState["head"] | undefined,
  granted: boolean,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>,
  admissions = noAdmissions
) => {
  if (asked.length === 0) return Effect.succeed<ReadonlyArray<AppendReceipt>>([])
  const refused = granted ? undefined : forbidden(chain_id, asked)
  if (refused !== undefined) return Effect.fail(refused)
  const state = stateOf(w, chain_id)
  const foreign = expected !== undefined
  const append = Effect.clockWith((clock): Effect.Effect<
    ReadonlyArray<AppendReceipt>,
    Effect.Effect.Error<ReturnType<typeof commit>> | BoundaryError | OperationOwnershipError
  > => {
    const admitted = admit(chain_id, state, asked, expected)
    if (!("drafts" in admitted)) return Effect.fail(admitted)
    const created_at = Time.ofClock(clock)
    return Effect.map(
      commit(w, chain_id, admitted, created_at, granted, admissions),
      (receipts) => committed(state, asked, admitted, receipts, ifCommitted !== undefined)
    )
  })
  const body = Effect.suspend(() => {
    const tracking = state.operations.size > 0 || state.unconfirmed.size > 0 || state.owed.length > 0
    if (state.fresh || (foreign && !tracking)) return append
    return Effect.flatMap(catchUp(w.store, chain_id, state), (head) => {
      state.head = head
      state.fresh = true
      return append
    })
  })
  // Waiting for the lock can be interrupted; an append, once begun, runs to its commit or its failure.
  return ChainLock.withLock(state.lock, body, () => failed(state, ifCommitted))
}

/**
 * An operation's append in the calling step, where the store commits synchronously, ids and hashes are synchronous,
 * the chain's lock is free, its head known, and no other operation runs when the store's commit blocks: the receipts
 * or the refusal; undefined when the append needs an Effect (or the store cannot commit at this moment).
 */
const appendNow = (
  w: Writer,
  chain_id: Uuid,
  asked: ReadonlyArray<Evidence.Draft>,
  micros: number,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>,
  admissions = noAdmissions
): ReadonlyArray<AppendReceipt> | AppendNowError | undefined => {
  const plain = w.store.appendAll.now
  const admittingNow = w.store.appendAll.admitting?.now
  const appendAllNow = admissions.length === 0
    ? plain
    : admittingNow === undefined
    ? undefined
    : (records: ReadonlyArray<Evidence.EvidenceRecord>) => admittingNow(records, admissions)
  const sha256 = w.digest.sha256TextSync
  const uuid = w.ids.uuidSync
  const state = w.chains.get(chain_id)
  if (
    appendAllNow === undefined || sha256 === undefined || uuid === undefined || state === undefined ||
    state.lock.held || !state.fresh || (plain?.blocking === true && w.running > 1)
  ) return undefined
  const admitted = admit(chain_id, state, asked, undefined)
  if (!("drafts" in admitted)) return admitted
  const record_ids = Array.from({ length: admitted.drafts.length }, uuid)
  const sealed = Evidence.sealAllSync(
    sha256,
    admitted.drafts,
    positionsOf(chain_id, admitted, record_ids, Time.fromMicros(micros))
  )
  if (Either.isLeft(sealed)) return sealed.left
  grantRecords(sealed.right, sealed.right.length)
  const appended = appendAllNow(sealed.right)
  if (appended === undefined) return undefined
  if (Either.isLeft(appended)) {
    failed(state, ifCommitted)
    return appended.left
  }
  return committed(state, asked, admitted, appended.right, ifCommitted !== undefined)
}
const appendAll = (
  w: Writer,
  chain_id: Uuid,
  drafts: ReadonlyArray<Evidence.Draft>,
  granted: boolean,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>,
  admissions = noAdmissions
) => appendFrom(w, chain_id, drafts, undefined, granted, ifCommitted, admissions)
const append = (w: Writer, chain_id: Uuid, draft: Evidence.Draft) =>
  plain(Effect.map(appendAll(w, chain_id, [draft], false), (receipts) => receipts[0]!))
const headOf = (record: Evidence.StoredRecord) => ({
  sequence: record.sequence,
  hash: record.chain_hash as Sha256Hex,
  closed: record.record_type === "task_closed"
})
const appendAfter = (w: Writer, chain_id: Uuid, after: Evidence.StoredRecord, draft: Evidence.Draft) =>
  plain(Effect.map(appendFrom(w, chain_id, [draft], headOf(after), false), (receipts) => receipts[0]!))

// Counted and released in one uninterruptible region, so no exit of the operation can skip the release. A chain this
// writer holds nothing for has no boundary open here: the operation is refused before it starts, and leaves no state.
const track = <A, E>(w: Writer, chain_id: Uuid, operation: Effect.Effect<A, E>) =>
  Effect.uninterruptibleMask((restore) => {
    const state = w.chains.get(chain_id)
    if (state === undefined) return restore(operation)
    state.running++
    w.running++
    // Over a store whose commit in the calling step blocks, a turn of the scheduler lets operations started alongside
    // this one be counted first: an operation then running alone commits in its calling steps, others group-commit.
    const started = w.store.appendAll.now?.blocking === true ? Effect.zipRight(Effect.yieldNow(), operation) : operation
    return Effect.ensuring(
      restore(started),
      Effect.sync(() => {
        w.running--
        if (--state.running === 0) state.closing?.unsafeOpen()
      })
    )
  })

// The wait holds no lock; an interrupted close leaves the chain closing, and a later close completes it. A boundary
// other than the one opened is refused before the chain starts closing: it must not stop the real one's operations.
// Once closed the chain takes no record, so the writer forgets it: the store's head says it is closed from then on.
const close = (w: Writer, boundary: TaskBoundary) =>
  Effect.suspend(() => {
    const { chain_id } = boundary
    const state = stateOf(w, chain_id)
    const mismatch = state.opened === undefined ? undefined : mismatchOf(state.opened, boundary)
    if (mismatch !== undefined) return Effect.fail(new BoundaryError({ reason: mismatch, chain_id }))
    state.closing ??= Effect.unsafeMakeLatch(state.running === 0)
    return Effect.zipRight(state.closing.await, append(w, chain_id, closedDraft(boundary))).pipe(
      Effect.ensuring(Effect.sync(() => {
        if (w.chains.get(chain_id) === state && state.head?.closed === true) w.chains.delete(chain_id)
      }))
    )
  })

// A boundary opened on a chain no boundary or record holds, under the chain's lock.
const openUnder = Effect.fnUntraced(function*(w: Writer, state: ChainState.ChainState, boundary: TaskBoundary) {
  const { chain_id } = boundary
  if (state.opened !== undefined || state.head !== undefined || Option.isSome(yield* w.store.head(chain_id))) {
    return yield* new BoundaryError({ reason: "in_use", chain_id })
  }
  state.opened = boundary
})

const open = (w: Writer, boundary: TaskBoundary) =>
  Effect.suspend(() => {
    const { chain_id } = boundary
    const state = stateOf(w, chain_id)
    return ChainLock.withLock(state.lock, openUnder(w, state, boundary))
  })

const isOpen = (w: Writer, boundary: TaskBoundary) => {
  const state = w.chains.get(boundary.chain_id)
  return state?.opened !== undefined && state.closing === undefined &&
    mismatchOf(state.opened, boundary) === undefined
}

const release = (w: Writer, chain_id: Uuid, operation_id: string) =>
  Effect.sync(() => void w.chains.get(chain_id)?.operations.delete(operation_id))

// The writers this module made, by their service: only these hold the capability, whatever a context provides.
const writers = new WeakMap<object, Writer>()

// A writer this module did not make (one a context substituted) has no capability to lend: it is refused.
const writerOf = (service: object, chain_id: Uuid, draft: Evidence.Draft) => {
  const w = writers.get(service)
  return w !== undefined ? Either.right(w) : Either.left(forbiddenError(Object.assign({}, draft, { chain_id })))
}

/**
 * The executor's private append capability (its governed stages, and a governed harness run's): seal an operation's
 * records at the chain's head and append them in one commit, as `EvidenceWriter.appendAll` does for other records. `ifCommitted`: the terminal
 * records owed should the append fail yet turn out committed (its answer lost), asked for only then; the writer appends
 * them, once, ahead of the chain's next records. A writer this module did not make has no capability to lend.
 */
export const appendOperation = (
  service: object,
  chain_id: Uuid,
  drafts: ReadonlyArray<Evidence.Draft>,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>
) => plain(appendAdmitting(service, chain_id, drafts, ifCommitted, noAdmissions))

/**
 * `appendOperation` with budget places its commit takes (`admissions`): every record and every place, or nothing
 * (BudgetSpentError when a place's window is full; EvidenceUnavailableError over a store that cannot take them).
 */
export const appendAdmitting = (
  service: object,
  chain_id: Uuid,
  drafts: ReadonlyArray<Evidence.Draft>,
  ifCommitted: (() => ReadonlyArray<Evidence.Draft>) | undefined,
  admissions: ReadonlyArray<PendingAdmission>
) =>
  drafts.length === 0 ? Effect.succeed<ReadonlyArray<AppendReceipt>>([]) : Either.match(
    writerOf(service, chain_id, drafts[0]!),
    { onLeft: Effect.fail, onRight: (w) => appendAll(w, chain_id, drafts, true, ifCommitted, admissions) }
  )

/**
 * `appendOperation` (with `admissions`: `appendAdmitting`) in the calling step at `micros` (the call's clock), where
 * it needs no Effect (see `appendNow`): the receipts or the refusal; undefined when only an Effect can append.
 */
export const appendOperationNow = (
  service: object,
  chain_id: Uuid,
  drafts: ReadonlyArray<Evidence.Draft>,
  micros: number,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>,
  admissions = noAdmissions
): ReadonlyArray<AppendReceipt> | AppendNowError | undefined => {
  const w = writers.get(service)
  return w === undefined || drafts.length === 0
    ? undefined
    : appendNow(w, chain_id, drafts, micros, ifCommitted, admissions)
}

// Whether the chain read from its start record up to `after` shows that operation started and not concluded.
const isOpenOn = (
  records: ReadonlyArray<Evidence.StoredRecord>,
  started: Evidence.StoredRecord,
  after: Evidence.StoredRecord,
  operation_id: string
) => {
  const first = records[0]
  const last = records[records.length - 1]
  return first !== undefined && first.record_id === started.record_id && first.sequence === started.sequence &&
    first.record_type === "operation_started" && first.operation_id === operation_id &&
    last !== undefined && last.record_id === after.record_id && last.chain_hash === after.chain_hash &&
    !records.some((record) => record.operation_id === operation_id && Evidence.terminalTypes.has(record.record_type))
}

/**
 * Whether records read are the chain's own: consecutive, each linked to the one before, each recomputing to its chain
 * hash. The close is sealed on the last one's hash, which the committing store checks is its head, so a store that
 * served the writer anything else than its chain (a forged start) gets a close that no real store admits.
 */
const genuine = (digest: Digest.Service, records: ReadonlyArray<Evidence.StoredRecord>) =>
  Effect.provideService(
    Effect.map(
      Effect.forEach(records, (record, i) =>
        i > 0 && (record.sequence !== records[i - 1]!.sequence + 1 ||
            record.previous_chain_hash !== records[i - 1]!.chain_hash)
          ? Effect.succeed(false)
          : Effect.map(Evidence.checkContent(record), Either.isRight)),
      (checks) => checks.every(Boolean)
    ),
    Digest,
    digest
  )

/**
 * Recovery's capability: close an operation with one terminal record after the record recovery last read (`after`),
 * only if the writer's own store shows the chain's `started` record opening it and no terminal for it up to `after`
 * (else EvidenceForbiddenError `not_open`); a chain moved on since `after` refuses it (EvidenceConflictError).
 */
export const closeOperation = (
  service: object,
  chain_id: Uuid,
  started: Evidence.StoredRecord,
  after: Evidence.StoredRecord,
  draft: Evidence.Draft
) =>
  Either.match(writerOf(service, chain_id, draft), {
    onLeft: Effect.fail,
    onRight: (w) =>
      Effect.flatMap(
        Stream.runCollect(
          Stream.takeWhile(w.store.read(chain_id, started.sequence - 1), (record) => record.sequence <= after.sequence)
        ),
        (chunk) => {
          const records = Chunk.toReadonlyArray(chunk)
          const refused = Effect.fail(forbiddenError(Object.assign({}, draft, { chain_id }), "not_open"))
          if (
            draft.operation_id === null || !Evidence.terminalTypes.has(draft.record_type) ||
            !isOpenOn(records, started, after, draft.operation_id)
          ) return refused
          return Effect.flatMap(genuine(w.digest, records), (isGenuine) =>
            isGenuine
              ? plain(Effect.map(appendFrom(w, chain_id, [draft], headOf(after), true), (receipts) => receipts[0]!))
              : refused)
        }
      )
  })

/** A writer over these services: the EvidenceWriter service's methods. */
export const make = (store: EvidenceStore.Service, digest: Digest.Service, ids: IdGenerator.Service) => {
  const w: Writer = { store, digest, ids, chains: new Map(), running: 0 }
  const service = {
    append: (chain_id: Uuid, draft: Evidence.Draft) => append(w, chain_id, draft),
    appendAfter: (chain_id: Uuid, after: Evidence.StoredRecord, draft: Evidence.Draft) =>
      appendAfter(w, chain_id, after, draft),
    appendAll: (chain_id: Uuid, drafts: ReadonlyArray<Evidence.Draft>) => plain(appendAll(w, chain_id, drafts, false)),
    release: (chain_id: Uuid, operation_id: string) => release(w, chain_id, operation_id),
    track: <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) => track(w, chain_id, operation),
    open: (boundary: TaskBoundary) => open(w, boundary),
    isOpen: (boundary: TaskBoundary) => isOpen(w, boundary),
    close: (boundary: TaskBoundary) => close(w, boundary),
    held: () => w.chains.size
  }
  writers.set(service, w)
  return service
}
