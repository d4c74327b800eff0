/**
 * The closed union of what an execution came to. Every variant names the runtime profile behind
 * it, the stage it concluded at, and the decisions that led there; none carries a raw exception,
 * stack or secret.
 */
import { Match, Schema } from "effect"
import { ContainmentKind } from "../action/Action.ts"
import { ApprovalRequest } from "../approval/Approval.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { trustedMake } from "../base/internal/trusted.ts"
import { ActionRef, Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import { ActionAdmissionDecision, DecisionReason } from "./AdmissionDecision.ts"
import { RuntimeProfile } from "./RuntimeProfile.ts"
import { Stage } from "./Stage.ts"

/**
 * What a security evaluator read besides the arguments: the snapshot it decided on (its digest, or the refusal code
 * when none could be pinned), the resolved path, the presented approval's state, and whether an expiry or budget rule
 * applies to the call (its decision then depends on the time or the ledger, so stage 10 always rechecks).
 */
export class PolicyInputs extends Schema.Class<PolicyInputs>("PolicyInputs")({
  snapshot: Schema.optional(Schema.String),
  resolved_path: Schema.optional(Schema.String),
  approval_state: Schema.optional(Schema.String),
  time_or_budget: Schema.optional(Schema.Boolean)
}) {}

/** One evaluator's inputs as it decided at stages 5-7 and as stage 10 read them again (absent: unreadable). */
export class ComparedInputs extends Schema.Class<ComparedInputs>("ComparedInputs")({
  evaluator: Schema.String,
  decided: PolicyInputs,
  current: Schema.optional(PolicyInputs)
}) {}

/**
 * Whether stage 10 re-ran the security evaluators after a transformation, and why: it skips only when the digest and
 * every input compared are unchanged and no expiry or budget rule applies.
 */
export class Recheck extends Schema.Class<Recheck>("Recheck")({
  ran: Schema.Boolean,
  reason: Schema.Literal(
    "no_transformation",
    "arguments_unchanged",
    "inputs_unchanged",
    "arguments_changed",
    "inputs_changed",
    "time_or_budget_rule"
  ),
  evaluators: Schema.Array(Schema.String),
  digest_before: Schema.optional(Sha256Hex),
  digest_after: Schema.optional(Sha256Hex),
  compared: Schema.optional(Schema.Array(ComparedInputs))
}) {}

/** A failure normalised for callers: a stable code and, only when the action marked it public, a message. */
export class FailureSummary extends Schema.Class<FailureSummary>("FailureSummary")({
  code: Schema.String,
  message: Schema.optional(Schema.String)
}) {}

/**
 * The required containment a governed call went without: `degraded`, the kinds its backend does not enforce and its
 * policy made optional; `remote_claims`, the kinds only a remote platform's claim (which its policy accepts) covers.
 */
export class ContainmentWaiver extends Schema.Class<ContainmentWaiver>("ContainmentWaiver")({
  degraded: Schema.optional(Schema.Array(ContainmentKind)),
  remote_claims: Schema.optional(Schema.Array(ContainmentKind))
}) {}

const common = {
  request_id: Identifier,
  attempt_id: Uuid,
  action: ActionRef,
  profile: RuntimeProfile,
  stage: Stage,
  decisions: Schema.Array(ActionAdmissionDecision),
  recheck: Schema.optional(Recheck),
  /** Governed: the required containment the call was admitted without, as its policy allowed; absent when none. */
  containment: Schema.optional(ContainmentWaiver),
  /** A governed call in a durable Run whose attempt the Run's state does not show yet: the projector will apply it. */
  projection_pending: Schema.optional(Schema.Literal(true))
}

/** The callable returned; `result` is the output as encoded by the action's output Schema (may be undefined).
 * `replay_of` names the attempt whose stored result an idempotent retry by the same caller got instead. */
export class Succeeded extends Schema.TaggedClass<Succeeded>()("succeeded", {
  ...common,
  result: Schema.Unknown,
  replay_of: Schema.optional(Uuid)
}) {}

/** A terminal refusal of this attempt; the callable was not reached. */
export class Denied extends Schema.TaggedClass<Denied>()("denied", { ...common, reason: DecisionReason }) {}

/** Not now: capacity or quota; may be retried at `retry_at`. The callable was not reached. */
export class Deferred extends Schema.TaggedClass<Deferred>()("deferred", {
  ...common,
  reason: DecisionReason,
  retry_at: Schema.optional(Timestamp)
}) {}

/** Awaiting a named authority; no worker waits. Resubmitting with the approval is a new attempt. */
export class Escalated extends Schema.TaggedClass<Escalated>()("escalated", {
  ...common,
  reason: DecisionReason,
  approval: Schema.optional(ApprovalRequest)
}) {}

/** The callable ran and failed; the failure was captured and redacted. */
export class Failed extends Schema.TaggedClass<Failed>()("failed", { ...common, failure: FailureSummary }) {}

/** Whether an interrupted callable's teardown finished within the executor's bound. */
export const Teardown = Schema.Literal("completed", "abandoned")

/** Interrupted on request; `call_executed` says whether the callable had started. */
export class Cancelled extends Schema.TaggedClass<Cancelled>()("cancelled", {
  ...common,
  call_executed: Schema.Boolean,
  teardown: Schema.optional(Teardown)
}) {}

/** The deadline passed; `call_executed` says whether the callable had started. */
export class TimedOut extends Schema.TaggedClass<TimedOut>()("timed_out", {
  ...common,
  call_executed: Schema.Boolean,
  teardown: Schema.optional(Teardown)
}) {}

/** The call may or may not have had its effect (a lost remote backend, crash recovery). */
export class Ambiguous extends Schema.TaggedClass<Ambiguous>()("ambiguous", {
  ...common,
  reason: DecisionReason
}) {}

/** The closed union of outcomes. */
export const ExecutionOutcome = Schema.Union(
  Succeeded,
  Denied,
  Deferred,
  Escalated,
  Failed,
  Cancelled,
  TimedOut,
  Ambiguous
)

/** The closed union of outcomes. */
export type ExecutionOutcome = typeof ExecutionOutcome.Type

const classes = {
  succeeded: Succeeded,
  denied: Denied,
  deferred: Deferred,
  escalated: Escalated,
  failed: Failed,
  cancelled: Cancelled,
  timed_out: TimedOut,
  ambiguous: Ambiguous
} as const

/** The same outcome, saying its projection into the Run's state is left to the projector. */
export const withProjectionPending = (outcome: ExecutionOutcome): ExecutionOutcome =>
  trustedMake(classes[outcome._tag] as typeof Succeeded, { ...outcome, projection_pending: true } as Succeeded)

/** Whether the callable was (or may have been) reached for this outcome (a replayed success reached none). */
export const callExecuted: (outcome: ExecutionOutcome) => boolean = Match.type<ExecutionOutcome>().pipe(
  Match.tagsExhaustive({
    succeeded: (o) => o.replay_of === undefined,
    failed: () => true,
    ambiguous: () => true,
    cancelled: (o) => o.call_executed,
    timed_out: (o) => o.call_executed,
    denied: () => false,
    deferred: () => false,
    escalated: () => false
  })
)

/** The reason code of an outcome: its decision reason, failure code, or the outcome tag. */
export const reasonCode: (outcome: ExecutionOutcome) => string = Match.type<ExecutionOutcome>().pipe(
  Match.tagsExhaustive({
    succeeded: (o) => o.replay_of === undefined ? "ok" : "idempotency.replayed",
    failed: (o) => o.failure.code,
    cancelled: () => "execution.cancelled",
    timed_out: () => "execution.deadline_exceeded",
    denied: (o) => o.reason.code,
    deferred: (o) => o.reason.code,
    escalated: (o) => o.reason.code,
    ambiguous: (o) => o.reason.code
  })
)
