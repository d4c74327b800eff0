/**
 * The preflight report of a governed call: what stage 3 verified (the backend's capability report, the capacity
 * leases the call holds), bound to the request and the action, made by the executor alone, and the sixth input its
 * operation context is derived from.
 */
import { Schema } from "effect"
import { ActionBackendCapabilityReport } from "../action/ActionExecutionBackend.ts"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { ActionBackendRef, Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"

/** A capacity lease the call was admitted on: its capacity, its id and its expiry where the capacity gave them. */
export class AdmissionLease extends Schema.Class<AdmissionLease>("AdmissionLease")({
  capacity: Schema.String,
  lease_id: Schema.NullOr(Schema.String),
  expires_at: Schema.NullOr(Timestamp)
}) {}

/**
 * What stage 3 verified for one call, and its digest: the request and action it is for, the backend with its full
 * capability report (and that report's digest), the leases, when it was verified and when it lapses (the earliest
 * lease expiry). The digest covers every field; the capability report enters it by its own digest.
 */
export class ActionPreflightReport extends Schema.Class<ActionPreflightReport>("ActionPreflightReport")({
  report_id: Uuid,
  request_id: Identifier,
  request_digest: Sha256Hex,
  action_descriptor_digest: Sha256Hex,
  effect_backend: ActionBackendRef,
  capability_report: ActionBackendCapabilityReport,
  capability_digest: Sha256Hex,
  admission_leases: Schema.Array(AdmissionLease),
  verified_at: Timestamp,
  expires_at: Schema.NullOr(Timestamp),
  digest: Sha256Hex
}) {}

/** The canonical value a preflight report's digest is the SHA-256 of: every field but the digest and the full report. */
export const digestInput = (report: Omit<ActionPreflightReport, "digest">) => ({
  report_id: report.report_id,
  request_id: report.request_id,
  request_digest: report.request_digest,
  action_descriptor_digest: report.action_descriptor_digest,
  effect_backend: { id: report.effect_backend.id, version: report.effect_backend.version },
  capability_digest: report.capability_digest,
  admission_leases: report.admission_leases.map((lease) => ({
    capacity: lease.capacity,
    lease_id: lease.lease_id,
    expires_at: lease.expires_at
  })),
  verified_at: report.verified_at,
  expires_at: report.expires_at
})

/** Why a preflight report no longer admits its call at stage 4. */
export type PreflightRefusal = "preflight.lease_expired" | "preflight.report_changed" | "preflight.digest_mismatch"
