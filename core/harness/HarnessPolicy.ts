/**
 * The blocking callback's decision: a provider's tool call, named as the writ action it amounts to, decided by the
 * same side-effect-free policy evaluation the executor's stages 6 and 7 run (`PolicyGate.explain`) against the
 * spec's snapshot. Only an `allow` allows: a deny, an escalation (no one is there to approve) or a failure denies.
 */
import { Effect } from "effect"
import * as Time from "../base/Time.ts"
import type { PolicyInput } from "../policy/PolicyEvaluator.ts"
import * as PolicyGate from "../policy/PolicyGate.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import { isWritMcpTool } from "./HarnessSpec.ts"

/** A tool call the provider's pre-tool hook delegated to writ. */
export interface ToolCall {
  readonly tool: string
  readonly input: unknown
  readonly call_id: string
}

/** writ's answer to a delegated tool call: `allow` leaves the provider's own permissions to decide too. */
export type CallbackDecision = { readonly decision: "allow" } | { readonly decision: "deny"; readonly reason: string }

/** The writ action a provider tool amounts to, its declared effects, and which input field is its path. */
const actions: Record<string, { readonly action: string; readonly effects: ReadonlyArray<string> }> = {
  Bash: { action: "shell.exec", effects: ["process.spawn"] },
  Read: { action: "files.read", effects: ["filesystem.read"] },
  Write: { action: "files.write", effects: ["filesystem.write"] },
  Edit: { action: "files.edit", effects: ["filesystem.write"] },
  NotebookEdit: { action: "files.edit", effects: ["filesystem.write"] },
  Glob: { action: "files.search", effects: ["filesystem.read"] },
  Grep: { action: "files.search", effects: ["filesystem.read"] },
  WebFetch: { action: "web.fetch", effects: ["network.egress"] },
  WebSearch: { action: "web.search", effects: ["network.egress"] },
  run_shell_command: { action: "shell.exec", effects: ["process.spawn"] },
  read_file: { action: "files.read", effects: ["filesystem.read"] },
  write_file: { action: "files.write", effects: ["filesystem.write"] },
  replace: { action: "files.edit", effects: ["filesystem.write"] },
  glob: { action: "files.search", effects: ["filesystem.read"] },
  grep_search: { action: "files.search", effects: ["filesystem.read"] },
  list_directory: { action: "files.search", effects: ["filesystem.read"] },
  web_fetch: { action: "web.fetch", effects: ["network.egress"] },
  google_web_search: { action: "web.search", effects: ["network.egress"] }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The action name of a tool without a mapping: `provider.tool`, lowercased into an action name. */
const fallback = (tool: string) =>
  `agent.${tool.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "unnamed"}`

/** The policy input a tool call amounts to: its action, effects and arguments (`command`, or `path`). */
export const inputOf = (call: ToolCall, principal: string, now: number): PolicyInput => {
  const mapped = actions[call.tool]
  const input = isRecord(call.input) ? call.input : {}
  const path = typeof input.file_path === "string" ? input.file_path : input.path
  const args: Record<string, unknown> = {
    ...input,
    ...(typeof path === "string" ? { path } : {})
  }
  return {
    action: mapped?.action ?? fallback(call.tool),
    effects: mapped?.effects ?? ["unknown"],
    arguments: args,
    principal,
    now
  }
}

/**
 * A decider over one snapshot: each tool call allowed only where the policy allows it. A call to writ's own MCP server
 * passes the hook: the server runs it through writ's executor, which decides it under the same snapshot and records it.
 */
export const decider = (snapshot: PolicySnapshot, principal: string) => {
  const pinned = PolicyGate.pinned(snapshot)
  return (call: ToolCall): Effect.Effect<CallbackDecision> =>
    Effect.map(Time.nowMicros, (now): CallbackDecision => {
      if (isWritMcpTool(call.tool)) return { decision: "allow" }
      const verdict = PolicyGate.explain(pinned, inputOf(call, principal, now))
      return verdict.disposition === "allow"
        ? { decision: "allow" }
        : { decision: "deny", reason: `${verdict.code}${verdict.detail === undefined ? "" : `: ${verdict.detail}`}` }
    })
}
