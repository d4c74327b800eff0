/**
 * Where verify runs are kept: each control's scenario run against the real CLI, per provider version and executable
 * identity, which a capability report cites to call that control enforced. writ's database keeps them where a run
 * has one (`--db`); a cache file in writ's data directory keeps them where it has none.
 */
import { Context } from "effect"
import type { Effect } from "effect"
import type { VerifyRun } from "./CapabilityReport.ts"
import type { HarnessError } from "./HarnessAdapter.ts"

/** The recorded verify runs. */
export class VerifyRunStore extends Context.Tag("writ/VerifyRunStore")<VerifyRunStore, VerifyRunStore.Service>() {}

/** The VerifyRunStore service. */
export declare namespace VerifyRunStore {
  /** Read every recorded run, and record new ones. */
  export interface Service {
    /** Every recorded verify run, oldest first. */
    readonly verifications: Effect.Effect<ReadonlyArray<VerifyRun>, HarnessError>
    /** Record verify runs: each replaces the earlier runs of its control for the same version and executable. */
    readonly record: (runs: ReadonlyArray<VerifyRun>) => Effect.Effect<void, HarnessError>
  }
}
