/**
 * The evidence writer's implementation: per chain, one lock over head lookup, record construction and append, the
 * operations running here, the terminal records owed for starts whose answer was lost, and the boundary's close.
 */
import { Chunk, Effect, Option, Stream } from "effect"
import type { Digest, Sha256Hex } from "../../base/Digest.ts"
import { type IdGenerator, type Uuid, uuidsWith } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import * as Evidence from "../Evidence.ts"
import type { AppendReceipt, EvidenceStore } from "../EvidenceStore.ts"
import { BoundaryError, OperationOwnershipError, type TaskBoundary } from "../TaskBoundary.ts"
import * as ChainLock from "./chainLock.ts"

/** What every function of one writer shares: its store, digest, ids, and the state of each chain it holds. */
interface Writer {
  readonly store: EvidenceStore.Service
  readonly digest: Digest.Service
  readonly ids: IdGenerator.Service
  readonly chains: Map<string, ChainState>
}

interface ChainState {
  readonly lock: ChainLock.ChainLock
  /** The boundary this writer opened on the chain: only the writer that opened a boundary runs and closes it. */
  opened: TaskBoundary | undefined
  /** The last head this writer knew; `fresh` while its own last append on the chain succeeded. */
  head: { readonly sequence: number; readonly hash: Sha256Hex; readonly closed: boolean } | undefined
  fresh: boolean
  /** Operations whose executor still runs them here (from their start to `release`): true once concluded elsewhere. */
  readonly operations: Map<string, boolean>
  /** Terminal drafts for starts whose append failed, by operation: owed if the start turns out committed. */
  readonly unconfirmed: Map<string, Evidence.Draft>
  /** Terminal drafts owed for starts found committed, appended ahead of the chain's next records. */
  owed: ReadonlyArray<Evidence.Draft>
  /** Operations running under `track`. */
  running: number
  /** Set when a close begins, never unset; open once no operation is running. */
  closing: Effect.Latch | undefined
}

// How a boundary offered for a chain differs from the one opened on it, if it does.
const mismatchOf = (opened: TaskBoundary, offered: TaskBoundary) =>
  opened.task_boundary_id !== offered.task_boundary_id || opened.opened_at !== offered.opened_at
    ? "boundary_mismatch" as const
    : opened.policy.policy_id !== offered.policy.policy_id || opened.policy.version !== offered.policy.version ||
        opened.policy.digest !== offered.policy.digest
    ? "policy_mismatch" as const
    : undefined

// A boundary's one `task_closed`.
const closedDraft = (boundary: TaskBoundary): Evidence.Draft => ({
  record_type: "task_closed",
  operation_id: null,
  policy_id: boundary.policy.policy_id,
  policy_version: boundary.policy.version,
  payload: {
    task_boundary_id: boundary.task_boundary_id,
    policy_digest: boundary.policy.digest,
    opened_at: boundary.opened_at
  }
})

const stateOf = (w: Writer, chain_id: string) => {
  let state = w.chains.get(chain_id)
  if (state === undefined) {
    state = {
      lock: ChainLock.make(),
      opened: undefined,
      head: undefined,
      fresh: false,
      operations: new Map(),
      unconfirmed: new Map(),
      owed: [],
      running: 0,
      closing: undefined
    }
    w.chains.set(chain_id, state)
  }
  return state
}

const loadHead = Effect.fnUntraced(function*(w: Writer, chain_id: string) {
  const head = yield* w.store.head(chain_id)
  if (Option.isNone(head)) return undefined
  const last = yield* Stream.runHead(w.store.read(chain_id, head.value.sequence - 1))
  return { ...head.value, closed: Option.isSome(last) && last.value.record_type === "task_closed" }
})

// The chain's head after a failed append, with what the records since tell about this writer's operations: one
// another writer concluded, a start whose answer was lost but which committed (its terminal is owed), and an owed
// terminal that committed after all.
const catchUp = Effect.fnUntraced(function*(w: Writer, chain_id: string, state: ChainState) {
  const known = state.head
  if (state.operations.size === 0 && state.unconfirmed.size === 0 && state.owed.length === 0) {
    return yield* loadHead(w, chain_id)
  }
  const since = Chunk.toReadonlyArray(yield* Stream.runCollect(w.store.read(chain_id, known?.sequence ?? -1)))
  for (const record of since) {
    const operation_id = record.operation_id
    if (operation_id === null) continue
    if (record.record_type === "operation_started") {
      const terminal = state.unconfirmed.get(operation_id)
      if (terminal !== undefined) state.owed = [...state.owed, terminal]
    } else if (Evidence.terminalTypes.has(record.record_type)) {
      if (state.owed.some((draft) => draft.operation_id === operation_id)) {
        state.owed = state.owed.filter((draft) => draft.operation_id !== operation_id)
      } else if (state.operations.has(operation_id)) {
        state.operations.set(operation_id, true)
      }
    }
  }
  state.unconfirmed.clear()
  const last = since[since.length - 1]
  return last === undefined ? known : {
    sequence: last.sequence,
    hash: last.chain_hash as Sha256Hex,
    closed: last.record_type === "task_closed"
  }
})

