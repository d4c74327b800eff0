/**
 * The provider-neutral spec of one native agent run: what the agent may touch, through which tools, for how long,
 * and which controls must hold. Secrets appear only as references, resolved at spawn.
 */
import { Either, Schema } from "effect"
import { Identifier } from "../base/Refs.ts"
import { validationError } from "../policy/PermissionPolicy.ts"
import { ControlName, Provider } from "./HarnessControl.ts"

/** An absolute, normalised path: no `.` or `..` segment, no trailing slash (but `/`). */
export const AbsolutePath = Schema.String.pipe(
  Schema.pattern(/^\/(?:[^/\0]+(?:\/[^/\0]+)*)?$/, { message: () => "an absolute path" }),
  Schema.filter((path) => !path.split("/").some((s) => s === "." || s === "..") || "a path without . or .. segments")
)

/** A reference to a secret, resolved at spawn and never written into a plan: `env:NAME` or `file:/path`. */
export const SecretRef = Schema.String.pipe(
  Schema.pattern(/^(?:env:[A-Za-z_][A-Za-z0-9_]*|file:\/[^\0]+|writ:[a-z][a-z0-9_.-]*)$/, {
    message: () => "a secret reference: env:NAME, file:/path or writ:name"
  })
)

/** An environment variable's name. */
export const EnvName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: () => "an environment variable name" })
)

/** A tool's name as the provider spells it (`Bash`, `Read`, `mcp__server__tool`). */
export const ToolName = Schema.String.pipe(Schema.pattern(/^[A-Za-z_][A-Za-z0-9_-]*$/), Schema.maxLength(128))

const none = { default: () => [] as const }

/** The model and its endpoint; the key only as a reference. */
export const ModelSection = Schema.Struct({
  name: Identifier,
  endpoint: Schema.optional(Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/))),
  api_key: Schema.optional(SecretRef)
})

/**
 * Tools the agent may and may not use, and how writ sees each call: `callback` delegates each to writ before it runs
 * (the provider's pre-tool hook), `permission_prompt` has writ's MCP server answer the provider's permission prompts
 * (Claude's `--permission-prompt-tool`), and `writ_only` turns the provider's built-in tools off so that every tool is
 * one of writ's MCP server, run through the executor (`route.completeness@1`).
 */
export const ToolsSection = Schema.Struct({
  allow: Schema.optionalWith(Schema.Array(ToolName), none),
  deny: Schema.optionalWith(Schema.Array(ToolName), none),
  callback: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  permission_prompt: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  writ_only: Schema.optionalWith(Schema.Boolean, { default: () => false })
})

/** Where the agent may read and write besides the workspace. */
export const FilesystemSection = Schema.Struct({
  read_roots: Schema.optionalWith(Schema.Array(AbsolutePath), none),
  write_roots: Schema.optionalWith(Schema.Array(AbsolutePath), none),
  deny_read: Schema.optionalWith(Schema.Array(AbsolutePath), none)
})

/** The domains the agent's tools may reach; none by default. */
export const NetworkSection = Schema.Struct({
  allow_domains: Schema.optionalWith(Schema.Array(Schema.String.pipe(Schema.pattern(/^[a-z0-9*.-]+$/))), none)
})

/** Commands the agent's shell must not run. */
export const SubprocessSection = Schema.Struct({
  deny_commands: Schema.optionalWith(Schema.Array(Schema.NonEmptyTrimmedString), none)
})

/** One MCP server the agent may use, and which of its tools. */
export const McpGrant = Schema.Struct({
  server: Identifier,
  tools: Schema.Array(Identifier)
})

/** The environment the CLI starts with: empty, plus these names from the harness's own, plus these secrets. */
export const EnvironmentSection = Schema.Struct({
  allow: Schema.optionalWith(Schema.Array(EnvName), none),
  secrets: Schema.optionalWith(Schema.Array(Schema.Struct({ name: EnvName, ref: SecretRef })), none)
})

/** What one run may spend. */
export const BudgetSection = Schema.Struct({
  wall_clock_seconds: Schema.optionalWith(Schema.Int.pipe(Schema.between(1, 86_400)), { default: () => 600 }),
  max_turns: Schema.optional(Schema.Int.pipe(Schema.between(1, 10_000))),
  max_cost_microusd: Schema.optional(Schema.NonNegativeInt)
})

/** The policy snapshot the spec narrows. */
export const PolicyReference = Schema.Struct({ policy_id: Identifier, version: Identifier })

