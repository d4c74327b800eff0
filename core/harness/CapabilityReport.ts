/**
 * What a harness can prove for one run: every requested control exactly once, as enforced, degraded or unsupported,
 * who enforces it, and whether that rests on a declaration or on a verify run that made the real CLI try the
 * forbidden thing. Enforced always means verified; an unknown version or a missing mapping is unsupported.
 */
import { Either, Schema } from "effect"
import { Sha256Hex } from "../base/Digest.ts"
import { Identifier } from "../base/Refs.ts"
import { ControlName, Level, Provider, Source } from "./HarnessControl.ts"

/** Evidence of a control: only declared by the adapter's mapping. */
export class Declared extends Schema.TaggedClass<Declared>()("declared", {}) {}

/** Evidence of a control: a verify run for this executable and version passed its scenario. */
export class Verified
  extends Schema.TaggedClass<Verified>()("verified", { run_id: Identifier, scenario: Identifier })
{}

/** What a control's level rests on. */
export const Evidence = Schema.Union(Declared, Verified)

/** What a control's level rests on. */
export type Evidence = typeof Evidence.Type

/** One requested control as the report states it. */
export class ControlReport extends Schema.Class<ControlReport>("ControlReport")(
  Schema.Struct({
    control: ControlName,
    level: Level,
    source: Source,
    mechanism: Schema.String,
    evidence: Evidence,
    note: Schema.optional(Schema.String)
  }).pipe(Schema.filter((c) => c.level !== "enforced" || c.evidence._tag === "verified" || "enforced is verified"))
) {}

/** The executable a report is pinned to. */
export class ExecutableIdentity extends Schema.Class<ExecutableIdentity>("ExecutableIdentity")({
  path: Schema.String,
  digest: Sha256Hex
}) {}

/** What a harness can prove for one run. */
export class CapabilityReport extends Schema.Class<CapabilityReport>("CapabilityReport")(
  Schema.Struct({
    provider: Provider,
    provider_version: Schema.NullOr(Schema.String),
    executable: Schema.NullOr(ExecutableIdentity),
    controls: Schema.Array(ControlReport),
    notes: Schema.Array(Schema.String)
  }).pipe(
    Schema.filter((r) =>
      new Set(r.controls.map((c) => c.control)).size === r.controls.length || "each control appears once"
    )
  )
) {}

/** What an adapter's mapping claims for one control, before verification. */
export interface Claim {
  readonly control: ControlName
  readonly level: "enforced" | "degraded"
  readonly source: Source
  readonly mechanism: string
  readonly note?: string
}

/** One verify run's result: the real CLI, at this version and executable, tried a scenario's forbidden thing. */
export class VerifyRun extends Schema.Class<VerifyRun>("VerifyRun")({
  control: ControlName,
  provider_version: Schema.String,
  executable_digest: Sha256Hex,
  scenario: Identifier,
  run_id: Identifier,
  /** Whether the forbidden effect was checked absent (files, listener, canary), never what the stream said. */
  effect_absent: Schema.Boolean
}) {}

/** The inputs of `assess`. */
export interface Assessment {
  readonly provider: Provider
  readonly version: string | null
  readonly executable: ExecutableIdentity | null
  readonly requested: ReadonlyArray<ControlName>
  readonly claims: ReadonlyArray<Claim>
  readonly verifications: ReadonlyArray<VerifyRun>
  readonly notes?: ReadonlyArray<string>
}

const unsupported = (control: ControlName, note: string) =>
  new ControlReport({
    control,
    level: "unsupported",
    source: "writ",
    mechanism: "none",
    evidence: new Declared(),
    note
  })

const assessOne = (input: Assessment, control: ControlName): ControlReport => {
  if (input.version === null || input.executable === null) return unsupported(control, "unknown provider version")
  const claim = input.claims.find((c) => c.control === control)
  if (claim === undefined) return unsupported(control, "the adapter has no mapping for this control")
  const base = { control, source: claim.source, mechanism: claim.mechanism }
  const runs = input.verifications.filter((v) =>
    v.control === control && v.provider_version === input.version && v.executable_digest === input.executable!.digest
  )
  const failed = runs.find((v) => !v.effect_absent)
  if (failed !== undefined) {
    return new ControlReport({
      ...base,
      level: "degraded",
      evidence: new Declared(),
      note: `verify scenario ${failed.scenario} failed (run ${failed.run_id})`
    })
  }
  const passed = runs[0]
  if (claim.level === "enforced" && passed !== undefined) {
    return new ControlReport({
      ...base,
      level: "enforced",
      evidence: new Verified({ run_id: passed.run_id, scenario: passed.scenario }),
      ...(claim.note === undefined ? {} : { note: claim.note })
    })
  }
  const note = claim.level === "enforced" ? "not verified for this executable and version" : claim.note
  return new ControlReport({ ...base, level: "degraded", evidence: new Declared(), ...(note ? { note } : {}) })
}

/** The report for the requested controls: each exactly once, enforced only where a verify run passed. */
export const assess = (input: Assessment): CapabilityReport =>
  new CapabilityReport({
    provider: input.provider,
    provider_version: input.version,
    executable: input.executable,
    controls: [...new Set(input.requested)].map((control) => assessOne(input, control)),
    notes: [...(input.notes ?? [])]
  })

/** The report of a spec that could not be compiled: every requested control unsupported. */
export const uncompiled = (
  provider: Provider,
  requested: ReadonlyArray<ControlName>,
  reason: string
): CapabilityReport =>
  new CapabilityReport({
    provider,
    provider_version: null,
    executable: null,
    controls: [...new Set(requested)].map((control) => unsupported(control, `compile failed: ${reason}`)),
    notes: []
  })

/** The required controls a report does not enforce. */
export const unmet = (report: CapabilityReport, required: ReadonlyArray<ControlName>): ReadonlyArray<ControlName> =>
  required.filter((name) => report.controls.find((c) => c.control === name)?.level !== "enforced")

/** A required control is not enforced: the run is refused before spawn, with the report. */
export class RequiredControlUnmet extends Schema.TaggedError<RequiredControlUnmet>()("RequiredControlUnmet", {
  unmet: Schema.Array(ControlName),
  report: CapabilityReport
}) {
  override get message() {
    return `required controls not enforced: ${this.unmet.join(", ")}`
  }
}

/** The report when every required control is enforced, else the refusal naming the others. */
export const admit = (
  report: CapabilityReport,
  required: ReadonlyArray<ControlName>
): Either.Either<CapabilityReport, RequiredControlUnmet> => {
  const missing = unmet(report, required)
  return missing.length === 0 ? Either.right(report) : Either.left(new RequiredControlUnmet({ unmet: missing, report }))
}
