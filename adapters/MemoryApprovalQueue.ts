/**
 * The in-memory ApprovalQueue: reference semantics, forgotten on restart (SqlApprovalQueue is the durable one). Runtimes: every one.
 */
import { Effect, Layer } from "effect"
import type { Approver } from "../core/Approval.ts"
import { ApprovalError, ApprovalQueue, ApprovalRecord } from "../core/Approval.ts"
import * as Time from "../core/Time.ts"

/** A fresh in-memory queue. */
export const make = Effect.sync((): ApprovalQueue.Service => {
  const records = new Map<string, ApprovalRecord>()
  // Read when the effect runs, not when it is built: a consume built before another one ran must see it.
  const find = (approval_id: string) =>
    Effect.suspend(() => {
      const record = records.get(approval_id)
      return record === undefined
        ? Effect.fail(new ApprovalError({ reason: "forged", approval_id }))
        : Effect.succeed(record)
    })
  const decide = (state: "approved" | "rejected") => (approval_id: string, approver: Approver) =>
    Effect.flatMap(find(approval_id), (record) => {
      if (record.state !== "pending") return Effect.fail(new ApprovalError({ reason: "decided", approval_id }))
      if (record.request.approver_class !== approver.approver_class) {
        return Effect.fail(new ApprovalError({ reason: "wrong_approver", approval_id }))
      }
      const decided = ApprovalRecord.make({ request: record.request, state, decided_by: approver.id })
      records.set(approval_id, decided)
      return Effect.succeed(decided)
    })
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
    consume: (approval_id, binding_digest, now) =>
      Effect.flatMap(find(approval_id), (record) => {
        const fail = (reason: ApprovalError["reason"]) => Effect.fail(new ApprovalError({ reason, approval_id }))
        if (record.state === "consumed") return fail("reused")
        if (record.state === "rejected") return fail("rejected")
        if (record.state === "pending") return fail("pending")
        if (record.request.binding_digest !== binding_digest) return fail("mismatched")
        if (Time.toMicros(now) >= Time.toMicros(record.request.expires_at)) return fail("expired")
        records.set(approval_id, ApprovalRecord.make({ ...record, state: "consumed" }))
        return Effect.succeed(record.request)
      })
  }
})

/** The in-memory ApprovalQueue. */
export const layer: Layer.Layer<ApprovalQueue> = Layer.effect(ApprovalQueue, make)
