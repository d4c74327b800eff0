/**
 * One call's identity and progress: what every stage, every bracket's finalizer and the observers read. The runner
 * moves `stage`; each other field has one writer, named on it.
 */
import type { Deferred as EffectDeferred } from "effect"
import { Effect, Either, ParseResult } from "effect"
import type { Usage } from "../../../action/ActionUsage.ts"
import type { Stager } from "../../../action/internal/outbox.ts"
import * as Canonical from "../../../base/Canonical.ts"
import { type Digest, type Sha256Hex, sha256TextWith } from "../../../base/Digest.ts"
import type { Uuid } from "../../../base/IdGenerator.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import type { ActionRef } from "../../../base/Refs.ts"
import type { Timestamp } from "../../../base/Time.ts"
import type { AppendReceipt } from "../../../evidence/EvidenceStore.ts"
import type { TaskBoundary } from "../../../evidence/Governance.ts"
import type { Pending } from "../../../policy/BudgetLedger.ts"
import type { Run } from "../../../state/StateStore.ts"
import type { ActionAdmissionDecision, Disposition } from "../../AdmissionDecision.ts"
import { DecisionReason } from "../../AdmissionDecision.ts"
import type { Deferral } from "../../Capacity.ts"
import type { ExecutionContext } from "../../ExecutionContext.ts"
import {
  type ContainmentWaiver,
  Deferred,
  Denied,
  Escalated,
  type ExecutionOutcome,
  type PolicyInputs,
  type Recheck
} from "../../ExecutionOutcome.ts"
import type { ExecutionRequest } from "../../ExecutionRequest.ts"
import type { Interceptor, Moment, Verdict } from "../../Interceptor.ts"
import type { RuntimeProfile } from "../../RuntimeProfile.ts"
import type { Stage } from "../../Stage.ts"

/** A verdict as its stage produced it, bound to the digest it evaluated: what the evidence checkpoint records. */
export interface Produced {
  readonly evaluator: string
  readonly verdict: Verdict
  readonly stage: Stage
  readonly arguments_digest: Sha256Hex
  /** The ids its gate records carry, one per gate, when its decision already references them. */
  readonly result_ids?: ReadonlyArray<Uuid>
}

/** One call's identity and progress. */
export class Call {
  /** Set by stage 1 once the reference resolves. */
  action: ActionRef
  stage: Stage = "resolve"
  /** Appended by stages 5-10. */
  decisions: Array<ActionAdmissionDecision> | undefined = undefined
  /** Verdicts produced since the last evidence checkpoint (governed profiles), appended by stages 5-10. */
  produced: Array<Produced> | undefined = undefined
  /** What each interceptor whose verdict metered the call charges its usage: set by stages 5-10, run by stage 12. */
  charges: Map<Interceptor, (usage: Usage) => Effect.Effect<void>> | undefined = undefined
  /** What each evaluator that reports them read as it decided at stages 5-7, when stage 10 compares them. */
  inputs: Map<Interceptor, PolicyInputs | undefined> | undefined = undefined
  /** When the call is stopped: the request's deadline, lowered by stage 3 to the earliest expiry of its leases. */
  deadline: Timestamp | undefined
  /** Set by stage 10. */
  recheck: Recheck | undefined = undefined
  /** Governed: the required containment it was admitted without, as its policy allowed; set by stage 3. */
  containment: ContainmentWaiver | undefined = undefined
  /** Set by stage 12 as the token is released (and reset if the backend refused it). */
  invoked = false
  /** Set by stage 12 when it stopped waiting for an interrupted callable: completes once the callable has stopped. */
  stopping: Effect.Effect<void> | undefined = undefined
  /** Governed: the budget places its operation's start is to take, set by stage 3 and taken by stage 4. */
  admissions: Array<Pending<Deferral>> | undefined = undefined
  /** Governed: its operation's start is committed (or being committed), set by stage 4. */
  operated = false
  /** Durable: the outbox its invocation stages intents to, set by stage 12 and closed by stage 14. */
  outbox: Stager | undefined = undefined
  /** Durable: the Run this call is committed to, once bound at stage 3 or created at stage 12. */
  run_id: Uuid | undefined = undefined
  /** The outcome committed for it (a terminal record, a Run's attempt): after an interruption, the only one told. */
  committed: ExecutionOutcome | undefined = undefined
  /** The receipt of its committed terminal record. */
  receipt: AppendReceipt | undefined = undefined

