/**
 * gemini's `--output-format stream-json` lines as redacted ProviderObservations: `tool_use`, `tool_result` (its
 * status, and a denial where its error is a policy violation: an admin-policy rule or a BeforeTool hook), and the
 * `result` record's stats. Observation only: what the stream says is never authorization, evidence or verification.
 * A line that is not a record gemini documents is skipped, never guessed at.
 */
import {
  byType,
  count,
  inputText,
  isObject,
  type Json,
  parseWith,
  type StreamParser,
  text
} from "./internal/streamLines.ts"
import {
  Denial,
  observed,
  type ProviderObservation,
  redact,
  ToolResult,
  ToolUse,
  Usage
} from "./ProviderObservation.ts"

/** A parser over one run's stream: each line's observations. */
export type { StreamParser }

/** A parser whose observations have every one of `secrets` replaced. */
export const makeParser = (secrets: ReadonlyArray<string>): StreamParser => {
  const tools = new Map<string, string>()
  const clean = (value: string) => redact(value, secrets)

  const toolUse = (record: Json): ReadonlyArray<ProviderObservation> => {
    const call_id = text(record.tool_id)
    tools.set(call_id, text(record.tool_name))
    return [
      observed(ToolUse, {
        plane: "observation",
        call_id,
        tool: clean(text(record.tool_name)),
        input: clean(inputText(record.parameters))
      })
    ]
  }

  const toolResult = (record: Json): ReadonlyArray<ProviderObservation> => {
    const call_id = text(record.tool_id)
    const error = isObject(record.error) ? record.error : undefined
    const result = observed(ToolResult, {
      plane: "observation",
      call_id,
      is_error: record.status !== "success",
      content: clean(text(record.output) || text(error?.message))
    })
    if (error?.type !== "policy_violation") return [result]
    return [
      result,
      observed(Denial, {
        plane: "observation",
        call_id,
        tool: clean(tools.get(call_id) ?? ""),
        detail: clean(text(error.message))
      })
    ]
  }

  const result = (record: Json): ReadonlyArray<ProviderObservation> => {
    const stats = isObject(record.stats) ? record.stats : {}
    return [
      observed(Usage, {
        plane: "observation",
        input_tokens: count(stats.input_tokens),
        output_tokens: count(stats.output_tokens),
        turns: null
      })
    ]
  }

  return byType({
    tool_use: toolUse,
    tool_result: toolResult,
    result: result
  })
}

/** Every observation of a whole stdout. */
export const parse = parseWith(makeParser)
