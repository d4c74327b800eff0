/**
 * What an evidence writer keeps per chain (its lock, the boundary it opened, its last head, the operations running
 * here and the terminals owed), and the synchronous decisions over it: whether drafts may be appended now, and after what.
 */
import type { Effect } from "effect"
import type { Sha256Hex } from "../../base/Digest.ts"
import type { Uuid } from "../../base/IdGenerator.ts"
import type * as Time from "../../base/Time.ts"
import * as Evidence from "../Evidence.ts"
import type { AppendReceipt } from "../EvidenceStore.ts"
import { BoundaryError, OperationOwnershipError, type TaskBoundary } from "../TaskBoundary.ts"
import * as ChainLock from "./chainLock.ts"

/** What a writer keeps for one chain. */
export interface ChainState {
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

/** How a boundary offered for a chain differs from the one opened on it, if it does. */
export const mismatchOf = (opened: TaskBoundary, offered: TaskBoundary) =>
  opened.task_boundary_id !== offered.task_boundary_id || opened.opened_at !== offered.opened_at
    ? "boundary_mismatch" as const
    : opened.policy.policy_id !== offered.policy.policy_id || opened.policy.version !== offered.policy.version ||
        opened.policy.digest !== offered.policy.digest
    ? "policy_mismatch" as const
    : undefined

/** A boundary's one `task_closed`. */
export const closedDraft = (boundary: TaskBoundary): Evidence.Draft => ({
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

/** A chain's state before the writer has done anything on it. */
export const make = (): ChainState => ({
  lock: ChainLock.make(),
  opened: undefined,
  head: undefined,
  fresh: false,
  operations: new Map(),
  unconfirmed: new Map(),
  owed: [],
  running: 0,
  closing: undefined
})

/**
 * A record for one of this writer's operations that it must refuse: concluded elsewhere, or (from another caller)
 * still running here.
 */
export const refusal = (
  chain_id: string,
  state: ChainState,
  drafts: ReadonlyArray<Evidence.Draft>,
  foreign: boolean
) => {
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

/** A committed terminal (a forced recovery's, say) settles what the writer still owed or awaited for its operation. */
export const concluded = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
  for (const draft of drafts) {
    const operation_id = draft.operation_id
    if (operation_id === null || !Evidence.terminalTypes.has(draft.record_type)) continue
    state.unconfirmed.delete(operation_id)
    if (state.owed.length > 0) state.owed = state.owed.filter((owed) => owed.operation_id !== operation_id)
  }
}

/** An executor's committed start: its operation runs here until released. */
export const started = (state: ChainState, drafts: ReadonlyArray<Evidence.Draft>) => {
  for (const draft of drafts) {
    if (draft.operation_id !== null && draft.record_type === "operation_started") {
      state.operations.set(draft.operation_id, false)
    }
  }
}

/** What one commit appends once the chain's state admits it: owed terminals first, then the asked drafts, at the head. */
export interface Admitted {
  readonly drafts: ReadonlyArray<Evidence.Draft>
  readonly owed: number
  readonly head: ChainState["head"]
  readonly closing: boolean
}

/** The chain's state decides, synchronously, whether these drafts may be appended now, and after what. */
export const admit = (
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

// Where admitted drafts are sealed: after the head, under these ids, at this time.
export const positionsOf = (
  chain_id: Uuid,
  { head }: Admitted,
  record_ids: ReadonlyArray<Uuid>,
  created_at: Time.Timestamp
) => ({
  chain_id,
  sequence: head === undefined ? 0 : head.sequence + 1,
  previous_chain_hash: head?.hash ?? null,
  record_ids,
  created_at
})

// The chain's state once drafts committed: its head, the owed terminals appended, the operations concluded or started.
export const committed = (
  state: ChainState,
  asked: ReadonlyArray<Evidence.Draft>,
  admitted: Admitted,
  receipts: ReadonlyArray<AppendReceipt>,
  starts: boolean
) => {
  const last = receipts[receipts.length - 1]
  if (last !== undefined) {
    state.head = { sequence: last.sequence, hash: last.head_hash, closed: admitted.closing }
    state.fresh = true
  }
  if (admitted.owed > 0) state.owed = []
  concluded(state, asked)
  if (starts) started(state, asked)
  return admitted.owed === 0 ? receipts : receipts.slice(admitted.owed)
}

// After a failed append the head is unknown, and the terminals of starts whose answer was lost are owed if they landed.
export const failed = (state: ChainState, ifCommitted: (() => ReadonlyArray<Evidence.Draft>) | undefined) => {
  state.fresh = false
  for (const terminal of ifCommitted?.() ?? []) state.unconfirmed.set(terminal.operation_id!, terminal)
}
