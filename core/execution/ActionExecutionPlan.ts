/**
 * The immutable plan compiled for one action before any side effect: all fourteen stages, in the
 * seed's order, each saying whether it runs in this profile and why. The executor derives it from
 * the stage table it runs (`ActionExecutor.plan`), so it cannot say what does not run.
 */
import { Schema } from "effect"
import { ActionDescriptor } from "../action/ActionDescriptor.ts"
import { ActionBackendRef } from "../base/Refs.ts"
import { RuntimeProfile } from "./RuntimeProfile.ts"
import { Stage } from "./Stage.ts"

/** One stage of a plan: run or skip, what it does here, and the evaluators it calls. */
export class PlannedStage extends Schema.Class<PlannedStage>("PlannedStage")({
  stage: Stage,
  mode: Schema.Literal("run", "skip"),
  detail: Schema.String,
  evaluators: Schema.Array(Schema.String)
}) {}

/** The compiled, immutable plan for one action under one executor. */
export class ActionExecutionPlan extends Schema.Class<ActionExecutionPlan>("ActionExecutionPlan")({
  action: ActionDescriptor,
  profile: RuntimeProfile,
  backend: ActionBackendRef,
  stages: Schema.Array(PlannedStage)
}) {}
