/**
 * The governed steps of stage 3: the call's task boundary open in this executor's writer (and tracked from then on),
 * still open once the call is admitted, and the exact snapshot pinned and bound, with the backend probed.
 */
import { Effect, Either } from "effect"
import type { ActionBackendCapabilityReport } from "../../../action/ActionExecutionBackend.ts"
import type { EvidenceWriter, TaskBoundary } from "../../../evidence/Governance.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import { containmentRefusal, type Resolved } from "./admit.ts"
import type { Bindings } from "./bindings.ts"
import { denied } from "./call.ts"
import type { Env, Governor } from "./env.ts"
import type { AroundStep, EffectStep, SyncStep } from "./table.ts"

/** Stage 3, governed: a governed call runs inside an open task boundary of this executor's writer. */
export const boundaryWith = (writer: EvidenceWriter.Service): SyncStep<Resolved, { boundary: TaskBoundary }> => ({
  _tag: "Sync",
  stage: "bind_context",
  detail: "the call's task boundary must be open in this executor's evidence writer",
  run: ({ call }) => {
    if (call.boundary === undefined) {
      return denied(call, "governance.no_boundary", "a governed execution runs inside an open task boundary")
    }
    if (!writer.isOpen(call.boundary)) {
      return denied(
        call,
        "governance.boundary_not_open",
        `task boundary ${call.boundary.task_boundary_id} is not open in this executor's evidence writer (not opened here, or closed)`
      )
    }
    return { boundary: call.boundary }
  }
})

/**
 * Stage 3, governed: from the boundary check on, the call is one of its boundary's operations, so a close begun after
 * that check waits for it.
 */
export const trackWith = (
  writer: EvidenceWriter.Service
): AroundStep<Resolved & { boundary: TaskBoundary }, unknown> => ({
  _tag: "Around",
  stage: "bind_context",
  detail: "a close of the boundary waits for the call from here on",
  run: (state, inner) => writer.track(state.boundary.chain_id, inner(state))
})

/** Stage 3, governed, once admitted: a close begun while the call was being admitted leaves it no operation to start. */
export const stillOpenWith = (
  writer: EvidenceWriter.Service
): SyncStep<Resolved & { boundary: TaskBoundary }, void> => ({
  _tag: "Sync",
  stage: "bind_context",
  detail: "the boundary is still open once the call is admitted",
  run: ({ boundary, call }) =>
    writer.isOpen(boundary)
      ? undefined
      : denied(
        call,
        "governance.boundary_not_open",
        `task boundary ${boundary.task_boundary_id} began closing while the call was admitted`
      )
})

/**
 * Stage 3, governed: retrieve the exact snapshot and recompute its digest; it must bind every configured interceptor
 * by identity (`policy.unbound_interceptor`); probe the backend once.
 */
export const pinWith = (
  env: Env,
  governor: Governor,
  bindings: Bindings
): EffectStep<Resolved, { snapshot: PolicySnapshot; capability: ActionBackendCapabilityReport }> => ({
  _tag: "Effect",
  stage: "bind_context",
  detail: "retrieve the exact policy snapshot and recompute its digest; it must bind every configured interceptor " +
    "by id, version and configuration digest; probe the backend for required containment",
  run: ({ action, call }) =>
    Effect.flatMap(governor.pin(call.context), (pinned) => {
      if (Either.isLeft(pinned)) return Effect.succeed(denied(call, pinned.left.code, pinned.left.detail))
      const unbound = bindings(pinned.right)
      return unbound !== undefined
        ? Effect.succeed(denied(
          call,
          "policy.unbound_interceptor",
          `interceptor ${unbound.id} (version ${unbound.version}, configuration ${unbound.config_digest}) is not ` +
            `bound by policy ${pinned.right.policy_id}@${pinned.right.version}`
        ))
        : Effect.map(env.backend.probe, (capability) =>
          containmentRefusal(env, call, action, capability, pinned.right.containment) ??
            { snapshot: pinned.right, capability })
    })
})
