/**
 * claude's `--output-format stream-json` lines as redacted ProviderObservations: `assistant` tool_use, `user`
 * tool_result (and its denial metadata), the `result` record's permission denials and usage. Observation only: what
 * the stream says is never authorization, evidence or verification. A line that is not a record claude documents is
 * skipped, never guessed at.
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
export type { StreamParser }

/** A parser whose observations have every one of `secrets` replaced. */
export const makeParser = (secrets: ReadonlyArray<string>): StreamParser => {
  const denied = new Set<string>()
  const tools = new Map<string, string>()
  const clean = (value: string) => redact(value, secrets)
  const denial = (call_id: string, tool: string, detail: string): ReadonlyArray<ProviderObservation> => {
    if (denied.has(call_id)) return []
    denied.add(call_id)
    return [observed(Denial, { plane: "observation", call_id, tool, detail: clean(detail) })]
  }

  const assistant = (record: Json) =>
    blocks(record).flatMap((block) => {
      if (block.type !== "tool_use") return []
      const call_id = text(block.id)
      tools.set(call_id, text(block.name))
      return [
        observed(ToolUse, {
          plane: "observation",
          call_id,
          tool: clean(text(block.name)),
          input: clean(inputText(block.input))
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
      const result = observed(ToolResult, {
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
      observed(Usage, {
        plane: "observation",
        input_tokens: count(usage.input_tokens),
        output_tokens: count(usage.output_tokens),
        turns: count(record.num_turns)
      })
    ]
  }

  return byType({
    assistant: assistant,
    user: user,
    result: result
  })
}

/** Every observation of a whole stdout. */
export const parse = parseWith(makeParser)
