/**
 * The live status line of `writ harness run`: what it counts from the stream and from writ's decisions.
 */
import { assert, describe, it } from "@effect/vitest"
import { Denial, Exit, ToolResult, ToolUse, Usage } from "../../core/harness/ProviderObservation.ts"
import * as StatusLine from "../../runtime/node/commands/internal/statusLine.ts"

describe("the harness run's status line", () => {
  it("counts tool calls, results and the stream's denials, and writ's own decisions apart", () => {
    const plane = "observation" as const
    const tally = [
      new ToolUse({ plane, call_id: "1", tool: "Bash", input: "ls" }),
      new ToolResult({ plane, call_id: "1", is_error: false, content: "" }),
      new ToolUse({ plane, call_id: "2", tool: "Bash", input: "rm -rf /" }),
      new Denial({ plane, call_id: "2", tool: "Bash", detail: "writ: denied" }),
      new Usage({ plane, input_tokens: 1, output_tokens: 2, turns: 1 }),
      new Exit({ plane, code: 0, signal: null, killed_by_harness: false })
    ].reduce(StatusLine.observed, StatusLine.empty)
    const decided = [{ decision: "allow" as const }, { decision: "deny" as const, reason: "policy.denied" }]
      .reduce(StatusLine.decided, tally)
    assert.strictEqual(
      StatusLine.render("codex", decided, 12_345),
      "writ: codex 12s | 2 tool call(s), 1 result(s), 1 denial(s) in the stream | writ allowed 1, denied 1"
    )
  })
})
