import type { Deferred as EffectDeferred } from "effect"
import { Effect, Either, ParseResult } from "effect"
import type { ActionDefinition } from "../Action.ts"
import type { ActionDescriptor } from "../ActionDescriptor.ts"
import type { ActionExecutionPlan } from "../ActionExecutionPlan.ts"
import type { Disposition } from "../AdmissionDecision.ts"
import { type ActionAdmissionDecision, DecisionReason } from "../AdmissionDecision.ts"
import * as Canonical from "../Canonical.ts"
import { type Digest, sha256TextWith } from "../Digest.ts"
import type { Sha256Hex } from "../Digest.ts"
import type { AppendReceipt } from "../EvidenceStore.ts"
import type { ExecutionContext } from "../ExecutionContext.ts"
import { Deferred, Denied, Escalated, type ExecutionOutcome, type Recheck } from "../ExecutionOutcome.ts"
import type { Arguments, ExecutionRequest } from "../ExecutionRequest.ts"
import type { OperationContext } from "../Governance.ts"
import type { Uuid } from "../IdGenerator.ts"
import type { Interceptor } from "../Interceptor.ts"
import type { ActionRef } from "../Refs.ts"
import type { RuntimeProfile } from "../RuntimeProfile.ts"
import type { Stage } from "../Stage.ts"
import type { Run } from "../StateStore.ts"
import type { Stager } from "./outbox.ts"
import { trustedMake } from "./trusted.ts"

/** An action compiled once per executor: its plan, identity and Schema codecs. */
export interface Compiled {
  readonly definition: ActionDefinition
  readonly descriptor: ActionDescriptor
  readonly plan: ActionExecutionPlan
  /** The security evaluators for this action, in stage order: the executor's, after any the action itself declares. */
  readonly interceptors: ReadonlyArray<Interceptor>
  readonly ref: ActionRef
  readonly decode: (u: unknown) => Either.Either<unknown, ParseResult.ParseError>
  readonly encode: (a: unknown) => Either.Either<unknown, ParseResult.ParseError>
  readonly encodeOutput: (a: unknown) => Either.Either<unknown, ParseResult.ParseError>
  /** The field names the input schema declares: the only argument keys evidence may name (others are data). */
  readonly fields: ReadonlySet<string>
}

/** The mutable working state of one attempt; it never leaves the executor. */
export interface Attempt {
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly attempt_id: Uuid
  action: ActionRef
  stage: Stage
  compiled?: Compiled
  input?: unknown
  args?: Arguments
  digest?: Sha256Hex
  decisions?: Array<ActionAdmissionDecision>
  recheck?: Recheck
  invoked: boolean
  readonly profile: RuntimeProfile
  /** The governed operation, once stage 4 opened it. */
  operation?: OperationContext
  /** Its terminal record was appended, or is being: an interruption must not append another. */
  concluded?: boolean
  /** The receipt of its committed terminal record. */
  receipt?: AppendReceipt
  /** The outcome committed for it (its terminal record, or its Run's attempt): after an interruption, the only one told. */
  committed?: ExecutionOutcome
  /** The outcome first offered to its Run's commit: committed, if a later commit finds the attempt already there. */
  offered?: ExecutionOutcome
  /** Durable: the outbox its invocation stages intents to, closed when the attempt is committed. */
  outbox?: Stager
  /** The interceptors whose verdicts metered this attempt's invocation, to be charged its usage. */
  meters?: Array<Interceptor>
  /** Durable: the Run this attempt is committed to, once bound (a scope's Run) or created on admission. */
  run_id?: Uuid
  /** Durable, one-shot: create a Run once the invocation is admitted, and complete this with it. */
  readonly newRun?: EffectDeferred.Deferred<Run>
}

/** What a stage returns: an outcome concludes the attempt; undefined goes on to the next stage. */
export type StageResult = ExecutionOutcome | undefined

const noDecisions: ReadonlyArray<ActionAdmissionDecision> = Object.freeze([])

/** The fields every outcome of this attempt shares. */
export const common = (attempt: Attempt) => {
  const fields = {
    request_id: attempt.request.request_id,
    attempt_id: attempt.attempt_id,
    action: attempt.action,
    profile: attempt.profile,
    stage: attempt.stage,
    decisions: attempt.decisions ?? noDecisions
  }
  return attempt.recheck === undefined ? fields : { ...fields, recheck: attempt.recheck }
}

/** A decision reason. */
export const reason = (code: string, detail?: string) =>
  trustedMake(DecisionReason, detail === undefined ? { code } : { code, detail })

/** A denial of this attempt at its current stage. */
export const denied = (attempt: Attempt, code: string, detail?: string): ExecutionOutcome =>
  trustedMake(Denied, { ...common(attempt), reason: reason(code, detail) })

/** The outcome a non-allow decision concludes the attempt with. */
export const outcomeOf = (
  attempt: Attempt,
  disposition: Exclude<Disposition, "allow">,
  decision: ActionAdmissionDecision
): ExecutionOutcome => {
  switch (disposition) {
    case "deny":
      return trustedMake(Denied, { ...common(attempt), reason: decision.reason })
    case "defer":
      return trustedMake(Deferred, {
        ...common(attempt),
        reason: decision.reason,
        ...(decision.retry_at === undefined ? {} : { retry_at: decision.retry_at })
      })
    case "escalate":
      return trustedMake(Escalated, {
        ...common(attempt),
        reason: decision.reason,
        ...(decision.approval === undefined ? {} : { approval: decision.approval })
      })
  }
}

/** The first issue of a parse error as `path: what`, without the offending value. */
export const describeParseError = (error: ParseResult.ParseError, root: string): string => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  if (issue === undefined) return root
  const path = issue.path.length === 0 ? root : `${root}.${issue.path.join(".")}`
  const what = issue._tag === "Missing"
    ? "is missing"
    : issue._tag === "Unexpected" || issue.message.startsWith("Expected never")
    ? "is not an accepted field"
    : issue.message.replace(/, actual .*$/s, "")
  return `${path}: ${what}`
}

/** The digest of a result's canonical JSON, or null when there is no result or it is not canonical. */
export const resultDigest = (digest: Digest.Service, result: unknown): Effect.Effect<Sha256Hex | null> => {
  if (result === undefined) return Effect.succeed(null)
  const text = Canonical.stringify(result)
  return Either.isLeft(text) ? Effect.succeed(null) : sha256TextWith(digest, text.right)
}
