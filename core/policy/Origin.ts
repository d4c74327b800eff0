/**
 * Origin policy: which kinds of trusted origin may run an action (restrictions intersect across
 * sources), the pure check the executor and `authorize` preflight share, and the caller partition
 * of stored idempotency results.
 */
import { Effect, Option, Schema } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import * as Digest from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { Identifier, type PrincipalRef } from "../base/Refs.ts"
import * as Time from "../base/Time.ts"
import {
  AgentSubject,
  checkAuthority,
  currentInvocation,
  ExecutionCaller,
  HumanSubject,
  type InvocationContext,
  isInvocationContext,
  sortOrigins
} from "./InvocationContext.ts"

/** The origins an action allows: undefined is absent (no restriction), a list is explicit (empty denies all). */
export type OriginRestriction = ReadonlyArray<ExecutionCaller> | undefined

/** The schema of an origin restriction. */
export const OriginRestriction: Schema.Schema<OriginRestriction> = Schema.UndefinedOr(Schema.Array(ExecutionCaller))

/** An explicit restriction allowing exactly these origins (none: deny every origin). */
export const allowOnly = (...origins: ReadonlyArray<ExecutionCaller>): OriginRestriction => sortOrigins(origins)

/** The intersection of every present source; absent sources add nothing, and none present is absent. */
export const intersectRestrictions = (...sources: ReadonlyArray<OriginRestriction>): OriginRestriction => {
  let allowed: ReadonlyArray<ExecutionCaller> | undefined
  for (const source of sources) {
    if (source === undefined) continue
    const narrower = allowed
    allowed = narrower === undefined ? source : source.filter((origin) => narrower.includes(origin))
  }
  return allowed === undefined ? undefined : sortOrigins(allowed)
}

/** Whether a restriction allows every required origin at once; an explicit one never permits an empty requirement. */
export const permits = (restriction: OriginRestriction, required: ReadonlyArray<ExecutionCaller>): boolean =>
  restriction === undefined || (required.length > 0 && required.every((origin) => restriction.includes(origin)))

/** Why an origin check denies. */
export const OriginDenial = Schema.Literal(
  "origin.unknown",
  "origin.agent_mismatch",
  "origin.principal_mismatch",
  "origin.not_allowed",
  "authority.expired",
  "authority.action_type",
  "authority.target_system"
)

/** Why an origin check denies. */
export type OriginDenial = typeof OriginDenial.Type

/** The check allowed: `origin.allowed` for a restricted action, `origin.unrestricted` when none applies. */
export class OriginAllowed extends Schema.TaggedClass<OriginAllowed>()("origin_allowed", {
  code: Schema.Literal("origin.allowed", "origin.unrestricted"),
  required: Schema.Array(ExecutionCaller)
}) {}

/** The check denied, with a stable reason code and a short detail. */
export class OriginDenied extends Schema.TaggedClass<OriginDenied>()("origin_denied", {
  code: OriginDenial,
  detail: Schema.String
}) {}

/** The result of an origin check. */
export const OriginCheck = Schema.Union(OriginAllowed, OriginDenied)

/** The result of an origin check. */
export type OriginCheck = typeof OriginCheck.Type

/** What an origin check compares the context with. */
export interface CheckOptions {
  readonly restriction: OriginRestriction
  readonly boundAgent: AgentSubject | undefined
  readonly principal?: PrincipalRef | undefined
  readonly now: Time.Timestamp
  readonly action_type?: string | undefined
  readonly target_system?: string | undefined
}

const unrestricted = new OriginAllowed({ code: "origin.unrestricted", required: [] })

const deny = (code: OriginDenial, detail: string) => new OriginDenied({ code, detail }, { disableValidation: true })

/** The pure origin check (and `authorize` preflight): an absent restriction adds none; see the reason codes. */
export const checkOrigin = (context: InvocationContext | undefined, options: CheckOptions): OriginCheck => {
  if (options.restriction === undefined) return unrestricted
  if (!isInvocationContext(context) || context._tag === "unknown") {
    return deny("origin.unknown", "no established invocation context")
  }
  if (options.boundAgent === undefined || context.executing_agent.id !== options.boundAgent.id) {
    return deny("origin.agent_mismatch", `executing agent ${context.executing_agent.id} is not the executor's agent`)
  }
  if (options.principal !== undefined && context.executor_id !== options.principal.id) {
    return deny("origin.principal_mismatch", `executor ${context.executor_id} is not the current principal`)
  }
  if (!permits(options.restriction, context.origins)) {
    return deny(
      "origin.not_allowed",
      `requires ${context.origins.join("+")}; allows ${options.restriction.join("+") || "none"}`
    )
  }
  const authority = checkAuthority(context.authority, options)
  if (authority !== undefined) return deny(authority, "outside the invocation's authority scope")
  return new OriginAllowed({ code: "origin.allowed", required: context.origins }, { disableValidation: true })
}

/** The preflight: `checkOrigin` under the current fiber's invocation at the Clock's now. */
export const authorize = (options: Omit<CheckOptions, "now">): Effect.Effect<OriginCheck> =>
  Effect.zipWith(
    currentInvocation,
    Time.now,
    (context, now) => checkOrigin(Option.getOrUndefined(context), { ...options, now })
  )

/** The caller partition of stored idempotency results (the canonical object whose digest keys them). */
export const IdempotencyPartition = Schema.Struct({
  executor_id: Identifier,
  executing_agent: Schema.optional(AgentSubject),
  human: Schema.optional(HumanSubject),
  calling_agent: Schema.optional(AgentSubject),
  origins: Schema.Array(ExecutionCaller),
  target: Schema.optional(Identifier),
  unknown_partition: Schema.optional(Uuid)
})

/** The caller partition of stored idempotency results. */
export type IdempotencyPartition = typeof IdempotencyPartition.Type

/** A context's partition: executor, agent, origins, every subject with sorted roles, and a protected action's target. */
export const idempotencyPartition = (
  context: InvocationContext,
  options: { readonly target?: string | undefined } = {}
): IdempotencyPartition => {
  // A look-alike object would let a caller name another caller's partition.
  if (!isInvocationContext(context)) throw new TypeError("idempotency partitions come from host-built contexts only")
  const target = options.target === undefined ? {} : { target: options.target }
  if (context._tag === "unknown") {
    return { executor_id: context.executor_id, origins: [], ...target, unknown_partition: context.partition_id }
  }
  return {
    executor_id: context.executor_id,
    executing_agent: context.executing_agent,
    ...(context.human === undefined ? {} : { human: context.human }),
    ...(context.calling_agent === undefined ? {} : { calling_agent: context.calling_agent }),
    origins: context.origins,
    ...target
  }
}

/** The `sha256-v1` digest of a context's idempotency partition. */
export const partitionDigest = (
  context: InvocationContext,
  options: { readonly target?: string | undefined } = {}
): Effect.Effect<Digest.Sha256Hex, CanonicalJsonError, Digest.Digest> =>
  Digest.canonical(idempotencyPartition(context, options))
