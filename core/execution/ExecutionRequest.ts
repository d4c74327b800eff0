/**
 * The immutable request to run one action. Everything in it is untrusted input, including
 * `principal_claim`, until a trusted ExecutionContext binds or rejects it.
 */
import { Schema } from "effect"
import { Uuid } from "../base/IdGenerator.ts"
import { ActionRef, Identifier, PrincipalRef } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import { ExecutionScopeRef } from "./ExecutionScope.ts"

/** Arguments as received: a string-keyed record, normalised later by the action's input Schema. */
export const Arguments = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** Arguments as received. */
export type Arguments = typeof Arguments.Type

/** A request to run one action in one execution scope. */
export class ExecutionRequest extends Schema.Class<ExecutionRequest>("ExecutionRequest")({
  request_id: Identifier,
  action: ActionRef,
  arguments: Arguments,
  principal_claim: Schema.optional(PrincipalRef),
  execution_scope: ExecutionScopeRef,
  session_id: Schema.optional(Identifier),
  deadline: Schema.optional(Timestamp),
  idempotency_key: Schema.optional(Identifier),
  approval_id: Schema.optional(Uuid),
  metadata: Schema.optionalWith(Arguments, { default: () => ({}) })
}) {}
