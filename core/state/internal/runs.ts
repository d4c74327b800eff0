/**
 * The RunStore's rules over any StateStorage: a parent that must exist, lifecycle edges checked before a
 * compare-and-set, and the first terminal outcome winning while later ones become observations.
 */
import { Effect, Option } from "effect"
import { IdGenerator, type Uuid } from "../../base/IdGenerator.ts"
import * as Time from "../../base/Time.ts"
import type { ActiveRunStatus, CreateRun, RunFilter, RunStatus, RunTerminal } from "../Run.ts"
import { FinishResult, isTerminal, RunObservation } from "../Run.ts"
import { IllegalTransitionError, StateNotFoundError, type StateStoreUnavailableError } from "../StateError.ts"
import { StateStorage } from "../StateStorage.ts"
import { advanced, canFinish, canTransition, checkedTerminal, concluded, preparedRun } from "./lifecycle.ts"

// A finish decided: the Run concluded, or the terminal kept as an observation of one concluded already.
type Finished = Effect.Effect<FinishResult, StateNotFoundError | IllegalTransitionError | StateStoreUnavailableError>

/** The Runs of the StateStorage in context. */
export const makeRuns = Effect.gen(function*() {
  const storage = yield* StateStorage
  const ids = yield* IdGenerator

  const load = (run_id: string) =>
    Effect.flatMap(storage.getRun(run_id), (found) =>
      Option.match(found, {
        onNone: () => Effect.fail(new StateNotFoundError({ reason: "run", id: run_id })),
        onSome: Effect.succeed
      }))

  // The parent is looked up, then the Run built and inserted.
  const insertRun = Effect.fnUntraced(
    function*(run_id: Uuid, created_at: Time.Timestamp, input: CreateRun, parent_run_id: string | null) {
      if (parent_run_id !== null) yield* load(parent_run_id)
      const run = preparedRun(run_id, created_at, input)
      yield* storage.insertRun(run)
      return run
    }
  )

  const transitionRun = Effect.fnUntraced(
    function*(run_id: string, from: ActiveRunStatus, to: ActiveRunStatus, now: Time.Timestamp) {
      const refuse = (reason: "not_an_edge" | "stale_status", actual: RunStatus) =>
        Effect.fail(new IllegalTransitionError({ reason, run_id, from, to, actual }))
      const run = yield* load(run_id)
      if (!canTransition(from, to)) return yield* refuse("not_an_edge", run.status)
      if (run.status !== from) return yield* refuse("stale_status", run.status)
      const next = advanced(run, to, now)
      if (yield* storage.replaceRun(next, from)) return next
      return yield* refuse("stale_status", (yield* load(run_id)).status)
    }
  )

  // Under SQLite the transaction serialises writers; under a weaker isolation a lost compare-and-set decides again.
  const decide: (run_id: string, terminal: RunTerminal, now: Time.Timestamp) => Finished = Effect.fnUntraced(
    function*(run_id: string, terminal: RunTerminal, now: Time.Timestamp) {
      const run = yield* load(run_id)
      if (isTerminal(run.status)) {
        const sequence = (yield* storage.observations(run_id)).length
        yield* storage.insertObservation(
          RunObservation.make({ run_id: run.run_id, sequence, terminal, observed_at: now })
        )
        return FinishResult.make({ won: false, run })
      }
      if (!canFinish(run.status, terminal.status)) {
        return yield* new IllegalTransitionError({
          reason: "not_an_edge",
          run_id,
          from: run.status,
          to: terminal.status,
          actual: run.status
        })
      }
      const next = concluded(run, terminal, now)
      if (yield* storage.replaceRun(next, run.status)) return FinishResult.make({ won: true, run: next })
      return yield* decide(run_id, terminal, now)
    }
  )
  const finishWith = (run_id: string, terminal: RunTerminal, now: Time.Timestamp) =>
    storage.transaction(decide(run_id, terminal, now))

  return {
    durable: storage.durable,
    createRun: Effect.fn("RunStore.createRun")(function*(input: CreateRun = {}) {
      const run_id = yield* ids.uuid
      const created_at = yield* Time.now
      const parent_run_id = "parent_run_id" in input ? input.parent_run_id : null
      // The parent is looked up before the Run is built: a parent id no stored Run has (a malformed one included) is
      // StateNotFoundError, never a Run that fails to build.
      return yield* storage.transaction(insertRun(run_id, created_at, input, parent_run_id))
    }),
    getRun: Effect.fn("RunStore.getRun")(function*(run_id: string) {
      return yield* load(run_id)
    }),
    listRuns: Effect.fn("RunStore.listRuns")(function*(filter: RunFilter = {}) {
      return yield* storage.listRuns(filter)
    }),
    transition: Effect.fn("RunStore.transition")(function*(run_id: string, from: ActiveRunStatus, to: ActiveRunStatus) {
      const now = yield* Time.now
      return yield* storage.transaction(transitionRun(run_id, from, to, now))
    }),
    finish: Effect.fn("RunStore.finish")(function*(run_id: string, offered: RunTerminal) {
      const terminal = yield* checkedTerminal(offered)
      return yield* finishWith(run_id, terminal, yield* Time.now)
    }),
    observations: Effect.fn("RunStore.observations")(function*(run_id: string) {
      return yield* storage.observations(run_id)
    })
  }
})
