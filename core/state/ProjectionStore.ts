/**
 * The ProjectionStore port (spec/runs.md): committed evidence projected under a projector's cursor, with the attempts
 * of the governed operations a batch concluded, built once over the StateStorage driver in context.
 */
import { Context, Layer } from "effect"
import type { Effect, Option } from "effect"
import type { Sha256Hex } from "../base/Digest.ts"
import type { IdGenerator } from "../base/IdGenerator.ts"
import type { Cursor } from "../evidence/EvidenceStore.ts"
import { makeProjection } from "./internal/projection.ts"
import type {
  ApplyProjection,
  OperationFilter,
  ProjectedOperation,
  ProjectionApplied,
  RecordFilter
} from "./Projection.ts"
import type { ProjectionConflictError, StateStoreUnavailableError } from "./StateError.ts"
import type { StateStorage } from "./StateStorage.ts"

/** The durable projection of committed evidence, with its cursor. */
export class ProjectionStore extends Context.Tag("writ/ProjectionStore")<ProjectionStore, ProjectionStore.Service>() {}

/** The ProjectionStore service. */
export declare namespace ProjectionStore {
  /** Every method; a durable store commits each batch atomically and survives restart. */
  export interface Service {
    /** Where a projector stopped, if it ever committed. */
    readonly projectionCursor: (
      projector: string
    ) => Effect.Effect<Option.Option<Cursor>, StateStoreUnavailableError>
    /** Commit projection rows, attempts and the advanced cursor in one transaction; replay is a no-op, a conflict commits nothing. */
    readonly applyProjection: (
      input: ApplyProjection
    ) => Effect.Effect<ProjectionApplied, ProjectionConflictError | StateStoreUnavailableError>
    /** The operations projection in first-seen order. */
    readonly projectedOperations: (
      filter?: OperationFilter
    ) => Effect.Effect<ReadonlyArray<ProjectedOperation>, StateStoreUnavailableError>
    /** How many projection rows are stored (every projection version counts). */
    readonly projectedRecordCount: (filter?: RecordFilter) => Effect.Effect<number, StateStoreUnavailableError>
    /**
     * The chain hash the projected record at `sequence` of a chain carries, if that record is projected (one record
     * and one hash per position, under every projection version: `applyProjection` refuses any other).
     */
    readonly projectedHash: (
      chain_id: string,
      sequence: number
    ) => Effect.Effect<Option.Option<Sha256Hex>, StateStoreUnavailableError>
  }
}

/** The ProjectionStore over a StateStorage driver; intent ids and times come from the IdGenerator and Clock in context. */
export const make: Effect.Effect<ProjectionStore.Service, never, StateStorage | IdGenerator> = makeProjection

/** The ProjectionStore layer over the StateStorage in context. */
export const layer: Layer.Layer<ProjectionStore, never, StateStorage | IdGenerator> = Layer.effect(
  ProjectionStore,
  make
)
