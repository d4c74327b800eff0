/**
 * Stage 3's preflight report (governed): the backend's capability report and the call's leases, bound to its request
 * and action and digested, made here alone; and its verification at stage 4, before `operation_started`.
 */
import { Effect, Either, Exit, Schema } from "effect"
import { ActionBackendCapabilityReport } from "../../../action/ActionExecutionBackend.ts"
import * as Canonical from "../../../base/Canonical.ts"
import { type Sha256Hex, sha256TextWith } from "../../../base/Digest.ts"
import type { Uuid } from "../../../base/IdGenerator.ts"
import { trustedMake } from "../../../base/internal/trusted.ts"
import * as Time from "../../../base/Time.ts"
import type { TaskBoundary } from "../../../evidence/TaskBoundary.ts"
import type { PolicySnapshot } from "../../../policy/PolicySnapshot.ts"
import type { ExecutionOutcome } from "../../ExecutionOutcome.ts"
import { ExecutionRequest } from "../../ExecutionRequest.ts"
import { ActionPreflightReport, type AdmissionLease, digestInput } from "../../Preflight.ts"
import type { Digested } from "./admit.ts"
import { type Call, denied } from "./call.ts"
import type { Env } from "./env.ts"
import type { EffectStep, SyncStep } from "./table.ts"

const encodeRequest = Schema.encodeEither(ExecutionRequest)
const encodeReport = Schema.encodeEither(ActionBackendCapabilityReport)

// A backend's capability report is an immutable value: its canonical text is taken once per report.
const reportTexts = new WeakMap<ActionBackendCapabilityReport, string>()

const reportText = (report: ActionBackendCapabilityReport): string | undefined => {
  let text = reportTexts.get(report)
  if (text === undefined) {
    const canonical = Either.flatMap(encodeReport(report), Canonical.stringify)
    if (Either.isLeft(canonical)) return undefined
    text = canonical.right
    reportTexts.set(report, text)
  }
  return text
}

const earliest = (leases: ReadonlyArray<AdmissionLease>) =>
  leases.reduce<Time.Timestamp | null>(
    (first, { expires_at }) =>
      expires_at !== null && (first === null || Time.toMicros(expires_at) < Time.toMicros(first)) ? expires_at : first,
    null
  )

/** The canonical text of a preflight report's digest input. */
const digestText = (report: Omit<ActionPreflightReport, "digest">) =>
  Either.getOrThrow(Canonical.stringify(digestInput(report)))

/** After stage 3, governed: the pinned snapshot and the backend report the call was admitted on. */
export interface Pinned extends Digested {
  readonly boundary: TaskBoundary
  readonly snapshot: PolicySnapshot
  readonly capability: ActionBackendCapabilityReport
}

/** After stage 3, governed: the capacity leases the call holds, when it was admitted on any. */
export interface Leased extends Pinned {
  readonly leases?: ReadonlyArray<AdmissionLease>
}

/** After the preflight: the report the operation context is derived from. */
export interface Preflighted extends Leased {
  readonly preflight: ActionPreflightReport
}

const preflightDetail = "make the preflight report: the backend's capability report and the call's leases, bound " +
  "to the request and the action, digested"

// The canonical texts a preflight digests, or the refusal of a request or report that has none.
const textsOf = (state: Leased) => {
  const request = Either.flatMap(encodeRequest(state.call.request), Canonical.stringify)
  if (Either.isLeft(request)) return denied(state.call, "request.not_canonical", "the request has no canonical JSON")
  const report = reportText(state.capability)
  if (report === undefined) {
    return denied(state.call, "preflight.report_invalid", "the capability report has no canonical JSON")
  }
  return { request: request.right, report }
}

// Every field of the report but its digest.
const fieldsOf = (state: Leased, report_id: Uuid, request_digest: Sha256Hex, capability_digest: Sha256Hex) => {
  const leases = state.leases ?? []
  return {
    report_id,
    request_id: state.call.request.request_id,
    request_digest,
    action_descriptor_digest: state.action.descriptor.digest,
    effect_backend: state.call.context.effect_backend,
    capability_report: state.capability,
    capability_digest,
    admission_leases: leases,
    verified_at: Time.fromMicros(state.call.moment.micros()),
    expires_at: earliest(leases)
  }
}

// Reports stage 3 sealed in this process, frozen with their leases, until stage 4 takes them: the digest this step
// took of fields that cannot change since is not taken again. Any other report is recomputed.
const sealedReports = new WeakSet<ActionPreflightReport>()