  constructor(
    readonly request: ExecutionRequest,
    readonly context: ExecutionContext,
    readonly attempt_id: Uuid,
    readonly profile: RuntimeProfile,
    readonly cancel: EffectDeferred.Deferred<void> | undefined,
    readonly boundary: TaskBoundary | undefined,
    readonly newRun: EffectDeferred.Deferred<Run> | undefined,
    /** The executing fiber's Clock and invocation context: what its synchronous decisions read. */
    readonly moment: Moment,
    private readonly trace: ((attempt_id: string, stage: Stage) => void) | undefined
  ) {
    this.action = request.action
    this.deadline = request.deadline
  }

  /** The runner moves the call into `stage`. */
  enter(stage: Stage): void {
    if (stage === this.stage && stage !== "resolve") return
    this.stage = stage
    this.trace?.(this.attempt_id, stage)
  }
}

const noDecisions: ReadonlyArray<ActionAdmissionDecision> = Object.freeze([])

/** The fields every outcome of this call shares, in a fresh object. */
export const common = (call: Call) => {
  const fields: {
    request_id: string
    attempt_id: Uuid
    action: ActionRef
    profile: RuntimeProfile
    stage: Stage
    decisions: ReadonlyArray<ActionAdmissionDecision>
    recheck?: Recheck
    containment?: ContainmentWaiver
  } = {
    request_id: call.request.request_id,
    attempt_id: call.attempt_id,
    action: call.action,
    profile: call.profile,
    stage: call.stage,
    decisions: call.decisions ?? noDecisions
  }
  if (call.recheck !== undefined) fields.recheck = call.recheck
  if (call.containment !== undefined) fields.containment = call.containment
  return fields
}

type Common = ReturnType<typeof common>

/** An outcome of this call: its common fields and `fields`. */
export const outcomeWith = <C extends new(props: any) => ExecutionOutcome>(
  Class: C,
  call: Call,
  fields: Omit<ConstructorParameters<C>[0], keyof Common>
): InstanceType<C> => trustedMake(Class, Object.assign(common(call), fields) as ConstructorParameters<C>[0])

/** A decision reason. */
export const reason = (code: string, detail?: string) =>
  trustedMake(DecisionReason, detail === undefined ? { code } : { code, detail })

/** A denial of this call at its current stage. */
export const denied = (call: Call, code: string, detail?: string): ExecutionOutcome =>
  outcomeWith(Denied, call, { reason: reason(code, detail) })

/** The outcome a non-allow decision concludes the call with. */
export const outcomeOf = (
  call: Call,
  disposition: Exclude<Disposition, "allow">,
  decision: ActionAdmissionDecision
): ExecutionOutcome => {
  switch (disposition) {
    case "deny":
      return outcomeWith(Denied, call, { reason: decision.reason })
    case "defer":
      return outcomeWith(Deferred, call, {
        reason: decision.reason,
        ...(decision.retry_at === undefined ? {} : { retry_at: decision.retry_at })
      })

    case "escalate":
      return outcomeWith(Escalated, call, {
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

/** `resultDigest` in the calling step with a synchronous SHA-256. */
export const resultDigestNow = (sha256: (text: string) => Sha256Hex, result: unknown): Sha256Hex | null => {
  if (result === undefined) return null
  const text = Canonical.stringify(result)
  return Either.isLeft(text) ? null : sha256(text.right)
}
