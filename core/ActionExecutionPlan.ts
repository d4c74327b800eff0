/**
 * The immutable plan compiled for one action before any side effect: all fourteen stages, in the
 * seed's order, each saying whether it runs in this profile and why.
 */
import { Schema } from "effect"
import { ActionDescriptor } from "./ActionDescriptor.ts"
import type { Interceptor, Transformer } from "./Interceptor.ts"
import { ActionBackendRef } from "./Refs.ts"
import { RuntimeProfile } from "./RuntimeProfile.ts"
import { Stage, stages } from "./Stage.ts"

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

/** The executor configuration a plan is compiled from. */
export interface PlanInputs {
  readonly descriptor: ActionDescriptor
  readonly backend: ActionBackendRef
  readonly interceptors: ReadonlyArray<Interceptor>
  readonly transformers: ReadonlyArray<Transformer>
  readonly profile: RuntimeProfile
}

const minimalDetail: Record<Stage, string> = {
  resolve: "resolve the reference to a digest-pinned descriptor",
  normalise: "decode the arguments with the action's input Schema",
  bind_context:
    "bind the trusted context; deadline admission; backend probe for required containment; no capacity admission configured (unbounded)",
  governed_start: "minimal profile: no governed operation, policy pin or evidence",
  authorise: "principal and tenant authorization interceptors",
  guard: "intrinsic guard interceptors",
  policy: "action policy interceptors",
  transform: "user transformations",
  revalidate: "decode the transformed arguments again",
  recheck: "re-run every security evaluator whose input digest changed",
  evidence_checkpoint: "minimal profile: no pre-call evidence to commit",
  invoke: "release the one-use invocation token and invoke exactly once",
  outcome: "normalise the result or the captured failure into an outcome",
  persist: "minimal profile: no Run, StateStore or outbox projection"
}

const governedDetail: Partial<Record<Stage, string>> = {
  bind_context:
    "bind the trusted context; retrieve the exact policy snapshot and recompute its digest; deadline admission; backend probe",
  governed_start: "derive the operation context from six trusted inputs; commit policy_bound and operation_started",
  evidence_checkpoint: "every gate_evaluated and exception_granted committed before the token is released",
  outcome: "normalise the outcome and commit its one terminal record",
  persist: "governed: durable state is a projection of committed evidence (EvidenceProjector)"
}

const durableDetail: Partial<Record<Stage, string>> = {
  governed_start: "durable profile: no governed operation, policy pin or evidence",
  evidence_checkpoint: "durable profile: no pre-call evidence to commit",
  persist: "durable: the attempt, its outcome and its outbox intents commit in one StateStore transaction"
}

const minimalSkipped = new Set<Stage>(["governed_start", "evidence_checkpoint", "persist"])
const durableSkipped = new Set<Stage>(["governed_start", "evidence_checkpoint"])
const governedSkipped = new Set<Stage>(["persist"])

/** Compile the plan for one action: security stages in fixed order, transforms after, evidence stages when governed. */
export const compile = (inputs: PlanInputs): ActionExecutionPlan => {
  const governed = inputs.profile === "governed" || inputs.profile === "certifiable"
  const [alwaysSkipped, details] = governed
    ? [governedSkipped, governedDetail]
    : inputs.profile === "durable"
    ? [durableSkipped, durableDetail]
    : [minimalSkipped, {}]
  const evaluatorsOf = (stage: Stage): ReadonlyArray<string> => {
    switch (stage) {
      case "authorise":
      case "guard":
      case "policy":
        return inputs.interceptors.filter((interceptor) => interceptor.stage === stage).map((i) => i.id)
      case "transform":
        return inputs.transformers.map((transformer) => transformer.id)
      case "recheck":
        return inputs.transformers.length === 0 ? [] : inputs.interceptors.map((interceptor) => interceptor.id)
      default:
        return []
    }
  }
  const runs = (stage: Stage, evaluators: ReadonlyArray<string>) => {
    if (alwaysSkipped.has(stage)) return false
    if (stage === "revalidate") return inputs.transformers.length > 0
    if (stage === "recheck" || stage === "transform") return inputs.transformers.length > 0
    if (stage === "authorise" || stage === "guard" || stage === "policy") return evaluators.length > 0
    return true
  }
  return ActionExecutionPlan.make({
    action: inputs.descriptor,
    profile: inputs.profile,
    backend: inputs.backend,
    stages: stages.map((stage) => {
      const evaluators = evaluatorsOf(stage)
      return PlannedStage.make({
        stage,
        mode: runs(stage, evaluators) ? "run" : "skip",
        detail: details[stage] ?? minimalDetail[stage],
        evaluators
      })
    })
  })
}
