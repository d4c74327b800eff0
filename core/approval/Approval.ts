/**
 * Approval escalation that never blocks a worker: an escalated call files an ApprovalRequest bound
 * to the digest of the exact request, principal, origin and policy snapshot; an approver decides
 * later; a resubmission (a new attempt with a new request id) presents the approval, once.
 */
import type { Effect } from "effect"
import { Context, Either, Schema } from "effect"
import * as Digest from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { Identifier, PolicySnapshotRef } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"

/** A pending request for a named approver class to allow one exact call. */
export class ApprovalRequest extends Schema.Class<ApprovalRequest>("ApprovalRequest")({
  approval_id: Uuid,
  binding_digest: Digest.Sha256Hex,
  action: Schema.String,
  principal: Identifier,
  approver_class: Identifier,
  policy: PolicySnapshotRef,
  requested_at: Timestamp,
  expires_at: Timestamp,
  /** The request that escalated: its approval is used by a new request (a new attempt), never by that one. */
  request_id: Schema.optional(Schema.String)
}) {}

/** Where an approval stands. */
export const ApprovalState = Schema.Literal("pending", "approved", "rejected", "consumed")

/** An approval request with its state and, once decided, who decided. */
export class ApprovalRecord extends Schema.Class<ApprovalRecord>("ApprovalRecord")({
  request: ApprovalRequest,
  state: ApprovalState,
  decided_by: Schema.optional(Identifier)
}) {}

/** Why an approval cannot be decided or used; each reason is its own reason code (`approval.<reason>`). */
export class ApprovalError extends Schema.TaggedError<ApprovalError>()("ApprovalError", {
  reason: Schema.Literal(
    "forged",
    "pending",
    "rejected",
    "expired",
    "reused",
    "mismatched",
    "wrong_approver",
    "decided",
    "invalid_approver",
    "same_request"
  ),
  approval_id: Schema.String
}) {
  override get message() {
    return `approval ${this.approval_id}: ${this.reason}`
  }
}

/** Who decides an approval. */
export interface Approver {
  readonly id: string
  readonly approver_class: string
}

const isApprover = Schema.is(Schema.Struct({ id: Identifier, approver_class: Identifier }))

/**
 * The approver of a decision checked before any queue reads or writes: one whose id or class is not an Identifier is
 * `invalid_approver`, in every queue, and the approval stays as it was.
 */
export const checkedApprover = (approval_id: string, approver: Approver): Either.Either<Approver, ApprovalError> =>
  isApprover(approver)
    ? Either.right(approver)
    : Either.left(new ApprovalError({ reason: "invalid_approver", approval_id }))

/** The queue of approval requests. */
export class ApprovalQueue extends Context.Tag("writ/ApprovalQueue")<ApprovalQueue, ApprovalQueue.Service>() {}

/** The ApprovalQueue service. */
export declare namespace ApprovalQueue {
  /** File, list, decide and consume approvals. */
  export interface Service {
    readonly submit: (request: ApprovalRequest) => Effect.Effect<void>
    readonly list: (
      filter?: { readonly approver_class?: string; readonly state?: typeof ApprovalState.Type }
    ) => Effect.Effect<ReadonlyArray<ApprovalRecord>>
    readonly approve: (approval_id: string, approver: Approver) => Effect.Effect<ApprovalRecord, ApprovalError>
    readonly reject: (approval_id: string, approver: Approver) => Effect.Effect<ApprovalRecord, ApprovalError>
    /**
     * Use an approval once, for the call whose binding digest it was filed for, before it expires, by a request other
     * than the one that escalated (`same_request`, and the approval stays usable). The attempt that used it may
     * present it again (its stage-10 recheck) and is answered as before, or `mismatched` for another binding.
     */
    readonly consume: (
      approval_id: string,
      binding_digest: string,
      now: Timestamp,
      request_id?: string,
      attempt_id?: string
    ) => Effect.Effect<ApprovalRequest, ApprovalError>
  }
}

/** What an approval is bound to: the exact action (its descriptor digest pins the version) and arguments, the
 * principal and tenant, the origin (who asked: the executing agent, the human and the calling agent, and the caller
 * kinds) and the policy snapshot. */
export interface Binding {
  readonly action: string
  readonly action_digest: string
  readonly arguments_digest: string
  readonly principal: string
  readonly tenant: string | null
  readonly origin: {
    readonly executing_agent: string
    readonly human: string | null
    readonly calling_agent: string | null
    readonly origins: ReadonlyArray<string>
  } | null
  readonly policy: PolicySnapshotRef
}

/** The `sha256-v1` digest an approval is bound to. */
export const bindingDigest = (binding: Binding) => Digest.canonical({ ...binding, policy: { ...binding.policy } })
