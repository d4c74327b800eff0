/**
 * claude's `--output-format stream-json` lines as redacted ProviderObservations: `assistant` tool_use, `user`
 * tool_result (and its denial metadata), the `result` record's permission denials and usage. Observation only: what
 * the stream says is never authorization, evidence or verification. A line that is not a record claude documents is
 * skipped, never guessed at.
 */
import { Either } from "effect"
import * as Canonical from "../base/Canonical.ts"
import { Denial, type ProviderObservation, redact, ToolResult, ToolUse, Usage } from "./ProviderObservation.ts"

// A tool input Canonical cannot write (a float, say): named, not guessed at.
const inputWithoutCanonicalForm = "(a tool input with no canonical JSON form)"

type Json = Record<string, unknown>

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const text = (value: unknown): string => (typeof value === "string" ? value : "")

const count = (value: unknown): number | null =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null

const blocks = (record: Json): ReadonlyArray<Json> => {
  const message = record.message
  if (!isObject(message) || !Array.isArray(message.content)) return []
  return message.content.filter(isObject)
}

const resultText = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.filter(isObject).map((part) => text(part.text)).join("\n")
    : ""

/** A parser over one run's stream: each line's observations, a denial reported twice by claude kept once. */
export interface StreamParser {
  readonly line: (line: string) => ReadonlyArray<ProviderObservation>
}

/** A parser whose observations have every one of `secrets` replaced. */
export const makeParser = (secrets: ReadonlyArray<string>): StreamParser => {
  const denied = new Set<string>()
  const tools = new Map<string, string>()
  const clean = (value: string) => redact(value, secrets)
  const denial = (call_id: string, tool: string, detail: string): ReadonlyArray<ProviderObservation> => {
    if (denied.has(call_id)) return []
    denied.add(call_id)
    return [new Denial({ plane: "observation", call_id, tool, detail: clean(detail) })]
  }

  const assistant = (record: Json) =>
    blocks(record).flatMap((block) => {
      if (block.type !== "tool_use") return []
      const call_id = text(block.id)
      tools.set(call_id, text(block.name))
      return [
        new ToolUse({
          plane: "observation",
          call_id,
          tool: clean(text(block.name)),
          input: clean(Either.getOrElse(Canonical.stringify(block.input ?? null), () => inputWithoutCanonicalForm))
        })
      ]
    })

  const user = (record: Json) => {
    const rejected = new Set(
      (Array.isArray(record.tool_result_meta) ? record.tool_result_meta : []).filter(isObject).flatMap((meta) =>
        isObject(meta.permission_decision) && meta.permission_decision.decision === "reject" ? [text(meta.id)] : []
      )
    )
    return blocks(record).flatMap((block): ReadonlyArray<ProviderObservation> => {
      if (block.type !== "tool_result") return []
      const call_id = text(block.tool_use_id)
      const content = resultText(block.content)
      const result = new ToolResult({
        plane: "observation",
        call_id,
        is_error: block.is_error === true,
        content: clean(content)
      })
      return rejected.has(call_id) ? [result, ...denial(call_id, tools.get(call_id) ?? "", content)] : [result]
    })
  }

  const result = (record: Json): ReadonlyArray<ProviderObservation> => {
    const denials = (Array.isArray(record.permission_denials) ? record.permission_denials : []).filter(isObject)
      .flatMap((d) => denial(text(d.tool_use_id), text(d.tool_name), "reported in the result's permission_denials"))
    const usage = isObject(record.usage) ? record.usage : {}
    return [
      ...denials,
      new Usage({
        plane: "observation",
        input_tokens: count(usage.input_tokens),
        output_tokens: count(usage.output_tokens),
        turns: count(record.num_turns)
      })
    ]
  }

  return {
    line: (line) => {
      let record: unknown
      try {
        record = JSON.parse(line)
      } catch {
        return []
      }
      if (!isObject(record)) return []
      switch (record.type) {
        case "assistant":
          return assistant(record)
        case "user":
          return user(record)
        case "result":
          return result(record)
        default:
          return []
      }
    }
  }
}

/** Every observation of a whole stdout. */
export const parse = (stdout: string, secrets: ReadonlyArray<string>): ReadonlyArray<ProviderObservation> => {
  const parser = makeParser(secrets)
  return stdout.split("\n").flatMap((line) => (line.trim() === "" ? [] : parser.line(line)))
}
