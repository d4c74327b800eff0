/**
 * Task certificates (spec/evidence.md, "Task boundary and certificate"): minted only from a closed task
 * boundary's chain, verified against a trusted head in the same single pass that summarises it, and
 * re-verifiable from the stores by anyone who holds the certificate.
 */
import { Effect, Either, Schema, Stream } from "effect"
import { Sha256Hex } from "../base/Digest.ts"
import { IdGenerator, Uuid } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import { recomputeDigest } from "../policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../policy/PolicySnapshotStore.ts"
import * as Evidence from "./Evidence.ts"
import { EvidenceStore } from "./EvidenceStore.ts"
import type { EvidenceUnavailableError } from "./EvidenceStore.ts"
import { GateSummary, sameSummary, Tally, versionOf } from "./GateSummary.ts"

export {
  /** Committed gate results by level and decision, the exceptions granted, and (version 2) the evaluator errors. */
  GateSummary
} from "./GateSummary.ts"

/**
 * How the process was followed: FULL, or DEGRADED for good once any exception was granted or any call ran without
 * required containment its policy made optional (its `operation_started` lists it `degraded`, and it was not denied).
 */
export const ProcessGrade = Schema.Literal("FULL", "DEGRADED")

/** How the process was followed. */
export type ProcessGrade = typeof ProcessGrade.Type

/** A closed task boundary's certificate: its chain head, exact policy, gate summary and process grade. */
export class TaskCertificate extends Schema.Class<TaskCertificate>("TaskCertificate")({
  certificate_id: Uuid,
  task_boundary_id: Uuid,
  chain_id: Uuid,
  policy_id: Schema.String,
  policy_version: Schema.String,
  policy_digest: Sha256Hex,
  evidence_chain_head: Sha256Hex,
  gate_summary: GateSummary,
  process_grade: ProcessGrade,
  minted_at: Time.Timestamp
}) {}

/** Why a chain cannot be certified: a verification failure, no single closing head, no exact policy, an unfinished operation, or a store error. */
export const CertificateErrorReason = Schema.Literal(
  "broken_link",
  "content_mismatch",
  "unsupported_algorithm",
  "not_closed",
  "missing_policy",
  "incomplete_operations",
  "unavailable"
)

/** Why a chain cannot be certified. */
export type CertificateErrorReason = typeof CertificateErrorReason.Type

/** A chain that cannot be certified, naming the first record at fault when there is one. */
export class CertificateError extends Schema.TaggedError<CertificateError>()("CertificateError", {
  reason: CertificateErrorReason,
  chain_id: Schema.String,
  detail: Schema.String,
  failed_record_id: Schema.NullOr(Schema.String)
}) {
  override get message() {
    return `chain ${this.chain_id} cannot be certified (${this.reason}): ${this.detail}`
  }
}

/** Why a certificate does not hold: any reason its chain cannot be certified (a store error is an error, not a verdict), or a field that disagrees with the chain. */
export const CertificateFailureCode = Schema.Literal(
  "broken_link",
  "content_mismatch",
  "unsupported_algorithm",
  "not_closed",
  "missing_policy",
  "incomplete_operations",
  "summary_mismatch",
  "grade_mismatch",
  "policy_mismatch",
  "minted_before_close"
)

/** Why a certificate does not hold. */
export type CertificateFailureCode = typeof CertificateFailureCode.Type

/** A certificate re-verified from the stores: valid, or the first way it disagrees with its chain. */
export class CertificateVerification extends Schema.Class<CertificateVerification>("CertificateVerification")({
  valid: Schema.Boolean,
  failure_code: Schema.NullOr(CertificateFailureCode),
  detail: Schema.NullOr(Schema.String)
}) {}

const boundPayload = Schema.decodeUnknownEither(
  Schema.parseJson(Schema.Struct({
    task_boundary_id: Uuid,
    policy_digest: Sha256Hex,
    containment: Schema.optional(Schema.Struct({ degraded: Schema.optional(Schema.Array(Schema.String)) }))
  }))
)

