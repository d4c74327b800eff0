/**
 * The planes around the executor's stages 5-10: interceptors decide, transformers rewrite
 * arguments (and so force a recheck), observers watch and can change nothing.
 */
import { Effect } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import type { Usage } from "../action/ActionUsage.ts"
import type { ApprovalRequest } from "../approval/Approval.ts"
import type { Sha256Hex } from "../base/Digest.ts"
import type { Timestamp } from "../base/Time.ts"
import type { Disposition } from "./AdmissionDecision.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { ExecutionOutcome } from "./ExecutionOutcome.ts"
import type { Arguments, ExecutionRequest } from "./ExecutionRequest.ts"
import type { SecurityStage } from "./Stage.ts"

/** What a security evaluator sees: the normalised arguments and the digest its decision binds to. */
export interface Evaluation {
  readonly attempt_id: string
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly descriptor: ActionDescriptor
  readonly arguments: Arguments
  readonly arguments_digest: Sha256Hex
}

/** One gate's result inside a verdict: what governed evidence records as `gate_evaluated`. */
export interface GateOutcome {
  readonly gate_id: string
  readonly level: "hard" | "soft" | "advisory"
  readonly decision: "allow" | "deny"
  readonly reason_code: string
  readonly matched_rules: ReadonlyArray<string>
}

/** An approval that let a soft deny pass: attributable, recorded as `exception_granted`. */
export interface GrantedException {
  readonly approval_id: string
  readonly approver_class: string
  readonly reason_code: string
}

/** An evaluator's verdict, before the executor binds it to a stage and a digest. */
export interface Verdict {
  readonly disposition: Disposition
  readonly code: string
  readonly detail?: string
  readonly retry_at?: Timestamp
  readonly approval?: ApprovalRequest
  /** The gate results behind the verdict; absent for an evaluator without gates, empty when nothing was evaluated. */
  readonly gates?: ReadonlyArray<GateOutcome>
  readonly exception?: GrantedException
  /** This evaluator charges the invocation's usage: its `charge` sees what the call consumed (unset: nothing is metered for it). */
  readonly metered?: boolean
}

/** A security evaluator at one of stages 5-7; it decides, and may be re-run at stage 10. */
export interface Interceptor {
  readonly id: string
  readonly stage: SecurityStage
  readonly evaluate: (evaluation: Evaluation) => Effect.Effect<Verdict, unknown>
  /** After the one invocation its verdict metered ran, whatever its outcome: what it consumed, for budgets to charge. */
  readonly charge?: (evaluation: Evaluation, usage: Usage) => Effect.Effect<void>
}

/** A user transformation at stage 8: new arguments, revalidated and rechecked before invoke. */
export interface Transformer {
  readonly id: string
  readonly transform: (evaluation: Evaluation) => Effect.Effect<Arguments, unknown>
}

/** What observers are told: an execution concluded with this outcome. */
export interface Concluded {
  readonly _tag: "concluded"
  readonly outcome: ExecutionOutcome
  /** Governed profiles: the committed terminal record's identifiers (observers see only committed evidence). */
  readonly evidence?: { readonly chain_id: string; readonly record_id: string; readonly head_hash: string }
}

/** A subscriber: told of each conclusion; it cannot veto, and its failure changes nothing. */
export interface Observer {
  readonly id: string
  readonly observe: (event: Concluded) => Effect.Effect<void, unknown>
}

/** An allow verdict. */
export const allow = (code = "control.allowed"): Verdict => ({ disposition: "allow", code })

/** A deny verdict with a stable reason code. */
export const deny = (code: string, detail?: string): Verdict =>
  detail === undefined ? { disposition: "deny", code } : { disposition: "deny", code, detail }

/** An interceptor from a pure predicate over the evaluation. */
export const make = (
  id: string,
  stage: SecurityStage,
  decide: (evaluation: Evaluation) => Verdict
): Interceptor => ({ id, stage, evaluate: (evaluation) => Effect.sync(() => decide(evaluation)) })
