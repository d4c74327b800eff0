/**
 * The state stores (spec/runs.md) in one namespace: the Run, attempt and projection ports with their schemas and
 * errors, and one layer that builds all three over the StateStorage driver in context.
 */
import { Layer } from "effect"
import type { IdGenerator } from "../base/IdGenerator.ts"
import * as AttemptStore from "./AttemptStore.ts"
import * as ProjectionStore from "./ProjectionStore.ts"
import * as RunStore from "./RunStore.ts"
import type { StateStorage } from "./StateStorage.ts"

export * from "./Attempt.ts"
export { AttemptStore } from "./AttemptStore.ts"
export * from "./Projection.ts"
export { ProjectionStore } from "./ProjectionStore.ts"
export * from "./Run.ts"
export { RunStore } from "./RunStore.ts"
export * from "./StateError.ts"
export { StateStorage } from "./StateStorage.ts"
export type { ProjectionWrite } from "./StateStorage.ts"

/** The three state ports: Runs, attempts with their outbox, and the evidence projection. */
export type StateStores = RunStore.RunStore | AttemptStore.AttemptStore | ProjectionStore.ProjectionStore

/** The Run, attempt and projection stores over the StateStorage in context, sharing its transactions. */
export const layer: Layer.Layer<StateStores, never, StateStorage | IdGenerator> = Layer.mergeAll(
  RunStore.layer,
  AttemptStore.layer,
  ProjectionStore.layer
)
