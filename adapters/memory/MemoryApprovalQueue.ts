/**
 * The in-memory ApprovalQueue: reference semantics, forgotten on restart (SqlApprovalQueue is the durable one). Runtimes: every one.
 */
import { Effect, Either, Layer } from "effect"
import type { Approver } from "../../core/approval/Approval.ts"
import { ApprovalError, ApprovalQueue, ApprovalRecord, checkedApprover } from "../../core/approval/Approval.ts"
import * as Time from "../../core/base/Time.ts"

/** A fresh in-memory queue. */
export const make = Effect.sync((): ApprovalQueue.Service => {
  const records = new Map<string, ApprovalRecord>()
  const consumedBy = new Map<string, string>()
  // Read, check and write in one synchronous step when the effect runs (not when it is built): no other fiber can act
  // on the record between the check and the write.
  const transition = <A>(
    approval_id: string,
    step: (record: ApprovalRecord) => Either.Either<A, ApprovalError["reason"]>
  ) =>
    Effect.suspend(() => {
      const record = records.get(approval_id)
      const result = record === undefined ? Either.left("forged" as const) : step(record)
      return Either.isLeft(result)
        ? Effect.fail(new ApprovalError({ reason: result.left, approval_id }))
        : Effect.succeed(result.right)
    })
  const decide = (state: "approved" | "rejected") => (approval_id: string, offered: Approver) =>
    Effect.flatMap(checkedApprover(approval_id, offered), (approver) =>
      transition(approval_id, (record) => {
        if (record.state !== "pending") return Either.left("decided")
        if (record.request.approver_class !== approver.approver_class) return Either.left("wrong_approver")
        const decided = ApprovalRecord.make({ request: record.request, state, decided_by: approver.id })
        records.set(approval_id, decided)
        return Either.right(decided)
      }))
  return {
    // The first filing under an id stands: filing it again must not reset a decided or used approval.
    submit: (request) =>
      Effect.sync(() => {
        if (!records.has(request.approval_id)) {
          records.set(request.approval_id, ApprovalRecord.make({ request, state: "pending" }))
        }
      }),
    list: (filter = {}) =>
      Effect.sync(() =>
        [...records.values()].filter((record) =>
          (filter.approver_class === undefined || record.request.approver_class === filter.approver_class) &&
          (filter.state === undefined || record.state === filter.state)
        )
      ),
    approve: decide("approved"),
    reject: decide("rejected"),
    consume: (approval_id, binding_digest, now, request_id, attempt_id) =>
      transition(approval_id, (record) => {
        if (record.state === "consumed" && attempt_id !== undefined && consumedBy.get(approval_id) === attempt_id) {
          return record.request.binding_digest === binding_digest
            ? Either.right(record.request)
            : Either.left("mismatched")
        }
        if (record.state === "consumed") return Either.left("reused")
        if (record.state === "rejected") return Either.left("rejected")
        if (record.state === "pending") return Either.left("pending")
        if (record.request.binding_digest !== binding_digest) return Either.left("mismatched")
        if (Time.toMicros(now) >= Time.toMicros(record.request.expires_at)) return Either.left("expired")
        if (request_id !== undefined && record.request.request_id === request_id) return Either.left("same_request")
        records.set(approval_id, ApprovalRecord.make({ ...record, state: "consumed" }))
        if (attempt_id !== undefined) consumedBy.set(approval_id, attempt_id)
        return Either.right(record.request)
      })
  }
})

/** The in-memory ApprovalQueue. */
export const layer: Layer.Layer<ApprovalQueue> = Layer.effect(ApprovalQueue, make)