// A record for one of this writer's operations that it must refuse: concluded elsewhere, or (from another caller)
// still running here.
const refusal = (chain_id: string, state: ChainState, drafts: ReadonlyArray<Evidence.Draft>, foreign: boolean) => {
  for (const draft of drafts) {
    const concluded = draft.operation_id === null ? undefined : state.operations.get(draft.operation_id)
    if (concluded === undefined || (concluded === false && !foreign)) continue
    return new OperationOwnershipError({
      reason: concluded ? "concluded_elsewhere" : "running_here",
      chain_id,
      operation_id: draft.operation_id!
    })
  }
  return undefined
}

// A committed terminal (a forced recovery's, say) settles what the writer still owed or awaited for its operation.
const concluded = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
  for (const draft of drafts) {
    const operation_id = draft.operation_id
    if (operation_id === null || !Evidence.terminalTypes.has(draft.record_type)) continue
    state.unconfirmed.delete(operation_id)
    if (state.owed.length > 0) state.owed = state.owed.filter((owed) => owed.operation_id !== operation_id)
  }
}

// An executor's committed start: its operation runs here until released.
const started = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
  for (const draft of drafts) {
    if (draft.operation_id !== null && draft.record_type === "operation_started") {
      state.operations.set(draft.operation_id, false)
    }
  }
}

// What one commit appends once the chain's state admits it: owed terminals first, then the asked drafts, at the head.
interface Admitted {
  readonly drafts: ReadonlyArray<Evidence.Draft>
  readonly owed: number
  readonly head: ChainState["head"]
  readonly closing: boolean
}

// The chain's state decides, synchronously, whether these drafts may be appended now, and after what.
const admit = (
  chain_id: Uuid,
  state: ChainState,
  asked: ReadonlyArray<Evidence.Draft>,
  expected: ChainState["head"] | undefined
): BoundaryError | OperationOwnershipError | Admitted => {
  const foreign = expected !== undefined
  const refused = refusal(chain_id, state, asked, foreign)
  if (refused !== undefined) return refused
  const owed = foreign ? [] : state.owed
  const drafts = owed.length === 0 ? asked : [...owed, ...asked]
  const head = expected ?? state.head
  const closing = drafts.findIndex((draft) => draft.record_type === "task_closed")
  if (head?.closed === true || (closing !== -1 && closing < drafts.length - 1)) {
    return new BoundaryError({ reason: "closed", chain_id })
  }
  if (closing !== -1 && state.opened === undefined) return new BoundaryError({ reason: "abandoned", chain_id })
  if (state.closing !== undefined && drafts.some((draft) => draft.record_type === "operation_started")) {
    return new BoundaryError({ reason: "closing", chain_id })
  }
  return { drafts, owed: owed.length, head, closing: closing !== -1 }
}

// The admitted drafts sealed at the head (without an Effect where ids and hashes are synchronous) and appended.
const commit = (w: Writer, chain_id: Uuid, admitted: Admitted, created_at: Time.Timestamp) => {
  const { drafts, head } = admitted
  const at = (record_ids: ReadonlyArray<Uuid>) => ({
    chain_id,
    sequence: head === undefined ? 0 : head.sequence + 1,
    previous_chain_hash: head?.hash ?? null,
    record_ids,
    created_at
  })
  const sha256 = w.digest.sha256TextSync
  const uuid = w.ids.uuidSync
  const sealed = sha256 !== undefined && uuid !== undefined
    ? Evidence.sealAllSync(sha256, drafts, at(Array.from({ length: drafts.length }, uuid)))
    : Effect.flatMap(
      uuidsWith(w.ids, drafts.length),
      (record_ids) => Evidence.sealAllWith(w.digest, drafts, at(record_ids))
    )
  return Effect.flatMap(sealed, w.store.appendAll)
}

