/**
 * The in-memory StateStore: reference semantics for every other layer. It is not durable, so it
 * cannot claim resume or history: everything is gone when its layer is released.
 *
 * Runtimes: every one (Node, Deno, edge).
 */
import { Effect, Either, Layer, Option } from "effect"
import { IdGenerator } from "../../core/base/IdGenerator.ts"
import type { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import type { Cursor } from "../../core/evidence/EvidenceStore.ts"
import * as StateStore from "../../core/state/StateStore.ts"

/** A fresh in-memory store; run and intent ids come from the IdGenerator in context. */
export const make = Effect.gen(function*() {
  const ids = yield* IdGenerator
  const runs = new Map<string, StateStore.Run>()
  const observations = new Map<string, Array<StateStore.RunObservation>>()
  const attempts = new Map<string, StateStore.OperationAttempt>()
  const intents = new Map<string, StateStore.OutboxIntent>()
  const cursors = new Map<string, Cursor>()
  const records = new Map<string, StateStore.ProjectedRecord>()
  const recordsById = new Map<string, Array<StateStore.ProjectedRecord>>()
  const recordsAt = new Map<string, Array<StateStore.ProjectedRecord>>()
  const operations = new Map<string, StateStore.ProjectedOperation>()

  const findRun = (run_id: string) => {
    const run = runs.get(run_id)
    return run === undefined
      ? Either.left(new StateStore.StateNotFoundError({ reason: "run", id: run_id }))
      : Either.right(run)
  }

  const findIntent = (intent_id: string) => {
    const intent = intents.get(intent_id)
    return intent === undefined
      ? Either.left(new StateStore.StateNotFoundError({ reason: "intent", id: intent_id }))
      : Either.right(intent)
  }

  // Each write reads, decides and writes inside one synchronous closure, so no other fiber runs in between.
  const atomically = <A, E>(step: () => Either.Either<A, E>): Effect.Effect<A, E> => Effect.suspend(step)

  const service: StateStore.StateStore.Service = {
    durable: false,
    createRun: Effect.fn("StateStore.createRun")(function*(input: StateStore.CreateRun = {}) {
      const run_id = yield* ids.uuid
      const created_at = yield* Time.now
      const parent_run_id = "parent_run_id" in input ? input.parent_run_id : null
      return yield* atomically(() => {
        if (parent_run_id !== null && !runs.has(parent_run_id)) {
          return Either.left(new StateStore.StateNotFoundError({ reason: "run", id: parent_run_id }))
        }
        const run = StateStore.preparedRun(run_id, created_at, input)
        runs.set(run_id, run)
        return Either.right(run)
      })
    }),
    getRun: Effect.fn("StateStore.getRun")(function*(run_id: string) {
      return yield* atomically(() => findRun(run_id))
    }),
    listRuns: Effect.fn("StateStore.listRuns")(function*(filter: StateStore.RunFilter = {}) {
      return yield* Effect.sync(() =>
        [...runs.values()].filter((run) =>
          (filter.status === undefined || filter.status.includes(run.status)) &&
          (filter.parent_run_id === undefined || run.parent_run_id === filter.parent_run_id)
        )
      )
    }),
    transition: Effect.fn("StateStore.transition")(
      function*(run_id: string, from: StateStore.ActiveRunStatus, to: StateStore.ActiveRunStatus) {
        const now = yield* Time.now
        return yield* atomically(() =>
          Either.flatMap(findRun(run_id), (run) => {
            if (!StateStore.canTransition(from, to) || run.status !== from) {
              return Either.left(
                new StateStore.IllegalTransitionError({
                  reason: StateStore.canTransition(from, to) ? "stale_status" : "not_an_edge",
                  run_id,
                  from,
                  to,
                  actual: run.status
                })
              )
            }
            const next = StateStore.advanced(run, to, now)
            runs.set(run_id, next)
            return Either.right(next)
          })
        )
      }
    ),
    finish: Effect.fn("StateStore.finish")(function*(run_id: string, offered: StateStore.RunTerminal) {
      const terminal = yield* StateStore.checkedTerminal(offered)
      const now = yield* Time.now
      return yield* atomically(() =>
        Either.flatMap(findRun(run_id), (run) => {
          if (StateStore.isTerminal(run.status)) {
            const audit = observations.get(run_id) ?? []
            audit.push(
              StateStore.RunObservation.make({ run_id: run.run_id, sequence: audit.length, terminal, observed_at: now })
            )
            observations.set(run_id, audit)
            return Either.right(StateStore.FinishResult.make({ won: false, run }))
          }
          if (!StateStore.canFinish(run.status, terminal.status)) {
            return Either.left(
              new StateStore.IllegalTransitionError({
                reason: "not_an_edge",
                run_id,
                from: run.status,
                to: terminal.status,
                actual: run.status
              })
            )
          }
          const next = StateStore.concluded(run, terminal, now)
          runs.set(run_id, next)
          return Either.right(StateStore.FinishResult.make({ won: true, run: next }))
        })
      )
    }),
    observations: Effect.fn("StateStore.observations")(function*(run_id: string) {
      return yield* Effect.sync(() => [...(observations.get(run_id) ?? [])])
    }),
    commitAttempt: Effect.fn("StateStore.commitAttempt")(function*(offered: StateStore.CommitAttempt) {
      const input = yield* StateStore.checkedCommit(offered)
      const { attempt } = input
      const intent_ids: Array<Uuid> = []
      for (let i = 0; i < input.intents.length; i++) intent_ids.push(yield* ids.uuid)
      const now = yield* Time.now
      return yield* atomically(() =>
        Either.flatMap(findRun(attempt.run_id), () => {
          if (attempts.has(attempt.attempt_id)) {
            return Either.left(new StateStore.DuplicateAttemptError({ attempt_id: attempt.attempt_id }))
          }
          // Everything is built before the first write, so nothing that fails to build leaves half a commit behind.
          const committed = StateStore.CommittedAttempt.make({
            attempt,
            intents: input.intents.map((draft, i) => StateStore.pendingIntent(draft, intent_ids[i]!, attempt, now))
          })
          attempts.set(attempt.attempt_id, attempt)
          for (const intent of committed.intents) intents.set(intent.intent_id, intent)
          return Either.right(committed)
        })
      )
    }),
    listAttempts: Effect.fn("StateStore.listAttempts")(function*(run_id: string) {
      return yield* Effect.sync(() => [...attempts.values()].filter((attempt) => attempt.run_id === run_id))
    }),
    pendingIntents: Effect.fn("StateStore.pendingIntents")(function*(limit: number) {
      return yield* Effect.sync(() =>
        [...intents.values()].filter((intent) => intent.delivery_state === "pending").slice(
          0,
          StateStore.rowLimit(limit)
        )
      )
    }),
    markDelivered: Effect.fn("StateStore.markDelivered")(function*(intent_id: string) {
      const now = yield* Time.now
      return yield* atomically(() =>
        Either.map(findIntent(intent_id), (intent) => {
          const next = StateStore.delivered(intent, now)
          intents.set(intent_id, next)
          return next
        })
      )
    }),
    markFailed: Effect.fn("StateStore.markFailed")(
      function*(intent_id: string, reason_code: string, options?: StateStore.MarkFailedOptions) {
        return yield* atomically(() =>
          Either.map(findIntent(intent_id), (intent) => {
            const next = StateStore.undelivered(intent, reason_code, options)
            intents.set(intent_id, next)
            return next
          })
        )
      }
    ),
    projectionCursor: Effect.fn("StateStore.projectionCursor")(function*(projector: string) {
      return yield* Effect.sync(() => Option.fromNullable(cursors.get(projector)))
    }),
    applyProjection: Effect.fn("StateStore.applyProjection")(function*(input: StateStore.ApplyProjection) {
      const concluded = input.attempts ?? []
      const intent_ids: Array<Uuid> = []
      for (let i = 0; i < concluded.length; i++) intent_ids.push(yield* ids.uuid)
      const now = yield* Time.now
      return yield* atomically(() => {
        const seen = new Set(attempts.keys())
        const offered = concluded.filter((attempt) =>
          !seen.has(attempt.attempt_id) && runs.has(attempt.run_id) && seen.add(attempt.attempt_id)
        )
        return Either.map(
          StateStore.planProjection(input.rows, {
            records: [
              ...[...new Set(input.rows.map((row) => row.record_id))].flatMap((id) => recordsById.get(id) ?? []),
              ...[...new Set(input.rows.map((row) => StateStore.positionKey(row.chain_id, row.sequence)))].flatMap(
                (position) => recordsAt.get(position) ?? []
              )
            ],
            operations: input.rows.flatMap((row) => {
              const operation = row.operation_id === null ? undefined : operations.get(row.operation_id)
              return operation === undefined ? [] : [operation]
            })
          }),
          (plan) => {
            for (const row of plan.inserts) {
              records.set(`${row.chain_id}/${row.record_id}/${row.projection_version}`, row)
              recordsById.set(row.record_id, [...(recordsById.get(row.record_id) ?? []), row])
              const position = StateStore.positionKey(row.chain_id, row.sequence)
              recordsAt.set(position, [...(recordsAt.get(position) ?? []), row])
            }
            for (const operation of plan.operations) operations.set(operation.operation_id, operation)
            offered.forEach((attempt, i) => {
              const intent = StateStore.pendingIntent(StateStore.outcomeIntent(attempt), intent_ids[i]!, attempt, now)
              attempts.set(attempt.attempt_id, attempt)
              intents.set(intent.intent_id, intent)
            })
            cursors.set(input.projector, input.cursor)
            return StateStore.ProjectionApplied.make({
              projector: input.projector,
              cursor: input.cursor,
              inserted: plan.inserts.length,
              unchanged: plan.unchanged
            })
          }
        )
      })
    }),
    projectedOperations: Effect.fn("StateStore.projectedOperations")(function*(filter?: StateStore.OperationFilter) {
      return yield* Effect.sync(() =>
        [...operations.values()].filter((operation) => StateStore.matchesOperation(operation, filter))
      )
    }),
    projectedRecordCount: Effect.fn("StateStore.projectedRecordCount")(function*(filter: StateStore.RecordFilter = {}) {
      return yield* Effect.sync(() =>
        filter.chain_id === undefined
          ? records.size
          : [...records.values()].filter((row) => row.chain_id === filter.chain_id).length
      )
    }),
    projectedHash: Effect.fn("StateStore.projectedHash")(function*(chain_id: string, sequence: number) {
      // Every row at a position is one record with one hash (applyProjection refuses any other): the first stands for all.
      return yield* Effect.sync(() =>
        Option.map(
          Option.fromNullable(recordsAt.get(StateStore.positionKey(chain_id, sequence))?.[0]),
          (row) => row.chain_hash
        )
      )
    })
  }
  return service
})

/** The in-memory StateStore (not durable); needs an IdGenerator. */
export const layer: Layer.Layer<StateStore.StateStore, never, IdGenerator> = Layer.effect(StateStore.StateStore, make)
