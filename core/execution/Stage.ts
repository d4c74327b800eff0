/**
 * The fixed stages of an action execution, in the seed's order.
 */
import { Schema } from "effect"

/** The fourteen stages, in order. */
export const stages = [
  "resolve",
  "normalise",
  "bind_context",
  "governed_start",
  "authorise",
  "guard",
  "policy",
  "transform",
  "revalidate",
  "recheck",
  "evidence_checkpoint",
  "invoke",
  "outcome",
  "persist"
] as const

/** A stage of the execution plan. */
export const Stage = Schema.Literal(...stages)

/** A stage of the execution plan. */
export type Stage = typeof Stage.Type

/** The stages whose evaluators decide on security and are re-run after a transformation. */
export const SecurityStage = Schema.Literal("authorise", "guard", "policy")

/** A stage whose evaluators decide on security. */
export type SecurityStage = typeof SecurityStage.Type