interface Problem {
  readonly reason: Exclude<CertificateErrorReason, "unavailable">
  readonly detail: string
  readonly record_id: string | null
}

interface Facts {
  readonly task_boundary_id: Uuid
  readonly chain_id: Uuid
  readonly policy_id: string
  readonly policy_version: string
  readonly policy_digest: Sha256Hex
  readonly evidence_chain_head: Sha256Hex
  readonly gate_summary: GateSummary
  readonly process_grade: ProcessGrade
  /** When the closing record was written: no certificate is minted before it. */
  readonly closed_at: Time.Timestamp
}

/**
 * What one pass over a chain learns, record by record, in memory bounded by its operation count (each operation id
 * is kept, so none can start twice). It never fails: the first problem is kept, and reported only if the chain also
 * verifies (a verification failure comes first).
 */
class Reading {
  problem: Problem | undefined
  records = 0
  head: Evidence.StoredRecord | undefined
  closed: Evidence.StoredRecord | undefined
  /** The operation the record just read bound its policy to, when that record was a `policy_bound`. */
  bound: string | null | undefined
  policy: { readonly id: string; readonly version: string } | undefined
  digest: { readonly value: Sha256Hex; readonly record_id: string } | undefined
  boundary: Uuid | undefined
  readonly open = new Map<string, string>()
  readonly started = new Set<string>()
  readonly tally = new Tally()
  /** Open operations that started degraded; and how many of those ran (concluded other than denied). */
  readonly degradedOpen = new Set<string>()
  degradedRuns = 0

  step(record: Evidence.StoredRecord): void {
    if (this.problem !== undefined) return
    this.records++
    this.head = record
    this.problem = this.examine(record)
    this.bound = record.record_type === "policy_bound" ? record.operation_id : undefined
  }

  private fault(reason: Problem["reason"], detail: string, record: Evidence.StoredRecord): Problem {
    return { reason, detail, record_id: record.record_id }
  }

  private examine(record: Evidence.StoredRecord): Problem | undefined {
    if (this.closed !== undefined) {
      return this.fault("not_closed", `task_closed ${this.closed.record_id} is not the chain's head`, this.closed)
    }
    if (this.policy === undefined) this.policy = { id: record.policy_id, version: record.policy_version }
    else if (record.policy_id !== this.policy.id || record.policy_version !== this.policy.version) {
      return this.fault(
        "missing_policy",
        `record names policy ${record.policy_id}@${record.policy_version}, the chain ${this.policy.id}@${this.policy.version}`,
        record
      )
    }
    switch (record.record_type) {
      case "policy_bound":
      case "operation_started":
      case "task_closed": {
        const payload = boundPayload(record.payload_json)
        if (Either.isLeft(payload)) {
          return this.fault("content_mismatch", `${record.record_type} names no task boundary or policy digest`, record)
        }
        const problem = this.bind(record, payload.right.task_boundary_id, payload.right.policy_digest)
        if (problem !== undefined) return problem
        if (record.record_type === "task_closed") this.closed = record
        if (record.record_type !== "operation_started") return undefined
        if (record.operation_id === null || this.started.has(record.operation_id)) {
          return this.fault("incomplete_operations", "operation_started without a fresh operation id", record)
        }
        if (this.bound !== record.operation_id) {
          return this.fault("incomplete_operations", "operation_started not right after its own policy_bound", record)
        }
        this.started.add(record.operation_id)
        this.open.set(record.operation_id, record.record_id)
        if ((payload.right.containment?.degraded?.length ?? 0) > 0) this.degradedOpen.add(record.operation_id)
        return undefined
      }
      case "gate_evaluated": {
        const problem = this.requireOpen(record)
        if (problem !== undefined) return problem
        return this.tally.gate(record.payload_json)
          ? undefined
          : this.fault("content_mismatch", "gate_evaluated names no level or decision", record)
      }
      case "exception_granted": {
        const problem = this.requireOpen(record)
        if (problem === undefined) this.tally.exception()
        return problem
      }
      default: {
        if (!Evidence.terminalTypes.has(record.record_type)) return undefined
        const problem = this.requireOpen(record)
        if (problem !== undefined) return problem
        this.open.delete(record.operation_id!)
        if (this.degradedOpen.delete(record.operation_id!) && record.record_type !== "operation_denied") {
          this.degradedRuns++
        }
        return undefined
      }
    }
  }

