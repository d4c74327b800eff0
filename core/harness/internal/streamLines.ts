/**
 * What every provider's stream parser shares: reading a line as a JSON record (anything else is skipped, never
 * guessed at), the field readers, a tool input's canonical text, dispatch by the record's `type`, and a whole stdout.
 */
import { Either } from "effect"
import * as Canonical from "../../base/Canonical.ts"
import type { ProviderObservation } from "../ProviderObservation.ts"

/** A JSON object as read from a stream line. */
export type Json = Record<string, unknown>

/** Whether a value is a JSON object (not an array, not null). */
export const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A string field's value, or "" for anything else. */
export const text = (value: unknown): string => (typeof value === "string" ? value : "")

/** A token or turn count: a non-negative integer, else unknown. */
export const count = (value: unknown): number | null =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null

// A tool input Canonical cannot write (a float, say): named, not guessed at.
const inputWithoutCanonicalForm = "(a tool input with no canonical JSON form)"

/** A tool input's canonical JSON text, or a fixed note when it has none. */
export const inputText = (input: unknown): string =>
  Either.getOrElse(Canonical.stringify(input ?? null), () => inputWithoutCanonicalForm)

/** A parser over one run's stream: each line's observations. */
export interface StreamParser {
  readonly line: (line: string) => ReadonlyArray<ProviderObservation>
}

/** A parser handing each line's JSON record to the handler named by its `type`; other lines give nothing. */
export const byType = (
  handlers: Record<string, (record: Json) => ReadonlyArray<ProviderObservation>>
): StreamParser => ({
  line: (line) => {
    let record: unknown
    try {
      record = JSON.parse(line)
    } catch {
      return []
    }
    if (!isObject(record) || typeof record.type !== "string" || !Object.hasOwn(handlers, record.type)) return []
    return handlers[record.type]!(record)
  }
})

/** Every observation of a whole stdout, by a fresh parser from `makeParser`. */
export const parseWith =
  (makeParser: (secrets: ReadonlyArray<string>) => StreamParser) =>
  (stdout: string, secrets: ReadonlyArray<string>): ReadonlyArray<ProviderObservation> => {
    const parser = makeParser(secrets)
    return stdout.split("\n").flatMap((line) => (line.trim() === "" ? [] : parser.line(line)))
  }
