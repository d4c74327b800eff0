/**
 * The observation plane's own record of a run: what the provider's stream said, in order, kept apart from every
 * evidence chain (an observation is never evidence and never authorises anything), keyed by the run's operation id.
 */
import { Context } from "effect"
import type { Effect } from "effect"
import type { ProviderObservation } from "./ProviderObservation.ts"

/** Where a run's observations are kept, apart from its evidence. */
export class ObservationLog extends Context.Tag("writ/ObservationLog")<ObservationLog, ObservationLog.Service>() {}

/** The ObservationLog service. */
export declare namespace ObservationLog {
  /** Append a run's observations after those it already has, and read them back in order. */
  export interface Service {
    readonly append: (run_key: string, observations: ReadonlyArray<ProviderObservation>) => Effect.Effect<void>
    readonly read: (run_key: string) => Effect.Effect<ReadonlyArray<ProviderObservation>>
  }
}