/** The provider-neutral spec of one native agent run. */
export const HarnessSpec = Schema.Struct({
  spec_version: Schema.Literal(1),
  provider: Provider,
  model: ModelSection,
  policy: Schema.optional(PolicyReference),
  workspace: AbsolutePath,
  approval: Schema.optionalWith(Schema.Literal("never_prompt", "provider_default"), { default: () => "never_prompt" }),
  tools: Schema.optionalWith(ToolsSection, {
    default: () => ({ allow: [], deny: [], callback: false, permission_prompt: false, writ_only: false })
  }),
  filesystem: Schema.optionalWith(FilesystemSection, {
    default: () => ({ read_roots: [], write_roots: [], deny_read: [] })
  }),
  network: Schema.optionalWith(NetworkSection, { default: () => ({ allow_domains: [] }) }),
  subprocess: Schema.optionalWith(SubprocessSection, { default: () => ({ deny_commands: [] }) }),
  mcp: Schema.optionalWith(Schema.Array(McpGrant), none),
  environment: Schema.optionalWith(EnvironmentSection, { default: () => ({ allow: [], secrets: [] }) }),
  budget: Schema.optionalWith(BudgetSection, { default: () => ({ wall_clock_seconds: 600 }) }),
  required: Schema.optionalWith(Schema.Array(ControlName), none),
  /** The legacy flag: the provider's own yolo profile, every control it touches degraded, never a portable claim. */
  yolo: Schema.optional(Schema.Boolean)
})

/** The provider-neutral spec of one native agent run. */
export type HarnessSpec = typeof HarnessSpec.Type

/** A spec's wire form (what YAML and JSON hold). */
export type HarnessSpecEncoded = typeof HarnessSpec.Encoded

/** A spec that cannot stand, with the path of the offending field. */
export class HarnessSpecError extends Schema.TaggedError<HarnessSpecError>()("HarnessSpecError", {
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

const decodeEither = Schema.decodeUnknownEither(HarnessSpec, { onExcessProperty: "error", errors: "first" })

/** Validate a parsed mapping into a spec; the error names the first offending field. */
export const decode = (input: unknown): Either.Either<HarnessSpec, HarnessSpecError> =>
  Either.mapLeft(decodeEither(input), (error) => {
    const { detail, path } = validationError(error)
    return new HarnessSpecError({ path, detail })
  })

/** A spec's wire form, every default explicit. */
export const encode: (spec: HarnessSpec) => HarnessSpecEncoded = Schema.encodeSync(HarnessSpec)

/** The controls a spec requests, each once, in the list's order: every section's, plus any it requires. */
export const requestedControls = (spec: HarnessSpec): ReadonlyArray<ControlName> => {
  const wanted = new Set<ControlName>([
    "tools.allowlist@1",
    "approval.non_interactive@1",
    "fs.write_roots@1",
    "network.egress@1",
    "env.allowlist@1",
    "mcp.grants@1",
    "budget.wall_clock@1",
    ...spec.required
  ])
  if (spec.tools.callback || spec.tools.permission_prompt) wanted.add("callback.pre_tool@1").add("callback.integrity@1")
  if (spec.tools.writ_only) wanted.add("route.completeness@1")
  if (spec.filesystem.read_roots.length > 0 || spec.filesystem.deny_read.length > 0) wanted.add("fs.read_roots@1")
  if (spec.subprocess.deny_commands.length > 0) wanted.add("subprocess.deny_commands@1")
  if (spec.budget.max_turns !== undefined) wanted.add("budget.turns@1")
  if (spec.budget.max_cost_microusd !== undefined) wanted.add("budget.cost@1")
  return ControlName.literals.filter((name) => wanted.has(name))
}

/** The MCP server name writ's own server has in every provider's configuration. */
export const writMcpName = "writ"

/** Whether a tool is one of writ's own MCP server's, as claude and codex (`mcp__writ__`) or gemini (`mcp_writ_`) name it. */
export const isWritMcpTool = (tool: string): boolean =>
  tool.startsWith(`mcp__${writMcpName}__`) || tool.startsWith(`mcp_${writMcpName}_`)

/** Whether a run serves writ's MCP server to the CLI: for its permission prompts, or as the only route to a tool. */
export const servesWritMcp = (spec: HarnessSpec): boolean => spec.tools.permission_prompt || spec.tools.writ_only

/** Whether a run serves the callback (its URL and token in the hidden callback file): for the hook or writ's MCP server. */
export const servesCallback = (spec: HarnessSpec): boolean => spec.tools.callback || servesWritMcp(spec)