const appendFrom = (
  w: Writer,
  chain_id: Uuid,
  asked: ReadonlyArray<Evidence.Draft>,
  expected: ChainState["head"] | undefined,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>
) => {
  if (asked.length === 0) return Effect.succeed<ReadonlyArray<AppendReceipt>>([])
  const state = stateOf(w, chain_id)
  const foreign = expected !== undefined
  const append = Effect.clockWith((clock): Effect.Effect<
    ReadonlyArray<AppendReceipt>,
    Effect.Effect.Error<ReturnType<typeof commit>> | BoundaryError | OperationOwnershipError
  > => {
    const admitted = admit(chain_id, state, asked, expected)
    if (!("drafts" in admitted)) return Effect.fail(admitted)
    const created_at = Time.ofClock(clock)
    return Effect.map(commit(w, chain_id, admitted, created_at), (receipts) => {
      const last = receipts[receipts.length - 1]
      if (last !== undefined) {
        state.head = { sequence: last.sequence, hash: last.head_hash, closed: admitted.closing }
        state.fresh = true
      }
      if (admitted.owed > 0) state.owed = []
      concluded(state, asked)
      if (ifCommitted !== undefined) started(state, asked)
      return admitted.owed === 0 ? receipts : receipts.slice(admitted.owed)
    })
  })
  const body = Effect.suspend(() => {
    const tracking = state.operations.size > 0 || state.unconfirmed.size > 0 || state.owed.length > 0
    if (state.fresh || (foreign && !tracking)) return append
    return Effect.flatMap(catchUp(w, chain_id, state), (head) => {
      state.head = head
      state.fresh = true
      return append
    })
  })
  // Waiting for the lock can be interrupted; an append, once begun, runs to its commit or its failure.
  return ChainLock.withLock(state.lock, body, () => {
    state.fresh = false
    for (const terminal of ifCommitted?.() ?? []) state.unconfirmed.set(terminal.operation_id!, terminal)
  })
}
const appendAll = (
  w: Writer,
  chain_id: Uuid,
  drafts: ReadonlyArray<Evidence.Draft>,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>
) => appendFrom(w, chain_id, drafts, undefined, ifCommitted)
const append = (w: Writer, chain_id: Uuid, draft: Evidence.Draft) =>
  Effect.map(appendAll(w, chain_id, [draft]), (receipts) => receipts[0]!)
const appendAfter = (w: Writer, chain_id: Uuid, after: Evidence.StoredRecord, draft: Evidence.Draft) =>
  Effect.map(
    appendFrom(w, chain_id, [draft], {
      sequence: after.sequence,
      hash: after.chain_hash as Sha256Hex,
      closed: after.record_type === "task_closed"
    }),
    (receipts) => receipts[0]!
  )

// Counted and released in one uninterruptible region, so no exit of the operation can skip the release. A chain this
// writer holds nothing for has no boundary open here: the operation is refused before it starts, and leaves no state.
const track = <A, E>(w: Writer, chain_id: Uuid, operation: Effect.Effect<A, E>) =>
  Effect.uninterruptibleMask((restore) => {
    const state = w.chains.get(chain_id)
    if (state === undefined) return restore(operation)
    state.running++
    return Effect.ensuring(
      restore(operation),
      Effect.sync(() => {
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

const open = (w: Writer, boundary: TaskBoundary) =>
  Effect.suspend(() => {
    const { chain_id } = boundary
    const state = stateOf(w, chain_id)
    return ChainLock.withLock(
      state.lock,
      Effect.gen(function*() {
        if (state.opened !== undefined || state.head !== undefined || Option.isSome(yield* w.store.head(chain_id))) {
          return yield* new BoundaryError({ reason: "in_use", chain_id })
        }
        state.opened = boundary
      })
    )
  })

const isOpen = (w: Writer, boundary: TaskBoundary) => {
  const state = w.chains.get(boundary.chain_id)
  return state?.opened !== undefined && state.closing === undefined &&
    mismatchOf(state.opened, boundary) === undefined
}

const release = (w: Writer, chain_id: Uuid, operation_id: string) =>
  Effect.sync(() => void w.chains.get(chain_id)?.operations.delete(operation_id))

/** A writer over these services: the EvidenceWriter service's methods. */
export const make = (store: EvidenceStore.Service, digest: Digest.Service, ids: IdGenerator.Service) => {
  const w: Writer = { store, digest, ids, chains: new Map() }
  return {
    append: (chain_id: Uuid, draft: Evidence.Draft) => append(w, chain_id, draft),
    appendAfter: (chain_id: Uuid, after: Evidence.StoredRecord, draft: Evidence.Draft) =>
      appendAfter(w, chain_id, after, draft),
    appendAll: (
      chain_id: Uuid,
      drafts: ReadonlyArray<Evidence.Draft>,
      ifCommitted?: () => ReadonlyArray<Evidence.Draft>
    ) => appendAll(w, chain_id, drafts, ifCommitted),
    release: (chain_id: Uuid, operation_id: string) => release(w, chain_id, operation_id),
    track: <A, E>(chain_id: Uuid, operation: Effect.Effect<A, E>) => track(w, chain_id, operation),
    open: (boundary: TaskBoundary) => open(w, boundary),
    isOpen: (boundary: TaskBoundary) => isOpen(w, boundary),
    close: (boundary: TaskBoundary) => close(w, boundary),
    held: () => w.chains.size
  }
}
