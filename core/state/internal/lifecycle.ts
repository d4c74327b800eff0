/**
 * The Run lifecycle's rules, applied once for every store: a new Run, its edges, its moves and its end.
 */
import { Effect, Schema } from "effect"
import type { Uuid } from "../../base/IdGenerator.ts"
import type { Timestamp } from "../../base/Time.ts"
import type { ActiveRunStatus, CreateRun, RunStatus, TerminalStatus } from "../Run.ts"
import { isTerminal, Run, RunTerminal } from "../Run.ts"

/** A new Run as `createRun` stores it: preparing (or, `started`, running since its creation), no terminal outcome. */
export const preparedRun = (run_id: Uuid, created_at: Timestamp, input: CreateRun): Run =>
  Run.make({
    run_id,
    status: input.started === true ? "running" : "preparing",
    created_at,
    started_at: input.started === true ? created_at : null,
    ended_at: null,
    parent_run_id: "parent_run_id" in input ? input.parent_run_id : null,
    lineage: input.lineage ?? "root",
    terminal: null,
    ...(input.policy === undefined ? {} : { policy: input.policy })
  })

const edges: { readonly [From in ActiveRunStatus]: ReadonlyArray<ActiveRunStatus> } = {
  preparing: ["queued"],
  queued: ["running"],
  running: ["paused"],
  paused: ["running"]
}

/** Whether `from -> to` is an edge of the non-terminal lifecycle. */
export const canTransition = (from: RunStatus, to: RunStatus): boolean =>
  !isTerminal(from) && edges[from].some((next) => next === to)

/** Whether a Run in `from` may end as `to`: any active status may fail, be cancelled or time out; only a started one completes. */
export const canFinish = (from: RunStatus, to: TerminalStatus): boolean =>
  !isTerminal(from) && (to !== "completed" || from === "running" || from === "paused")

const latest = (now: Timestamp, floor: Timestamp): Timestamp => now < floor ? floor : now

/** A Run moved to `to` at `now`; entering `running` the first time stamps `started_at` (never before `created_at`). */
export const advanced = (run: Run, to: ActiveRunStatus, now: Timestamp): Run =>
  new Run({
    ...run,
    status: to,
    started_at: run.started_at ?? (to === "running" ? latest(now, run.created_at) : null)
  }, { disableValidation: true })

/** The terminal outcome `finish` was given, checked before anything is read: one that is not a valid RunTerminal is a defect. */
export const checkedTerminal = (terminal: RunTerminal): Effect.Effect<RunTerminal> =>
  Effect.orDie(Schema.validate(RunTerminal)(terminal))

/** A Run ended at `now` with its one terminal outcome (never before its start). */
export const concluded = (run: Run, terminal: RunTerminal, now: Timestamp): Run =>
  new Run({
    ...run,
    status: terminal.status,
    ended_at: latest(now, run.started_at ?? run.created_at),
    terminal
  }, { disableValidation: true })
