/**
 * The ProjectionStore's rules over any StateStorage: a batch planned against what is stored (a conflict writes
 * nothing), and each concluded attempt committed with its outcome intent once, only inside a Run the store holds.
 */
import { Effect, Option } from "effect"
import { IdGenerator, type Uuid } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import type { CommittedAttempt } from "../Attempt.ts"
import { outcomeIntent } from "../Attempt.ts"
import type { ApplyProjection, OperationFilter, RecordFilter } from "../Projection.ts"
import { ProjectionApplied } from "../Projection.ts"
import { StateStorage } from "../StateStorage.ts"
import { pendingIntent } from "./outbox.ts"
import { planProjection } from "./plan.ts"

/** The projection of the StateStorage in context. */
export const makeProjection = Effect.gen(function*() {
  const storage = yield* StateStorage
  const ids = yield* IdGenerator

  // A governed attempt projected from its terminal record, with its outcome intent; one already stored (or offered
  // twice) is kept, and one whose Run this store does not hold is not an attempt here.
  const newAttempts = Effect.fnUntraced(
    function*(input: ApplyProjection, intent_ids: ReadonlyArray<Uuid>, now: Time.Timestamp) {
      const seen = new Set<string>()
      const fresh: Array<CommittedAttempt> = []
      for (const [i, attempt] of (input.attempts ?? []).entries()) {
        if (seen.has(attempt.attempt_id)) continue
        seen.add(attempt.attempt_id)
        if (yield* storage.hasAttempt(attempt.attempt_id)) continue
        if (Option.isNone(yield* storage.getRun(attempt.run_id))) continue
        fresh.push({ attempt, intents: [pendingIntent(outcomeIntent(attempt), intent_ids[i]!, attempt, now)] })
      }
      return fresh
    }
  )

  // The rows planned and written with the new attempts, at the cursor they reach.
  const project = Effect.fnUntraced(
    function*(input: ApplyProjection, intent_ids: ReadonlyArray<Uuid>, now: Time.Timestamp) {
      const plan = yield* planProjection(input.rows, yield* storage.projectionBasis(input.rows))
      yield* storage.writeProjection({
        projector: input.projector,
        cursor: input.cursor,
        inserts: plan.inserts,
        operations: plan.operations,
        attempts: yield* newAttempts(input, intent_ids, now)
      })
      return ProjectionApplied.make({
        projector: input.projector,
        cursor: input.cursor,
        inserted: plan.inserts.length,
        unchanged: plan.unchanged
      })
    }
  )

  return {
    projectionCursor: Effect.fn("ProjectionStore.projectionCursor")(function*(projector: string) {
      return yield* storage.cursor(projector)
    }),
    applyProjection: Effect.fn("ProjectionStore.applyProjection")(function*(input: ApplyProjection) {
      const intent_ids: Array<Uuid> = []
      for (let i = 0; i < (input.attempts ?? []).length; i++) intent_ids.push(yield* ids.uuid)
      const now = yield* Time.now
      return yield* storage.transaction(project(input, intent_ids, now))
    }),
    projectedOperations: Effect.fn("ProjectionStore.projectedOperations")(function*(filter: OperationFilter = {}) {
      return yield* storage.operations(filter)
    }),
    projectedRecordCount: Effect.fn("ProjectionStore.projectedRecordCount")(function*(filter: RecordFilter = {}) {
      return yield* storage.recordCount(filter)
    }),
    projectedHash: Effect.fn("ProjectionStore.projectedHash")(function*(chain_id: string, sequence: number) {
      return yield* storage.hashAt(chain_id, sequence)
    })
  }
})
