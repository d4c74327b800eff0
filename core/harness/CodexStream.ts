/**
 * `codex exec --json` lines as redacted ProviderObservations: `item.started`/`item.completed` of a
 * `command_execution` (tool use, tool result), `turn.completed` usage, and the PreToolUse denials codex reports only
 * on stderr. Observation only: what the stream says is never authorization, evidence or verification. A command the
 * sandbox denied produces no item at all; a record codex does not document (and `agent_message`, `error`, which no
 * observation type carries) is skipped, never guessed at.
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

/** The tool name codex's hooks give its shell tool: the observations name it the same. */
export const shellTool = "Bash"

/** A parser over one run's stream: each line's observations, each command's use reported once. */
export type { StreamParser }

/** A parser whose observations have every one of `secrets` replaced. */
export const makeParser = (secrets: ReadonlyArray<string>): StreamParser => {
  const started = new Set<string>()
  const clean = (value: string) => redact(value, secrets)

  const use = (item: Json): ReadonlyArray<ProviderObservation> => {
    const call_id = text(item.id)
    if (started.has(call_id)) return []
    started.add(call_id)
    return [
      observed(ToolUse, { plane: "observation", call_id, tool: shellTool, input: clean(text(item.command)) })
    ]
  }

  // An MCP server's tool call, named as codex names it to its hooks (`mcp__<server>__<tool>`).
  const mcpCall = (item: Json, completed: boolean): ReadonlyArray<ProviderObservation> => {
    const call_id = text(item.id)
    const tool = `mcp__${text(item.server)}__${text(item.tool)}`
    const seen = started.has(call_id)
    started.add(call_id)
    const error = isObject(item.error) ? text(item.error.message) : ""
    return [
      ...(seen ? [] : [
        observed(ToolUse, { plane: "observation", call_id, tool, input: clean(inputText(item.arguments)) })
      ]),
      ...(completed
        ? [
          observed(ToolResult, {
            plane: "observation",
            call_id,
            is_error: item.status !== "completed",
            content: clean(error !== "" ? error : inputText(item.result))
          })
        ]
        : [])
    ]
  }

  const item = (record: Json, completed: boolean): ReadonlyArray<ProviderObservation> => {
    const item = record.item
    if (isObject(item) && item.type === "mcp_tool_call") return mcpCall(item, completed)
    if (!isObject(item) || item.type !== "command_execution") return []
    if (!completed) return use(item)
    return [
      ...use(item),
      observed(ToolResult, {
        plane: "observation",
        call_id: text(item.id),
        is_error: item.status !== "completed" || item.exit_code !== 0,
        content: clean(text(item.aggregated_output))
      })
    ]
  }

  const usage = (record: Json): ReadonlyArray<ProviderObservation> => {
    const usage = isObject(record.usage) ? record.usage : {}
    // codex's one turn per exec is not a model round trip: the turn count is unknown, not 1.
    return [
      observed(Usage, {
        plane: "observation",
        input_tokens: count(usage.input_tokens),
        output_tokens: count(usage.output_tokens),
        turns: null
      })
    ]
  }

  return byType({
    "item.started": (record) => item(record, false),
    "item.completed": (record) => item(record, true),
    "turn.completed": usage
  })
}

const blocked = /Command blocked by PreToolUse hook: (.*?)\. Command: (.*)$/

/** The PreToolUse denials codex's stderr reports (its stream has no record of them). */
export const denials = (stderr: string, secrets: ReadonlyArray<string>): ReadonlyArray<ProviderObservation> =>
  stderr.split("\n").flatMap((line) => {
    const match = blocked.exec(line)
    if (match === null) return []
    return [
      observed(Denial, {
        plane: "observation",
        call_id: null,
        tool: shellTool,
        detail: redact(`${match[1]}: ${match[2]}`, secrets)
      })
    ]
  })

/** Every observation of a whole stdout. */
export const parse = parseWith(makeParser)
