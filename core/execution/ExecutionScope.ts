/**
 * The execution scope that owns an operation: a closed union of an ephemeral operation (correlation
 * only, never a Run) and a durable Run (the sole Run claim).
 */
import { Option, Schema } from "effect"
import { Uuid } from "../base/IdGenerator.ts"

/** An in-memory operation scope; its id correlates and can never resolve as a Run. */
export class EphemeralOperation extends Schema.TaggedClass<EphemeralOperation>()("ephemeral_operation", {
  scope_id: Uuid
}) {}

/** A durable Run scope; `owner_attempt_id` names the enclosing attempt, if any. */
export class DurableRun extends Schema.TaggedClass<DurableRun>()("durable_run", {
  run_id: Uuid,
  owner_attempt_id: Schema.optional(Uuid)
}) {}

/** The closed union of execution scopes. */
export const ExecutionScopeRef = Schema.Union(EphemeralOperation, DurableRun)

/** The closed union of execution scopes. */
export type ExecutionScopeRef = typeof ExecutionScopeRef.Type

/** The Run a scope claims: none for an ephemeral operation. */
export const runId = (scope: ExecutionScopeRef): Option.Option<Uuid> =>
  scope._tag === "durable_run" ? Option.some(scope.run_id) : Option.none()

/** Whether two scopes name the same owner. */
export const equals = (a: ExecutionScopeRef, b: ExecutionScopeRef): boolean =>
  a._tag === "ephemeral_operation"
    ? b._tag === "ephemeral_operation" && a.scope_id === b.scope_id
    : b._tag === "durable_run" && a.run_id === b.run_id && a.owner_attempt_id === b.owner_attempt_id
