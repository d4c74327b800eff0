/**
 * A certificate's gate summary (spec/evidence.md, "Task boundary and certificate"), versioned: version 1 counts every
 * deny by level; version 2 (`summary_version: 2`) counts evaluator errors apart, so its denies are rule denials only.
 * A certificate keeps the version it was minted with and is verified against a summary of that version.
 */
import { Either, Schema } from "effect"

/** Committed gate results by level and decision, the exceptions granted, and (version 2) the evaluator errors. */
export class GateSummary extends Schema.Class<GateSummary>("GateSummary")({
  summary_version: Schema.optional(Schema.Literal(2)),
  hard_allow: Schema.NonNegativeInt,
  hard_deny: Schema.NonNegativeInt,
  soft_allow: Schema.NonNegativeInt,
  soft_deny: Schema.NonNegativeInt,
  advisory_allow: Schema.NonNegativeInt,
  advisory_deny: Schema.NonNegativeInt,
  exceptions: Schema.NonNegativeInt,
  evaluator_errors: Schema.optional(Schema.NonNegativeInt)
}) {}

/** The summary version a certificate states: 1 when it names none. */
export const versionOf = (summary: GateSummary): 1 | 2 => summary.summary_version ?? 1

const gatePayload = Schema.decodeUnknownEither(
  Schema.parseJson(Schema.Struct({
    level: Schema.Literal("hard", "soft", "advisory"),
    decision: Schema.Literal("allow", "deny"),
    reason_code: Schema.optional(Schema.Unknown),
    evaluator_error: Schema.optional(Schema.Unknown)
  }))
)

type Level = "hard" | "soft" | "advisory"

/** The gate results and exceptions of one chain, counted as they are read. */
export class Tally {
  private readonly counts = {
    hard_allow: 0,
    hard_deny: 0,
    soft_allow: 0,
    soft_deny: 0,
    advisory_allow: 0,
    advisory_deny: 0
  }
  private readonly errors: Record<Level, number> = { hard: 0, soft: 0, advisory: 0 }
  private exceptions = 0

  /**
   * Count one `gate_evaluated` payload; false when it names no level or decision. A deny is an evaluator error when
   * the record says so, or (records written before the mark) when its reason is `control.evaluator_error`.
   */
  gate(payload_json: string): boolean {
    const payload = gatePayload(payload_json)
    if (Either.isLeft(payload)) return false
    const { decision, evaluator_error, level, reason_code } = payload.right
    if (decision === "deny" && (evaluator_error === true || reason_code === "control.evaluator_error")) {
      this.errors[level]++
    } else this.counts[`${level}_${decision}`]++
    return true
  }

  /** Count one granted exception. */
  exception(): void {
    this.exceptions++
  }

  /** The summary of `version`: version 1 folds evaluator errors into each level's denies. */
  summary(version: 1 | 2): GateSummary {
    const { errors, exceptions } = this
    if (version === 2) {
      return new GateSummary({
        summary_version: 2,
        ...this.counts,
        exceptions,
        evaluator_errors: errors.hard + errors.soft + errors.advisory
      })
    }
    return new GateSummary({
      ...this.counts,
      hard_deny: this.counts.hard_deny + errors.hard,
      soft_deny: this.counts.soft_deny + errors.soft,
      advisory_deny: this.counts.advisory_deny + errors.advisory,
      exceptions
    })
  }
}

const fields = Object.keys(GateSummary.fields) as ReadonlyArray<keyof typeof GateSummary.fields>

/** Whether two summaries state the same version and the same counts. */
export const sameSummary = (a: GateSummary, b: GateSummary) => fields.every((field) => a[field] === b[field])
