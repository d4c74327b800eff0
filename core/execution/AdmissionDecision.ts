/**
 * One evaluator's typed decision on a request: allow, defer, deny or escalate, bound to the
 * digest of the arguments it evaluated.
 */
import { Schema } from "effect"
import { ApprovalRequest } from "../approval/Approval.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Timestamp } from "../base/Time.ts"
import { Stage } from "./Stage.ts"

/** allow: go on; defer: capacity, retry later; deny: terminal; escalate: ask a named authority. */
export const Disposition = Schema.Literal("allow", "defer", "deny", "escalate")

/** An admission disposition. */
export type Disposition = typeof Disposition.Type

/** A stable reason code (`schema.invalid`, `policy.denied`, ...) and a short public detail. */
export class DecisionReason extends Schema.Class<DecisionReason>("DecisionReason")({
  code: Schema.String.pipe(Schema.pattern(/^[a-z_]+(?:\.[a-z_]+)+$/)),
  detail: Schema.optional(Schema.String)
}) {}

/** An evaluator's decision at one stage, bound to the arguments digest it saw. */
export class ActionAdmissionDecision extends Schema.Class<ActionAdmissionDecision>("ActionAdmissionDecision")({
  disposition: Disposition,
  reason: DecisionReason,
  evaluator: Schema.String,
  stage: Stage,
  arguments_digest: Schema.optional(Sha256Hex),
  evidence: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
  retry_at: Schema.optional(Timestamp),
  approval: Schema.optional(ApprovalRequest)
}) {}