  // One boundary and one policy digest for the whole chain: every operation's and the closing record's.
  private bind(record: Evidence.StoredRecord, boundary: Uuid, digest: Sha256Hex): Problem | undefined {
    this.digest ??= { value: digest, record_id: record.record_id }
    if (digest !== this.digest.value) {
      return this.fault(
        "missing_policy",
        `${record.record_type} names policy digest ${digest}, not ${this.digest.value}`,
        record
      )
    }
    this.boundary ??= boundary
    return boundary === this.boundary
      ? undefined
      : this.fault(
        "not_closed",
        `${record.record_type} belongs to task boundary ${boundary}, not ${this.boundary}`,
        record
      )
  }

  // Gate results, exceptions and terminals belong to an operation that started and has not concluded.
  private requireOpen(record: Evidence.StoredRecord): Problem | undefined {
    return record.operation_id !== null && this.open.has(record.operation_id)
      ? undefined
      : this.fault(
        "incomplete_operations",
        `${record.record_type} for operation ${record.operation_id} that was never started or has already concluded`,
        record
      )
  }

  /** The end-of-chain checks: one task_closed at the head, and no operation left open. */
  finish(): Problem | undefined {
    if (this.problem !== undefined) return this.problem
    if (this.closed === undefined || this.closed !== this.head) {
      return {
        reason: "not_closed",
        detail: "the head is not a task_closed record",
        record_id: this.head?.record_id ?? null
      }
    }
    for (const [operation_id, record_id] of this.open) {
      return {
        reason: "incomplete_operations",
        detail: `operation ${operation_id} has no terminal record`,
        record_id
      }
    }
    return undefined
  }
}

const unavailable = (chain_id: string) => (error: EvidenceUnavailableError) =>
  new CertificateError({ reason: "unavailable", chain_id, detail: error.message, failed_record_id: null })

/** Everything a certificate states (its summary of `version`), recomputed from the stores; fails with the first reason the chain cannot be certified. */
const inspect = Effect.fnUntraced(function*(chain_id: string, expected_head: string, version: 1 | 2) {
  const refuse = (problem: Problem) =>
    new CertificateError({
      reason: problem.reason,
      chain_id,
      detail: problem.detail,
      failed_record_id: problem.record_id
    })
  const chain = Schema.decodeUnknownEither(Uuid)(chain_id)
  const head = Schema.decodeUnknownEither(Sha256Hex)(expected_head)
  if (Either.isLeft(chain) || Either.isLeft(head)) {
    return yield* refuse({
      reason: "broken_link",
      detail: "the chain id or the expected head is malformed",
      record_id: null
    })
  }
  const store = yield* EvidenceStore
  const reading = new Reading()
  // Verification and summary read the same records in one pass: what is summarised is exactly what verified.
  const verified = yield* Evidence.verify(
    chain_id,
    Stream.tap(store.read(chain_id), (record) => Effect.sync(() => reading.step(record))),
    expected_head
  ).pipe(Effect.mapError(unavailable(chain_id)))
  if (!verified.valid) {
    return yield* refuse({
      reason: verified.failure_code ?? "broken_link",
      detail: `the chain does not verify against ${expected_head} after ${verified.checked_records} records`,
      record_id: verified.failed_record_id
    })
  }
  const problem = reading.finish()
  if (problem !== undefined) return yield* refuse(problem)
  const closed = reading.closed!
  const recorded = reading.digest!
  const missing = (detail: string) => refuse({ reason: "missing_policy", detail, record_id: recorded.record_id })
  const snapshot = yield* (yield* PolicySnapshotStore).get(closed.policy_id, closed.policy_version).pipe(
    Effect.mapError((error) => missing(error.message))
  )
  const recomputed = yield* Effect.either(recomputeDigest(snapshot))
  if (Either.isLeft(recomputed) || recomputed.right !== snapshot.digest) {
    return yield* missing(`${closed.policy_id}@${closed.policy_version} does not recompute to its digest`)
  }
  if (
    snapshot.policy_id !== closed.policy_id || snapshot.version !== closed.policy_version ||
    snapshot.digest !== recorded.value
  ) {
    return yield* missing(
      `the stored ${closed.policy_id}@${closed.policy_version} is not the snapshot the chain recorded`
    )
  }
  const gate_summary = reading.tally.summary(version)
  return {
    task_boundary_id: reading.boundary!,
    chain_id: chain.right,
    policy_id: closed.policy_id,
    policy_version: closed.policy_version,
    policy_digest: recorded.value,
    evidence_chain_head: head.right,
    gate_summary,
    process_grade: gate_summary.exceptions > 0 || reading.degradedRuns > 0 ? "DEGRADED" : "FULL",
    closed_at: Time.Timestamp.make(closed.created_at)
  } satisfies Facts
})