const sealed = (fields: Omit<ActionPreflightReport, "digest">, digest: Sha256Hex) => {
  const admission_leases = Object.freeze(fields.admission_leases.map((lease) => Object.freeze(lease)))
  const preflight = Object.freeze(
    trustedMake(ActionPreflightReport, Object.assign({}, fields, { admission_leases, digest }))
  )
  sealedReports.add(preflight)
  return { preflight }
}

/**
 * Stage 3, governed, once admitted: the preflight report, whose digest covers the request's and the capability report's
 * digests (that one taken once per report), the action, the backend, the leases, and when it was verified and lapses;
 * synchronous where the Digest and IdGenerator layers are.
 */
export const preflightWith = (
  env: Env
):
  | SyncStep<Leased, { preflight: ActionPreflightReport }>
  | EffectStep<Leased, { preflight: ActionPreflightReport }> =>
{
  const reportDigests = new WeakMap<ActionBackendCapabilityReport, Sha256Hex>()
  const hash = env.digest.sha256TextSync
  const uuid = env.ids.uuidSync
  if (hash !== undefined && uuid !== undefined) {
    return {
      _tag: "Sync",
      stage: "bind_context",
      detail: preflightDetail,
      run: (state) => {
        const texts = textsOf(state)
        if (!("report" in texts)) return texts
        let capability_digest = reportDigests.get(state.capability)
        if (capability_digest === undefined) reportDigests.set(state.capability, capability_digest = hash(texts.report))
        const fields = fieldsOf(state, uuid(), hash(texts.request), capability_digest)
        return sealed(fields, hash(digestText(fields)))
      }
    }
  }
  return {
    _tag: "Effect",
    stage: "bind_context",
    detail: preflightDetail,
    run: Effect.fnUntraced(function*(state) {
      const texts = textsOf(state)
      if (!("report" in texts)) return texts
      let capability_digest = reportDigests.get(state.capability)
      if (capability_digest === undefined) {
        reportDigests.set(state.capability, capability_digest = yield* sha256TextWith(env.digest, texts.report))
      }
      const fields = fieldsOf(
        state,
        yield* env.ids.uuid,
        yield* sha256TextWith(env.digest, texts.request),
        capability_digest
      )
      return sealed(fields, yield* sha256TextWith(env.digest, digestText(fields)))
    })
  }
}

// The refusal of a report that no longer admits the call, given the backend's report now and the digest recomputed.
const refusalOf = (
  call: Call,
  report: ActionPreflightReport,
  current: ActionBackendCapabilityReport,
  digest: Sha256Hex
): ExecutionOutcome | undefined => {
  if (report.expires_at !== null && call.moment.micros() >= Time.toMicros(report.expires_at)) {
    return denied(call, "preflight.lease_expired", `a lease the call was admitted on lapsed at ${report.expires_at}`)
  }
  if (current !== report.capability_report && reportText(current) !== reportText(report.capability_report)) {
    return denied(
      call,
      "preflight.report_changed",
      `backend ${current.backend.id} reports other capabilities than at stage 3`
    )
  }
  return digest === report.digest
    ? undefined
    : denied(call, "preflight.digest_mismatch", "the preflight report does not recompute to its digest")
}

/**
 * Stage 4, before `operation_started`: the report still admits the call (no lease has lapsed, the backend reports
 * what it reported, the report is the one stage 3 sealed here or recomputes to its digest); the refusal that concludes
 * it otherwise. Decided in the calling step where the backend's probe is a value already.
 */
export const verifyPreflight = (
  env: Env,
  call: Call,
  report: ActionPreflightReport
): ExecutionOutcome | undefined | Effect.Effect<ExecutionOutcome | undefined> => {
  const probe = env.backend.probe
  const sha256 = env.digest.sha256TextSync
  const digest = sealedReports.delete(report)
    ? report.digest
    : sha256 === undefined
    ? undefined
    : sha256(digestText(report))
  // A probe that is an Exit already (a constant report) is read, not run.
  const known = Exit.isExit(probe) ? probe as Exit.Exit<ActionBackendCapabilityReport> : undefined
  if (known !== undefined && Exit.isSuccess(known) && digest !== undefined) {
    return refusalOf(call, report, known.value, digest)
  }
  return Effect.flatMap(probe, (current) =>
    Effect.map(
      digest === undefined ? sha256TextWith(env.digest, digestText(report)) : Effect.succeed(digest),
      (recomputed) => refusalOf(call, report, current, recomputed)
    ))
}
