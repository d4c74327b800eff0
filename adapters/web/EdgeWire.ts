/**
 * The wire of writ's edge protocol (version 1): the routes a writ edge handler serves, the JSON bodies of its requests
 * and answers, and its typed refusals. Shared by the handler (runtime/edge) and the edge backend, so neither can drift.
 * Runtimes: every one.
 */
import { Schema } from "effect"
import { ContainmentKind } from "../../core/action/Action.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { RefusalReason } from "./EdgeSignature.ts"

/** The routes: execute, reconcile one idempotency key, and the platform's capability claims. */
export const routes = {
  execute: "/v1/execute",
  executions: "/v1/executions/",
  capabilities: "/v1/capabilities"
} as const

/** An idempotency key: what the caller names one execution by, and asks about when its answer was lost. */
export const IdempotencyKey = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9._:-]{1,128}$/))

/** `POST /v1/execute`: one call of an action the handler registers, its arguments encoded by the input Schema. */
export class ExecuteRequest extends Schema.Class<ExecuteRequest>("EdgeExecuteRequest")({
  idempotency_key: IdempotencyKey,
  request_id: Schema.String.pipe(Schema.trimmed(), Schema.nonEmptyString(), Schema.maxLength(200)),
  action: Schema.String,
  version: Schema.String,
  descriptor_digest: Sha256Hex,
  arguments: Schema.Unknown
}) {}

const Reason = Schema.Struct({ code: Schema.String, detail: Schema.optional(Schema.String) })
const Failure = Schema.Struct({ code: Schema.String, message: Schema.optional(Schema.String) })

/** The edge executor's outcome as its wire carries it: its tag, and the result, reason or failure it names. */
export const RemoteOutcome = Schema.Struct({
  _tag: Schema.Literal("succeeded", "denied", "deferred", "escalated", "failed", "cancelled", "timed_out", "ambiguous"),
  result: Schema.optional(Schema.Unknown),
  reason: Schema.optional(Reason),
  failure: Schema.optional(Failure),
  call_executed: Schema.optional(Schema.Boolean),
  /** The required containment the edge's executor admitted on a remote claim or let degrade under its policy. */
  containment: Schema.optional(Schema.Struct({
    degraded: Schema.optional(Schema.Array(ContainmentKind)),
    remote_claims: Schema.optional(Schema.Array(ContainmentKind))
  }))
})

/** A remote outcome. */
export type RemoteOutcome = typeof RemoteOutcome.Type

/** The answer to `POST /v1/execute`: the outcome, and whether it is the stored one of an earlier identical request. */
export class ExecuteResponse extends Schema.Class<ExecuteResponse>("EdgeExecuteResponse")({
  idempotency_key: IdempotencyKey,
  replayed: Schema.Boolean,
  outcome: RemoteOutcome
}) {}

/**
 * What the handler did for one key: `concluded` with its outcome, `in_progress`, `unconcluded` (it began and its
 * executor failed before an outcome was recorded: the action may have run), or `unknown` (it holds no execution
 * under the key for this caller: it received none, or refused it before running anything).
 */
export class ExecutionRecord extends Schema.Class<ExecutionRecord>("EdgeExecutionRecord")({
  idempotency_key: IdempotencyKey,
  state: Schema.Literal("concluded", "in_progress", "unconcluded", "unknown"),
  outcome: Schema.optional(RemoteOutcome)
}) {}

/** One capability the platform claims to enforce (`enforced`), or says it does not (`unsupported`). */
export const PlatformClaim = Schema.Struct({
  name: Schema.String.pipe(Schema.pattern(/^writ(?:\.[a-z][a-z0-9_]*)+@[1-9][0-9]*$/)),
  level: Schema.Literal("enforced", "unsupported")
})

/** `GET /v1/capabilities`: the handler's protocol and version, the runtime it runs on, and the platform's claims. */
export class Capabilities extends Schema.Class<Capabilities>("EdgeCapabilities")({
  protocol: Schema.Literal("writ-edge-v1"),
  handler_version: Schema.String,
  runtime: Schema.String,
  claims: Schema.Array(PlatformClaim),
  detail: Schema.String
}) {}

/** Why a signed, authentic request was not served. */
export const InvalidReason = Schema.Literal(
  "not_found",
  "method_not_allowed",
  "body_too_large",
  "body_invalid",
  "unknown_action",
  "descriptor_mismatch",
  "idempotency_conflict",
  "in_progress",
  "executor_failed",
  "policy_unavailable",
  "handler_failed"
)

/** A request the handler could not serve, and why (status 400, 404, 405, 409, 413, 500 or 503). */
export class EdgeRequestInvalid extends Schema.TaggedError<EdgeRequestInvalid>()("EdgeRequestInvalid", {
  reason: InvalidReason,
  detail: Schema.String
}) {}

/** Every typed error body a handler answers with. */
export const ErrorBody = Schema.Union(
  Schema.Struct({ _tag: Schema.Literal("EdgeRequestRefused"), reason: RefusalReason, detail: Schema.String }),
  Schema.Struct({ _tag: Schema.Literal("EdgeRequestInvalid"), reason: InvalidReason, detail: Schema.String })
)

/** The HTTP status of each reason an authentic request is not served. */
export const statusOf: Record<typeof InvalidReason.Type, number> = {
  not_found: 404,
  method_not_allowed: 405,
  body_too_large: 413,
  body_invalid: 400,
  unknown_action: 400,
  descriptor_mismatch: 400,
  idempotency_conflict: 409,
  in_progress: 409,
  executor_failed: 503,
  policy_unavailable: 503,
  handler_failed: 500
}
