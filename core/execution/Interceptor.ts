/**
 * The planes around the executor's stages 5-10: interceptors decide, transformers rewrite
 * arguments (and so force a recheck), observers watch and can change nothing.
 */
import type { Option } from "effect"
import { Effect, Predicate, Schema } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import type { Usage } from "../action/ActionUsage.ts"
import { ApprovalRequest } from "../approval/Approval.ts"
import { canonicalWith, Digest, type Sha256Hex } from "../base/Digest.ts"
import { Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"
import type { Pending } from "../policy/BudgetLedger.ts"
import type { InvocationContext } from "../policy/InvocationContext.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import { DecisionReason } from "./AdmissionDecision.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { ExecutionOutcome, PolicyInputs } from "./ExecutionOutcome.ts"
import type { Arguments, ExecutionRequest } from "./ExecutionRequest.ts"
import type { SecurityStage } from "./Stage.ts"

/** What a security evaluator sees: the normalised arguments and the digest its decision binds to. */
export interface Evaluation {
  readonly attempt_id: string
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly descriptor: ActionDescriptor
  readonly arguments: Arguments
  readonly arguments_digest: Sha256Hex
  /** The snapshot the executor pinned for this call at stage 3 (governed profiles): policy decides on it, not a re-read. */
  readonly snapshot?: PolicySnapshot
}

/** One gate's result inside a verdict: what governed evidence records as `gate_evaluated`. */
export interface GateOutcome {
  readonly gate_id: string
  readonly level: "hard" | "soft" | "advisory"
  readonly decision: "allow" | "deny"
  readonly reason_code: string
  readonly matched_rules: ReadonlyArray<string>
  /** The gate's evaluator failed or threw (`control.evaluator_error`): recorded apart from rule denials. */
  readonly evaluator_error?: true
}

/** An approval that let a soft deny pass: attributable, recorded as `exception_granted`. */
export interface GrantedException {
  readonly approval_id: string
  readonly approver_class: string
  readonly reason_code: string
}

/** What every verdict says: a stable reason code and a short public detail. */
interface Reason {
  readonly code: string
  readonly detail?: string
}

/** The call may go on; `metered`: this evaluator's `charge` sees what the call consumed. */
export interface Allowed extends Reason {
  readonly disposition: "allow"
  /** The gate results behind the verdict; absent for an evaluator without gates, empty when nothing was evaluated. */
  readonly gates?: ReadonlyArray<GateOutcome>
  readonly exception?: GrantedException
  readonly metered?: boolean
  /** Governed: budget places the call takes in the commit of its gate records, or is denied as `spent` says. */
  readonly admissions?: Pending<Refused>
}

/** A terminal refusal. */
export interface Refused extends Reason {
  readonly disposition: "deny"
  readonly gates?: ReadonlyArray<GateOutcome>
}

/** Capacity is short: retry later, at `retry_at` when known (never a gate result). */
export interface Postponed extends Reason {
  readonly disposition: "defer"
  readonly retry_at?: Timestamp
}

/** A named authority must approve first: the request filed for it. */
export interface Referred extends Reason {
  readonly disposition: "escalate"
  readonly approval?: ApprovalRequest
  readonly gates?: ReadonlyArray<GateOutcome>
}

/**
 * An evaluator's verdict, before the executor binds it to a stage and a digest: a union tagged by `disposition`, each
 * variant carrying exactly its fields (an object literal of one of these forms is a verdict as it stands).
 */
export type Verdict = Allowed | Refused | Postponed | Referred

type Fields = Readonly<Record<string, unknown>>

const isRecord = (value: unknown): value is Fields => typeof value === "object" && value !== null
const isString = (value: unknown): value is string => typeof value === "string"
const { isBoolean } = Predicate
const isApprovalRequest = Schema.is(ApprovalRequest)
const absentOr = (value: unknown, is: (value: unknown) => boolean) => value === undefined || is(value)
const isReasonCode = Schema.is(DecisionReason.fields.code)
const isTimestamp = Schema.is(Timestamp)
const levels: ReadonlySet<unknown> = new Set(["hard", "soft", "advisory"])
const decisions: ReadonlySet<unknown> = new Set(["allow", "deny"])

const isGate = (value: unknown) =>
  isRecord(value) && isString(value.gate_id) && levels.has(value.level) && decisions.has(value.decision) &&
  isString(value.reason_code) && Array.isArray(value.matched_rules) && value.matched_rules.every(isString) &&
  absentOr(value.evaluator_error, (flag) => flag === true)

const isGates = (value: unknown) => Array.isArray(value) && value.every(isGate)

const isException = (value: unknown) =>
  isRecord(value) && isString(value.approval_id) && isString(value.approver_class) && isString(value.reason_code)

const isPending = (value: unknown) =>
  isRecord(value) && Array.isArray(value.admissions) && typeof value.spent === "function"

// What each disposition may carry beyond its reason.
const variants: Readonly<Record<string, (verdict: Fields) => boolean>> = {
  allow: (v) =>
    absentOr(v.gates, isGates) && absentOr(v.exception, isException) && absentOr(v.metered, isBoolean) &&
    absentOr(v.admissions, isPending),
  deny: (v) => absentOr(v.gates, isGates),
  defer: (v) => absentOr(v.retry_at, isTimestamp),
  escalate: (v) => absentOr(v.gates, isGates) && absentOr(v.approval, isApprovalRequest)
}

/**
 * Whether a value an evaluator returned is a verdict the executor can bind: a known disposition with a stable reason
 * code, a string detail if any, and well-formed fields of its variant (gates, exception, retry time, approval).
 */
export const isVerdict = (value: unknown): value is Verdict => {
  if (!isRecord(value) || !isString(value.disposition) || !Object.hasOwn(variants, value.disposition)) return false
  return isReasonCode(value.code) && absentOr(value.detail, isString) && variants[value.disposition]!(value)
}

/**
 * What an interceptor says it is: its version and the options it was built with (plain data with a canonical JSON
 * form). The governed profiles digest the options and require the pinned snapshot to bind `(id, version, digest)`.
 */
export interface Identity {
  readonly version: string
  readonly config: unknown
}

/** What a synchronous decision may read besides its evaluation: the Clock's time and the host's invocation context. */
export interface Moment {
  /** The Clock's time now, in microseconds since the epoch. */
  readonly micros: () => number
  readonly invocation: Option.Option<InvocationContext>
}

/** A security evaluator at one of stages 5-7; it decides, and may be re-run at stage 10. */
export interface Interceptor {
  readonly id: string
  readonly stage: SecurityStage
  /** Required in the governed profiles, where its verdicts are gate results: what the snapshot must bind it by. */
  readonly identity?: Identity
  readonly evaluate: (evaluation: Evaluation) => Effect.Effect<Verdict, unknown>
  /**
   * The verdict `evaluate` would answer, taken synchronously when it needs no I/O (no Effect runs for it); `undefined`
   * when it cannot decide so, and `evaluate` decides. It must never answer differently from `evaluate`.
   */
  readonly decide?: (evaluation: Evaluation, moment: Moment) => Verdict | undefined
  /** After the one invocation its verdict metered ran, whatever its outcome: what it consumed, for budgets to charge. */
  readonly charge?: (evaluation: Evaluation, usage: Usage) => Effect.Effect<void>
  /** What its decision read besides the arguments, read after it decided and again at stage 10: any change rechecks. */
  readonly inputs?: (evaluation: Evaluation) => Effect.Effect<PolicyInputs, unknown>
}

/** A governed executor was built with an interceptor it cannot bind to a snapshot: without an identity, or one it cannot digest. */
export class InterceptorIdentityError
  extends Schema.TaggedError<InterceptorIdentityError>()("InterceptorIdentityError", {
    interceptor: Schema.String,
    detail: Schema.String
  })
{
  override get message() {
    return `interceptor ${this.interceptor}: ${this.detail}`
  }
}

/** A user transformation at stage 8: new arguments, revalidated and rechecked before invoke. */
export interface Transformer {
  readonly id: string
  readonly transform: (evaluation: Evaluation) => Effect.Effect<Arguments, unknown>
}

/** What observers are told: an execution concluded with this outcome. */
export interface Concluded {
  readonly _tag: "concluded"
  readonly outcome: ExecutionOutcome
  /** Governed profiles: the committed terminal record's identifiers (observers see only committed evidence). */
  readonly evidence?: { readonly chain_id: string; readonly record_id: string; readonly head_hash: string }
}

/** A subscriber: told of each conclusion; it cannot veto, and its failure changes nothing. */
export interface Observer {
  readonly id: string
  readonly observe: (event: Concluded) => Effect.Effect<void, unknown>
}

const withDetail = <A extends Reason>(verdict: A, detail: string | undefined): A =>
  detail === undefined ? verdict : Object.assign({}, verdict, { detail })

/** The verdict with the gate results it was reached by (a copy: verdicts are shared values). */
export const withGates = <V extends Verdict>(verdict: V, gates: ReadonlyArray<GateOutcome>): V =>
  Object.assign({}, verdict, { gates })

/** An allow verdict. */
export const allow = (code = "control.allowed", detail?: string): Allowed =>
  withDetail({ disposition: "allow", code }, detail)

/** A deny verdict with a stable reason code. */
export const deny = (code: string, detail?: string): Refused => withDetail({ disposition: "deny", code }, detail)

/** A defer verdict: capacity is short, until `retry_at` when known. */
export const defer = (
  code: string,
  options: { readonly detail?: string; readonly retry_at?: Timestamp } = {}
): Postponed =>
  withDetail(
    options.retry_at === undefined
      ? { disposition: "defer", code }
      : { disposition: "defer", code, retry_at: options.retry_at },
    options.detail
  )

/** An escalate verdict: the approval request filed for it, when there is one. */
export const escalate = (
  code: string,
  options: { readonly detail?: string; readonly approval?: ApprovalRequest } = {}
): Referred =>
  withDetail(
    options.approval === undefined
      ? { disposition: "escalate", code }
      : { disposition: "escalate", code, approval: options.approval },
    options.detail
  )

/** An interceptor from a pure predicate over the evaluation. */
export const make = (
  id: string,
  stage: SecurityStage,
  decide: (evaluation: Evaluation) => Verdict
): Interceptor => ({
  id,
  stage,
  evaluate: (evaluation) => Effect.sync(() => decide(evaluation)),
  decide: (evaluation) => decide(evaluation)
})

/**
 * An interceptor from a pure predicate, with the identity the governed profiles require: its id, version and the
 * options it was built with (`config`), whose canonical JSON digest a snapshot's `interceptors` must name.
 */
export const identified = (
  identity: { readonly id: string; readonly version: string; readonly config: unknown },
  stage: SecurityStage,
  decide: (evaluation: Evaluation) => Verdict
): Interceptor => (Object.assign({}, make(identity.id, stage, decide), {
  identity: { version: identity.version, config: identity.config }
}))

const isIdentifier = Schema.is(Identifier)

/**
 * What a snapshot's `interceptors` must name for an interceptor to run in a governed executor: its id, version and
 * the digest of its configuration's canonical JSON; an interceptor without an identity, or one it cannot digest, fails.
 */
export const bindingOf = (interceptor: Interceptor) =>
  Effect.gen(function*() {
    const identity = interceptor.identity
    const refuse = (detail: string) => new InterceptorIdentityError({ interceptor: interceptor.id, detail })
    if (identity === undefined) {
      return yield* refuse("a governed executor takes only identified interceptors (Interceptor.identified)")
    }
    if (!isIdentifier(interceptor.id) || !isIdentifier(identity.version)) {
      return yield* refuse(
        "its id and version must be identifiers a snapshot can bind (non-empty, trimmed, at most 200 characters)"
      )
    }
    const config_digest = yield* Effect.mapError(
      canonicalWith(yield* Digest, identity.config),
      (error) => refuse(`its configuration has no canonical JSON (${error.reason} at ${error.path})`)
    )
    return { id: interceptor.id, version: identity.version, config_digest }
  })
