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
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
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
  /** The snapshot the executor pinned for this call at stage 3 (governed profiles): policy decides on it, not a re-read. */
  readonly snapshot?: PolicySnapshot
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

/** What every verdict says: a stable reason code and a short public detail. */
interface Reason {
  readonly code: string
  readonly detail?: string
}

/** The call may go on; `metered`: this evaluator's `charge` sees what the call consumed. */
export interface Allowed extends Reason {
  readonly disposition: "allow"
  /** The gate results behind the verdict; absent for an evaluator without gates, empty when nothing was evaluated. */
  readonly gates?: ReadonlyArray<GateOutcome>
  readonly exception?: GrantedException
  readonly metered?: boolean
}

/** A terminal refusal. */
export interface Refused extends Reason {
  readonly disposition: "deny"
  readonly gates?: ReadonlyArray<GateOutcome>
}

/** Capacity is short: retry later, at `retry_at` when known (never a gate result). */
export interface Postponed extends Reason {
  readonly disposition: "defer"
  readonly retry_at?: Timestamp
}

/** A named authority must approve first: the request filed for it. */
export interface Referred extends Reason {
  readonly disposition: "escalate"
  readonly approval?: ApprovalRequest
  readonly gates?: ReadonlyArray<GateOutcome>
}

/**
 * An evaluator's verdict, before the executor binds it to a stage and a digest: a union tagged by `disposition`, each
 * variant carrying exactly its fields (an object literal of one of these forms is a verdict as it stands).
 */
export type Verdict = Allowed | Refused | Postponed | Referred

const dispositions: ReadonlySet<unknown> = new Set(["allow", "deny", "defer", "escalate"])

/** Whether a value an evaluator returned is a verdict the executor can bind: a known disposition and a string code. */
export const isVerdict = (value: unknown): value is Verdict =>
  typeof value === "object" && value !== null && dispositions.has((value as Verdict).disposition) &&
  typeof (value as Verdict).code === "string"

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

const withDetail = <A extends Reason>(verdict: A, detail: string | undefined): A =>
  detail === undefined ? verdict : { ...verdict, detail }

/** An allow verdict. */
export const allow = (code = "control.allowed", detail?: string): Allowed =>
  withDetail({ disposition: "allow", code }, detail)

/** A deny verdict with a stable reason code. */
export const deny = (code: string, detail?: string): Refused => withDetail({ disposition: "deny", code }, detail)

/** A defer verdict: capacity is short, until `retry_at` when known. */
export const defer = (
  code: string,
  options: { readonly detail?: string; readonly retry_at?: Timestamp } = {}
): Postponed =>
  withDetail(
    options.retry_at === undefined
      ? { disposition: "defer", code }
      : { disposition: "defer", code, retry_at: options.retry_at },
    options.detail
  )

/** An escalate verdict: the approval request filed for it, when there is one. */
export const escalate = (
  code: string,
  options: { readonly detail?: string; readonly approval?: ApprovalRequest } = {}
): Referred =>
  withDetail(
    options.approval === undefined
      ? { disposition: "escalate", code }
      : { disposition: "escalate", code, approval: options.approval },
    options.detail
  )

/** An interceptor from a pure predicate over the evaluation. */
export const make = (
  id: string,
  stage: SecurityStage,
  decide: (evaluation: Evaluation) => Verdict
): Interceptor => ({ id, stage, evaluate: (evaluation) => Effect.sync(() => decide(evaluation)) })
