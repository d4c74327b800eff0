/**
 * A task boundary: one chain every governed operation under it appends to, bound to one policy snapshot; and why its
 * chain, or an operation on it, cannot take a record.
 */
import { Schema } from "effect"
import { Uuid } from "../base/IdGenerator.ts"
import { PolicySnapshotRef } from "../base/Refs.ts"
import * as Time from "../base/Time.ts"

/** A task boundary: one chain every governed operation under it appends to, bound to one policy snapshot. */
export class TaskBoundary extends Schema.Class<TaskBoundary>("TaskBoundary")({
  task_boundary_id: Uuid,
  chain_id: Uuid,
  policy: PolicySnapshotRef,
  opened_at: Time.Timestamp
}) {}

/**
 * A task boundary's chain that cannot take a record: it is closed, closing (no new operation), or abandoned (this writer
 * did not open it, so it cannot close it); or the boundary offered is not the one opened on its chain: another
 * `task_boundary_id` or `opened_at` (`boundary_mismatch`), or another policy (`policy_mismatch`).
 */
export class BoundaryError extends Schema.TaggedError<BoundaryError>()("BoundaryError", {
  reason: Schema.Literal("closed", "closing", "abandoned", "in_use", "boundary_mismatch", "policy_mismatch"),
  chain_id: Schema.String
}) {
  override get message() {
    switch (this.reason) {
      case "boundary_mismatch":
        return `the task boundary offered for chain ${this.chain_id} is not the one opened on it`
      case "policy_mismatch":
        return `the task boundary offered for chain ${this.chain_id} names another policy than the one opened on it`
      default:
        return `the task boundary of chain ${this.chain_id} is ${this.reason}`
    }
  }
}

/**
 * A record for an operation its writer cannot take: the operation is still running in this process (no one else may
 * conclude it), or another writer (a forced recovery) has already concluded it.
 */
export class OperationOwnershipError extends Schema.TaggedError<OperationOwnershipError>()("OperationOwnershipError", {
  reason: Schema.Literal("running_here", "concluded_elsewhere"),
  chain_id: Schema.String,
  operation_id: Schema.String
}) {
  override get message() {
    return this.reason === "running_here"
      ? `operation ${this.operation_id} on chain ${this.chain_id} is still running in this process`
      : `operation ${this.operation_id} on chain ${this.chain_id} was already concluded by another writer`
  }
}
