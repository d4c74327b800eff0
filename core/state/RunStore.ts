/**
 * The RunStore port (spec/runs.md): Runs with a compare-and-set lifecycle and one terminal outcome, built once over
 * the StateStorage driver in context.
 */
import { Context, Layer } from "effect"
import type { Effect } from "effect"
import type { IdGenerator } from "../base/IdGenerator.ts"
import { makeRuns } from "./internal/runs.ts"
import type { ActiveRunStatus, CreateRun, FinishResult, Run, RunFilter, RunObservation, RunTerminal } from "./Run.ts"
import type { IllegalTransitionError, StateNotFoundError, StateStoreUnavailableError } from "./StateError.ts"
import type { StateStorage } from "./StateStorage.ts"

/** Runs: created once, moved by compare-and-set, ended by exactly one terminal outcome. */
export class RunStore extends Context.Tag("writ/RunStore")<RunStore, RunStore.Service>() {}

/** The RunStore service. */
export declare namespace RunStore {
  /** Every method; a durable store commits each write atomically and survives restart. */
  export interface Service {
    /** Whether Runs survive a restart; an in-memory store is not durable and cannot claim resume or history. */
    readonly durable: boolean
    /** Create a Run in `preparing` (or `running`, `started`), its id minted by the store; a child names an existing parent. */
    readonly createRun: (
      input?: CreateRun
    ) => Effect.Effect<Run, StateNotFoundError | StateStoreUnavailableError>
    /** A Run by id. */
    readonly getRun: (run_id: string) => Effect.Effect<Run, StateNotFoundError | StateStoreUnavailableError>
    /** Runs in creation order, optionally by status or parent. */
    readonly listRuns: (filter?: RunFilter) => Effect.Effect<ReadonlyArray<Run>, StateStoreUnavailableError>
    /** Compare-and-set one non-terminal lifecycle edge: refused unless the Run is in `from` and `from -> to` is an edge. */
    readonly transition: (
      run_id: string,
      from: ActiveRunStatus,
      to: ActiveRunStatus
    ) => Effect.Effect<Run, StateNotFoundError | IllegalTransitionError | StateStoreUnavailableError>
    /** One compare-and-set to a terminal outcome: the first wins; a later one is recorded as an observation and gets the winner. */
    readonly finish: (
      run_id: string,
      terminal: RunTerminal
    ) => Effect.Effect<FinishResult, StateNotFoundError | IllegalTransitionError | StateStoreUnavailableError>
    /** The terminal outcomes offered after a Run had ended, in order. */
    readonly observations: (
      run_id: string
    ) => Effect.Effect<ReadonlyArray<RunObservation>, StateStoreUnavailableError>
  }
}

/** The RunStore over a StateStorage driver; ids and times come from the IdGenerator and Clock in context. */
export const make: Effect.Effect<RunStore.Service, never, StateStorage | IdGenerator> = makeRuns

/** The RunStore layer over the StateStorage in context. */
export const layer: Layer.Layer<RunStore, never, StateStorage | IdGenerator> = Layer.effect(RunStore, make)
