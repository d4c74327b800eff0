/**
 * The AttemptStore's rules over any StateStorage: input checked before anything is touched, an attempt only inside
 * a stored Run and only once, and a settled intent that stays as it is.
 */
import { Effect, Option } from "effect"
import { IdGenerator } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import type { CommitAttempt, MarkFailedOptions, OutboxIntent } from "../Attempt.ts"
import { CommittedAttempt } from "../Attempt.ts"
import { DuplicateAttemptError, StateNotFoundError } from "../StateError.ts"
import { StateStorage } from "../StateStorage.ts"
import { checkedCommit, delivered, pendingIntent, rowLimit, undelivered } from "./outbox.ts"

/** The attempts and outbox of the StateStorage in context. */
export const makeAttempts = Effect.gen(function*() {
  const storage = yield* StateStorage
  const ids = yield* IdGenerator

  // Read, decide, write: one transaction, so a failure at any step leaves the intent as it was.
  const redeliverIn = Effect.fnUntraced(function*(intent_id: string, step: (intent: OutboxIntent) => OutboxIntent) {
    const found = yield* storage.getIntent(intent_id)
    if (Option.isNone(found)) return yield* new StateNotFoundError({ reason: "intent", id: intent_id })
    const next = step(found.value)
    if (next !== found.value) yield* storage.saveDelivery(next)
    return next
  })
  const redeliver = (intent_id: string, step: (intent: OutboxIntent) => OutboxIntent) =>
    storage.transaction(redeliverIn(intent_id, step))

  // The attempt inserted, once its Run is found and no attempt of its id is stored.
  const insertCommitted = Effect.fnUntraced(function*(committed: CommittedAttempt) {
    const { attempt } = committed
    if (Option.isNone(yield* storage.getRun(attempt.run_id))) {
      return yield* new StateNotFoundError({ reason: "run", id: attempt.run_id })
    }
    if (yield* storage.hasAttempt(attempt.attempt_id)) {
      return yield* new DuplicateAttemptError({ attempt_id: attempt.attempt_id })
    }
    yield* storage.insertAttempt(committed)
    return committed
  })

  return {
    commitAttempt: Effect.fn("AttemptStore.commitAttempt")(function*(offered: CommitAttempt) {
      const input = yield* checkedCommit(offered)
      const { attempt } = input
      const now = yield* Time.now
      const intents = []
      for (const draft of input.intents) intents.push(pendingIntent(draft, yield* ids.uuid, attempt, now))
      // Everything is built before the first write, so nothing that fails to build leaves half a commit behind.
      const committed = CommittedAttempt.make({ attempt, intents })
      return yield* storage.transaction(insertCommitted(committed))
    }),
    listAttempts: Effect.fn("AttemptStore.listAttempts")(function*(run_id: string) {
      return yield* storage.listAttempts(run_id)
    }),
    pendingIntents: Effect.fn("AttemptStore.pendingIntents")(function*(limit: number) {
      return yield* storage.pendingIntents(rowLimit(limit))
    }),
    markDelivered: Effect.fn("AttemptStore.markDelivered")(function*(intent_id: string) {
      const now = yield* Time.now
      return yield* redeliver(intent_id, (intent) => delivered(intent, now))
    }),
    markFailed: Effect.fn("AttemptStore.markFailed")(
      function*(intent_id: string, reason_code: string, options?: MarkFailedOptions) {
        return yield* redeliver(intent_id, (intent) => undelivered(intent, reason_code, options))
      }
    )
  }
})
