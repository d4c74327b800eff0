/**
 * Plain-text rendering for the CLI: aligned tables, one-line summaries, and the key facts of an
 * evidence record.
 */
import type { StoredRecord } from "../../../../core/evidence/Evidence.ts"
import type * as TaskCertificate from "../../../../core/evidence/TaskCertificate.ts"
import type { ExecutionOutcome } from "../../../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../../../core/execution/ExecutionOutcome.ts"

/** Render rows as an aligned table under a header row. */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((cell, column) => cell.padEnd(widths[column]!)).join("  ").trimEnd()
  return [line(header), line(widths.map((width) => "-".repeat(width))), ...rows.map(line)].join("\n")
}

/** The table cells of one outcome: outcome, reason, stage. */
export const outcomeCells = (outcome: ExecutionOutcome): Array<string> => {
  const detail = "reason" in outcome && outcome.reason.detail !== undefined
    ? `: ${outcome.reason.detail}`
    : outcome._tag === "succeeded"
    ? ` -> ${JSON.stringify(outcome.result) ?? "undefined"}`
    : outcome._tag === "failed" && outcome.failure.message !== undefined
    ? `: ${outcome.failure.message}`
    : ""
  return [outcome._tag, reasonCode(outcome) + detail, outcome.stage]
}

/** The first eight characters of an id or hash, for a table ("-" when there is none). */
export const short = (id: string | null | undefined): string => id === null || id === undefined ? "-" : id.slice(0, 8)

/** A scalar fact of a record's payload. */
export type Fact = string | number | boolean | null

const factKeys = [
  "gate_id",
  "level",
  "decision",
  "disposition",
  "reason_code",
  "failure_code",
  "call_executed",
  "approval_id",
  "approver_class",
  "stage",
  "request_id",
  "rule_count",
  "gate_count",
  "task_boundary_id"
] as const

/** The key facts of a record's payload (action, gate, decision, reason codes, flags); none when it is not a JSON object. */
export const recordFacts = (record: StoredRecord): Record<string, Fact> => {
  let payload: unknown
  try {
    payload = JSON.parse(record.payload_json)
  } catch {
    return { payload: "unreadable" }
  }
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return { payload: "unreadable" }
  const fields = payload as Record<string, unknown>
  const facts: Record<string, Fact> = {}
  const action = fields.action
  if (typeof action === "object" && action !== null && typeof (action as { name?: unknown }).name === "string") {
    facts.action = (action as { name: string }).name
  }
  const scope = fields.scope
  if (typeof scope === "object" && scope !== null && typeof (scope as { run_id?: unknown }).run_id === "string") {
    facts.run_id = (scope as { run_id: string }).run_id
  }
  const nested = (key: string, field: string) => {
    const object = fields[key]
    const value = typeof object === "object" && object !== null ? (object as Record<string, unknown>)[field] : undefined
    return typeof value === "string" ? value : undefined
  }
  // An operation's backend and the reports it was admitted on: which containment stood behind the call.
  const backend = nested("backend", "id")
  if (backend !== undefined) facts.backend = backend
  const capability = nested("backend", "capability_digest")
  if (capability !== undefined) facts.capability_digest = capability
  const preflight = nested("preflight", "digest")
  if (preflight !== undefined) facts.preflight_digest = preflight
  for (const key of factKeys) {
    const value = fields[key]
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") facts[key] = value
  }
  return facts
}

/** Facts as `key=value` pairs on one line. */
export const factsLine = (facts: Record<string, Fact>): string =>
  Object.entries(facts).map(([key, value]) => `${key}=${value}`).join(" ")

/** One line on a certificate: its id, grade and gate summary (with its evaluator errors, from summary version 2). */
export const certificateLine = (certificate: TaskCertificate.TaskCertificate) => {
  const s = certificate.gate_summary
  return `certificate ${certificate.certificate_id}: grade ${certificate.process_grade}; gates allow/deny hard ${s.hard_allow}/${s.hard_deny}, soft ${s.soft_allow}/${s.soft_deny}, advisory ${s.advisory_allow}/${s.advisory_deny}; ${s.exceptions} exceptions${
    s.evaluator_errors === undefined ? "" : `; ${s.evaluator_errors} evaluator errors`
  }`
}
