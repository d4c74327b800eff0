/**
 * Plain-text rendering for the CLI: aligned tables and one-line summaries.
 */
import type { ExecutionOutcome } from "../../core/ExecutionOutcome.ts"
import { reasonCode } from "../../core/ExecutionOutcome.ts"

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