/** Mint a certificate for a closed task boundary's chain, verified against a trusted expected head, with a version 2 gate summary; it is minted no earlier than the task closed. */
export const mint = Effect.fn("TaskCertificate.mint")(function*(chain_id: string, expected_head: string) {
  const { closed_at, ...facts } = yield* inspect(chain_id, expected_head, 2)
  const ids = yield* IdGenerator
  const now = yield* Time.now
  // Timestamps have one fixed shape, so their texts order as their instants.
  return new TaskCertificate({
    certificate_id: yield* ids.uuid,
    ...facts,
    minted_at: now < closed_at ? closed_at : now
  })
})

const failed = (failure_code: CertificateFailureCode, detail: string) =>
  new CertificateVerification({ valid: false, failure_code, detail })

/** Re-verify a certificate: recompute everything from the stores against its chain head; fails only when the evidence store is unavailable. */
export const verify = Effect.fn("TaskCertificate.verify")(function*(certificate: TaskCertificate) {
  const recomputed = yield* Effect.either(
    inspect(certificate.chain_id, certificate.evidence_chain_head, versionOf(certificate.gate_summary))
  )
  if (Either.isLeft(recomputed)) {
    const error = recomputed.left
    return error.reason === "unavailable" ? yield* error : failed(error.reason, error.detail)
  }
  const facts = recomputed.right
  if (facts.task_boundary_id !== certificate.task_boundary_id) {
    return failed("not_closed", `the head closes task boundary ${facts.task_boundary_id}`)
  }
  if (
    facts.policy_id !== certificate.policy_id || facts.policy_version !== certificate.policy_version ||
    facts.policy_digest !== certificate.policy_digest
  ) {
    return failed(
      "policy_mismatch",
      `the chain ran under ${facts.policy_id}@${facts.policy_version} (${facts.policy_digest})`
    )
  }
  if (!sameSummary(facts.gate_summary, certificate.gate_summary)) {
    return failed("summary_mismatch", "the gate summary differs from the chain's committed gate results")
  }
  if (facts.process_grade !== certificate.process_grade) {
    return failed("grade_mismatch", `the chain grades ${facts.process_grade}`)
  }
  // Timestamps have one fixed shape, so their texts order as their instants.
  if (certificate.minted_at < facts.closed_at) {
    return failed(
      "minted_before_close",
      `minted at ${certificate.minted_at}, before the task closed at ${facts.closed_at}`
    )
  }
  return new CertificateVerification({ valid: true, failure_code: null, detail: null })
})
