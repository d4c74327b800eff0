/**
 * Runs (spec/runs.md): a Run is created once, moved along its lifecycle by compare-and-set and ended by exactly one
 * terminal outcome that never changes; a terminal outcome offered after that is kept as an observation.
 */
import { Schema } from "effect"
import { Uuid } from "../base/IdGenerator.ts"
import { PolicySnapshotRef } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"

/** A Run's status: `preparing -> queued -> running <-> paused -> completed | failed | cancelled | timed_out`. */
export const RunStatus = Schema.Literal(
  "preparing",
  "queued",
  "running",
  "paused",
  "completed",
  "failed",
  "cancelled",
  "timed_out"
)

/** A Run's status. */
export type RunStatus = typeof RunStatus.Type

/** The statuses a Run can still leave. */
export const ActiveRunStatus = Schema.Literal("preparing", "queued", "running", "paused")

/** A status a Run can still leave. */
export type ActiveRunStatus = typeof ActiveRunStatus.Type

/** The statuses a Run never leaves; exactly one is ever reached. */
export const TerminalStatus = Schema.Literal("completed", "failed", "cancelled", "timed_out")

/** A status a Run never leaves. */
export type TerminalStatus = typeof TerminalStatus.Type

/** How a Run relates to its parent: none (root), or a retry, resume, replay or fork of it. */
export const Lineage = Schema.Literal("root", "retry", "resume", "replay", "fork")

/** How a Run relates to its parent. */
export type Lineage = typeof Lineage.Type

/** Whether the Run's result was accepted by whoever judges it. */
export const Acceptance = Schema.Literal("accepted", "rejected", "not_applicable", "unknown")

/** How complete the Run's work is. */
export const Quality = Schema.Literal("full", "degraded", "partial", "indeterminate")

/** A reference to one committed evidence record. */
export class EvidenceRef extends Schema.Class<EvidenceRef>("EvidenceRef")({
  chain_id: Uuid,
  record_id: Uuid
}) {}

/** A Run's terminal outcome, facet by facet; a missing cost is null, never 0. */
export class RunTerminal extends Schema.Class<RunTerminal>("RunTerminal")({
  status: TerminalStatus,
  acceptance: Acceptance,
  quality: Quality,
  reason_code: Schema.NonEmptyString,
  evidence: Schema.Array(EvidenceRef),
  cost: Schema.NullOr(Schema.NonNegativeInt)
}) {}

const terminalStatuses: ReadonlySet<RunStatus> = new Set<RunStatus>(TerminalStatus.literals)

/** Whether a status is terminal. */
export const isTerminal = (status: RunStatus): status is TerminalStatus => terminalStatuses.has(status)

// Timestamps have one fixed width, so their string order is their time order.
const runInvariant = (run: {
  readonly status: RunStatus
  readonly created_at: string
  readonly started_at: string | null
  readonly ended_at: string | null
  readonly parent_run_id: string | null
  readonly lineage: Lineage
  readonly terminal: { readonly status: TerminalStatus } | null
}): string | true => {
  if ((run.lineage === "root") !== (run.parent_run_id === null)) return "a root Run has no parent; any other has one"
  if (isTerminal(run.status) !== (run.terminal !== null)) {
    return "a Run has a terminal outcome exactly when it is terminal"
  }
  if (run.terminal !== null && run.terminal.status !== run.status) return "a terminal Run's status is its outcome's"
  if ((run.ended_at === null) !== (run.terminal === null)) return "a Run has ended exactly when it is terminal"
  if ((run.status === "running" || run.status === "paused") && run.started_at === null) {
    return "a running or paused Run has started"
  }
  if (run.started_at !== null && run.started_at < run.created_at) return "started_at precedes created_at"
  if (run.ended_at !== null && run.ended_at < (run.started_at ?? run.created_at)) return "ended_at precedes its start"
  return true
}

/**
 * A Run: created once, moved by compare-and-set, ended by exactly one terminal outcome that never changes. `policy`:
 * the exact snapshot (policy_id, version, digest) it was created under; absent when unknown or unpinned.
 */
export class Run extends Schema.Class<Run>("Run")(
  Schema.Struct({
    run_id: Uuid,
    status: RunStatus,
    created_at: Timestamp,
    started_at: Schema.NullOr(Timestamp),
    ended_at: Schema.NullOr(Timestamp),
    parent_run_id: Schema.NullOr(Uuid),
    lineage: Lineage,
    terminal: Schema.NullOr(RunTerminal),
    policy: Schema.optional(PolicySnapshotRef)
  }).pipe(Schema.filter(runInvariant))
) {}

/** A terminal outcome offered after another had already won: kept as audit, never applied. */
export class RunObservation extends Schema.Class<RunObservation>("RunObservation")({
  run_id: Uuid,
  sequence: Schema.NonNegativeInt,
  terminal: RunTerminal,
  observed_at: Timestamp
}) {}

/** What `finish` came to: the Run's one terminal outcome, and whether this call is the one that set it. */
export class FinishResult extends Schema.Class<FinishResult>("FinishResult")({
  won: Schema.Boolean,
  run: Run
}) {}

/**
 * How a new Run is created: a root, or a child linked to an existing parent by lineage; `started` creates it already
 * `running` (through `queued`, in the one write), so no crash can leave it between creation and start; `policy`: the
 * snapshot it is created under, recorded on it.
 */
export type CreateRun =
  & (
    | { readonly lineage?: "root" }
    | { readonly lineage: Exclude<Lineage, "root">; readonly parent_run_id: Uuid }
  )
  & { readonly started?: boolean; readonly policy?: PolicySnapshotRef }

/** Optional filters for listing Runs. */
export interface RunFilter {
  readonly status?: ReadonlyArray<RunStatus>
  readonly parent_run_id?: string
}
