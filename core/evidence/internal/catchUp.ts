/**
 * A chain's head as its store has it, read again after an append whose answer was lost or refused, with what the
 * records since tell the writer about its own operations.
 */
import { Chunk, Effect, Option, Stream } from "effect"
import type { Sha256Hex } from "../../base/Digest.ts"
import * as Evidence from "../Evidence.ts"
import type { EvidenceStore } from "../EvidenceStore.ts"
import type * as ChainState from "./chainState.ts"

const loadHead = Effect.fnUntraced(function*(store: EvidenceStore.Service, chain_id: string) {
  const head = yield* store.head(chain_id)
  if (Option.isNone(head)) return undefined
  const last = yield* Stream.runHead(store.read(chain_id, head.value.sequence - 1))
  return Object.assign({}, head.value, { closed: Option.isSome(last) && last.value.record_type === "task_closed" })
})

/**
 * The chain's head after a failed append, with what the records since tell about this writer's operations: one
 * another writer concluded, a start whose answer was lost but which committed (its terminal is owed), and an owed
 * terminal that committed after all.
 */
export const catchUp = Effect.fnUntraced(function*(
  store: EvidenceStore.Service,
  chain_id: string,
  state: ChainState.ChainState
) {
  const known = state.head
  if (state.operations.size === 0 && state.unconfirmed.size === 0 && state.owed.length === 0) {
    return yield* loadHead(store, chain_id)
  }
  const since = Chunk.toReadonlyArray(yield* Stream.runCollect(store.read(chain_id, known?.sequence ?? -1)))
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
