/**
 * The claude-code compiler: a HarnessSpec into the exact argv, settings file, hook and environment the `claude` CLI
 * starts with, and the claims its mapping makes for each control (spec/harness.md). Pure: the Node adapter probes,
 * writes the files and spawns. A claim is only a claim: `CapabilityReport.assess` makes it enforced only with a
 * passing verify run for this executable and version.
 */
import { Effect, Either } from "effect"
import * as Canonical from "../base/Canonical.ts"
import type { Claim } from "./CapabilityReport.ts"
import type { Compiled, CompileInput } from "./HarnessAdapter.ts"
import { HarnessError } from "./HarnessAdapter.ts"
import type { ControlName } from "./HarnessControl.ts"
import { ConfigFile, SecretFile, SetVar } from "./HarnessPlan.ts"
import type { EnvEntry } from "./HarnessPlan.ts"
import type { HarnessSpec } from "./HarnessSpec.ts"
import { servesWritMcp } from "./HarnessSpec.ts"
import {
  assess,
  callbackFile,
  callbackFiles,
  callbackRef,
  checkInput,
  hookFiles,
  mcpBridgeFile,
  mcpFiles,
  planOf,
  specEnvironment,
  writDir,
  writMcpName
} from "./internal/compilePlan.ts"
import type { YoloProfile } from "./YoloProfile.ts"

export { callbackFile, callbackRef, writDir }

/** The verify scenarios of each control the mapping claims enforced: what `--verify` makes the real CLI attempt. */
export const scenarios: Partial<Record<ControlName, ReadonlyArray<string>>> = {
  "fs.write_roots@1": ["bash-write-outside-workspace", "write-tool-outside-workspace"],
  "env.allowlist@1": ["bash-read-canary-env", "bash-read-model-key"],
  "callback.pre_tool@1": ["bash-c-denied-command", "subagent-denied-command", "permission-prompt-denied-command"],
  "callback.integrity@1": ["bash-read-callback-secret", "read-tool-callback-secret"],
  "tools.allowlist@1": ["write-tool-not-allowed"],
  "network.egress@1": ["bash-reach-loopback-listener"],
  "fs.read_roots@1": ["bash-read-denied-path", "read-tool-denied-path"],
  "budget.wall_clock@1": ["bash-outlives-deadline"],
  "route.completeness@1": ["builtin-tool-absent-mcp-runs", "mcp-writ-tool-denied"],
  "mcp.grants@1": ["project-mcp-server-ignored"]
}

/** The tool of writ's MCP server that answers claude's permission prompts, and its name as claude calls it. */
export const permissionTool = "permission_prompt"

/** `--permission-prompt-tool`'s value: writ's permission tool on writ's MCP server. */
export const permissionPromptTool = `mcp__${writMcpName}__${permissionTool}`

/** The file claude's `apiKeyHelper` reads the model's key from: hidden from the agent's tools like the callback's. */
export const modelKeyFile = (home: string) => `${writDir(home)}/model-key`

/** What compile needs from the host besides the input: the Node executable that runs the hook, and the hook's program. */
export interface Host {
  readonly node: string
  /**
   * The PreToolUse hook's program (run by `node`), reading the callback's URL and per-run token from `callbackFile`:
   * it must print the blocking deny unless writ answers allow, and never exit 1 (which claude treats as allow).
   */
  readonly hookScript: (callbackFile: string) => string
  /** writ's MCP server as a stdio program (run by `node`) bridging to the run's callback; needed by a spec that serves it. */
  readonly mcpBridge?: (callbackFile: string) => string
}

/** The claims the mapping makes for a spec's controls; a control without one is reported unsupported. */
export const claims = (spec: HarnessSpec): ReadonlyArray<Claim> => {
  const out: Array<Claim> = [
    {
      control: "tools.allowlist@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "--tools, permissions.allow/deny under dontAsk"
    },
    {
      control: "env.allowlist@1",
      level: "enforced",
      source: "writ",
      mechanism: "empty environment plus the allowlist"
    },
    {
      control: "budget.wall_clock@1",
      level: "enforced",
      source: "writ",
      mechanism: "SIGTERM, then SIGKILL, to the process group"
    },
    {
      control: "subprocess.deny_commands@1",
      level: "degraded",
      source: "provider-claim",
      mechanism: "Bash(cmd *) deny rules",
      note: "command-prefix rules are syntactic"
    },
    {
      control: "budget.turns@1",
      level: "degraded",
      source: "provider-claim",
      mechanism: "--max-turns",
      note: "the turn that exceeds it has already run its tool call"
    },
    { control: "budget.cost@1", level: "degraded", source: "provider-claim", mechanism: "--max-budget-usd" }
  ]
  // Only `never_prompt` compiles to dontAsk; the provider's default mode is no claim at all.
  if (spec.approval === "never_prompt") {
    out.push({
      control: "approval.non_interactive@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: spec.tools.permission_prompt ? "every permission prompt answered by writ's MCP tool" : "dontAsk"
    })
  }
  if (spec.mcp.length === 0) {
    out.push({
      control: "mcp.grants@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: servesWritMcp(spec)
        ? "--strict-mcp-config with writ's MCP server only"
        : "--strict-mcp-config with no server"
    })
  }
  if (spec.tools.writ_only) {
    out.push({
      control: "route.completeness@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "--tools \"\" (no built-in tool), --strict-mcp-config with writ's MCP server only: every call runs " +
        "through writ's executor"
    })
  }
  out.push(
    { control: "fs.write_roots@1", level: "enforced", source: "os", mechanism: "sandbox.filesystem.allowWrite" },
    { control: "network.egress@1", level: "enforced", source: "os", mechanism: "sandbox.network.allowedDomains" },
    {
      control: "fs.read_roots@1",
      level: spec.filesystem.read_roots.length === 0 ? "enforced" : "degraded",
      source: "os",
      mechanism: "sandbox.filesystem.denyRead, Read/Edit deny rules",
      ...(spec.filesystem.read_roots.length === 0 ? {} : { note: "read roots: only deny_read is expressible" })
    }
  )
  if (spec.tools.callback || spec.tools.permission_prompt) {
    const routes = [
      ...(spec.tools.callback ? ["PreToolUse hook"] : []),
      ...(spec.tools.permission_prompt ? [`--permission-prompt-tool ${permissionPromptTool}`] : [])
    ]
    out.push({ control: "callback.pre_tool@1", level: "enforced", source: "writ", mechanism: routes.join(", ") })
    out.push({
      control: "callback.integrity@1",
      level: "enforced",
      source: "os",
      mechanism: "the callback token in a file the sandbox denies to tools"
    })
  }
  return out
}

/**
 * The legacy `yolo` flag as claude's one named profile: `bypassPermissions` (with `IS_SANDBOX=1`, without which claude
 * refuses it as root). Every permission rule stops holding, so each control resting on them, or verified only under
 * `dontAsk`, is degraded.
 */
export const yoloProfile: YoloProfile = {
  name: "claude-code/yolo@1",
  mechanism: "--permission-mode bypassPermissions, IS_SANDBOX=1",
  degrades: [
    "approval.non_interactive@1",
    "tools.allowlist@1",
    "fs.write_roots@1",
    "fs.read_roots@1",
    "subprocess.deny_commands@1",
    "callback.pre_tool@1",
    "callback.integrity@1",
    "mcp.grants@1"
  ],
  warning: "bypassPermissions approves every tool call past claude's permission rules: the file tools are no longer " +
    "held to the write roots, and nothing the rules or the hook enforce was verified in this mode"
}

/** claude's file-editing tools: not under the OS sandbox, so their allow rules are scoped to the write roots. */
const editors = new Set(["Write", "Edit", "MultiEdit", "NotebookEdit"])

/** claude's path rules: `//abs/path/**` is an absolute path. */
const under = (tool: string, root: string) => `${tool}(/${root === "/" ? "" : root}/**)`

/**
 * The permission rules: an editing tool allowed only under the write roots (its own rule, as the sandbox covers only
 * the shell), and reads of the deny-read paths and of writ's own directory denied to the file tools.
 */
const permissionsOf = (spec: HarnessSpec, home: string) => {
  const roots = [spec.workspace, ...spec.filesystem.write_roots]
  // Under the permission prompt no built-in tool is allowed by a rule: each call asks, and writ answers.
  const allow = [
    ...(spec.tools.permission_prompt ? [] : spec.tools.allow).flatMap((
      tool
    ) => (editors.has(tool) ? roots.map((root) => under("Edit", root)) : [tool])),
    // writ's own tools run through its executor, which decides each: claude need not ask about them too.
    ...(servesWritMcp(spec) ? [`mcp__${writMcpName}`] : [])
  ]
  const hidden = [...spec.filesystem.deny_read, writDir(home)]
  return {
    allow: [...new Set(allow)],
    deny: [
      ...spec.tools.deny,
      ...spec.subprocess.deny_commands.map((command) => `Bash(${command} *)`),
      ...hidden.flatMap((path) => [under("Read", path), under("Edit", path)])
    ],
    defaultMode: permissionMode(spec)
  }
}

/** yolo bypasses every rule; dontAsk refuses whatever would ask; under the permission prompt writ's tool is asked instead. */
const permissionMode = (spec: HarnessSpec) =>
  spec.yolo === true
    ? "bypassPermissions"
    : spec.approval === "never_prompt" && !spec.tools.permission_prompt
    ? "dontAsk"
    : "default"

const settingsOf = (spec: HarnessSpec, home: string, host: Host) => {
  const hook = {
    matcher: "*",
    hooks: [{ type: "command", command: `${host.node} ${writDir(home)}/hook.mjs || exit 2`, timeout: 30 }]
  }
  const sandbox = {
    enabled: true,
    failIfUnavailable: true,
    allowUnsandboxedCommands: false,
    // A sandboxed command would otherwise run without asking, so writ's permission tool would never see it.
    ...(spec.tools.permission_prompt ? { autoAllowBashIfSandboxed: false } : {}),
    filesystem: {
      allowWrite: [spec.workspace, ...spec.filesystem.write_roots],
      denyRead: [...spec.filesystem.deny_read, writDir(home)]
    },
    network: { allowedDomains: [...spec.network.allow_domains] }
  }
  return {
    permissions: permissionsOf(spec, home),
    sandbox,
    // The model's key reaches claude through a helper reading a hidden file, never its environment, which its tools inherit.
    ...(spec.model.api_key === undefined ? {} : { apiKeyHelper: `/bin/cat ${modelKeyFile(home)}` }),
    ...(spec.tools.callback ? { hooks: { PreToolUse: [hook] } } : {})
  }
}

/** The MCP configuration: writ's server (its bridge run by `node`) when the spec serves it, else none. */
const mcpConfigOf = (spec: HarnessSpec, home: string, host: Host) =>
  Canonical.stringify({
    mcpServers: servesWritMcp(spec) ? { [writMcpName]: { command: host.node, args: [mcpBridgeFile(home)] } } : {}
  })

const argvOf = (spec: HarnessSpec, prompt: string, mcpConfig: string) => [
  "-p",
  prompt,
  "--output-format",
  "stream-json",
  "--verbose",
  "--model",
  spec.model.name,
  "--permission-mode",
  permissionMode(spec),
  "--strict-mcp-config",
  "--mcp-config",
  mcpConfig,
  ...(spec.tools.writ_only
    ? ["--tools", ""]
    : spec.tools.allow.length > 0
    ? ["--tools", spec.tools.allow.join(",")]
    : []),
  ...(spec.tools.permission_prompt ? ["--permission-prompt-tool", permissionPromptTool] : []),
  ...(spec.budget.max_turns === undefined ? [] : ["--max-turns", String(spec.budget.max_turns)]),
  ...(spec.budget.max_cost_microusd === undefined
    ? []
    : ["--max-budget-usd", (spec.budget.max_cost_microusd / 1_000_000).toFixed(6)])
]

const environmentOf = (spec: HarnessSpec, home: string): ReadonlyArray<EnvEntry> => {
  const allowed = new Set(spec.environment.allow)
  return [
    new SetVar({ name: "HOME", value: home }),
    ...(allowed.has("PATH") ? [] : [new SetVar({ name: "PATH", value: "/usr/local/bin:/usr/bin:/bin" })]),
    new SetVar({ name: "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", value: "1" }),
    new SetVar({ name: "DISABLE_AUTOUPDATER", value: "1" }),
    ...(spec.yolo === true ? [new SetVar({ name: "IS_SANDBOX", value: "1" })] : []),
    ...(spec.model.endpoint === undefined
      ? []
      : [new SetVar({ name: "ANTHROPIC_BASE_URL", value: spec.model.endpoint.replace(/\/$/, "") })]),
    ...specEnvironment(spec)
  ]
}

/** Compile a spec into claude's plan and its report; a spec this adapter cannot express fails `compile_failed`. */
export const compile = (input: CompileInput, host: Host): Effect.Effect<Compiled, HarnessError> =>
  Effect.gen(function*() {
    const { home, spec } = input
    yield* checkInput("claude-code", input)
    if (spec.tools.writ_only && spec.tools.allow.length > 0) {
      return yield* new HarnessError({
        reason: "compile_failed",
        detail: "tools.writ_only turns every built-in tool off: tools.allow must be empty"
      })
    }
    if (servesWritMcp(spec) && host.mcpBridge === undefined) {
      return yield* new HarnessError({ reason: "compile_failed", detail: "this host cannot serve writ's MCP server" })
    }
    const mcpConfig = mcpConfigOf(spec, home, host)
    if (Either.isLeft(mcpConfig)) {
      return yield* new HarnessError({ reason: "compile_failed", detail: `the MCP config: ${mcpConfig.left.message}` })
    }
    const assessed = yield* assess("claude-code", input, claims(spec), yoloProfile)
    const settings = Canonical.stringify(settingsOf(spec, home, host))
    if (Either.isLeft(settings)) {
      return yield* new HarnessError({ reason: "compile_failed", detail: `the settings: ${settings.left.message}` })
    }
    const files = [
      new ConfigFile({ path: `${home}/.claude/settings.json`, content: settings.right }),
      ...hookFiles(spec, home, host.hookScript),
      ...(host.mcpBridge === undefined ? [] : mcpFiles(spec, home, host.mcpBridge))
    ]
    const plan = planOf(input, assessed, "claude-code", scenarios, {
      argv: argvOf(spec, input.prompt, mcpConfig.right),
      config_files: files,
      secret_files: [
        ...(spec.model.api_key === undefined
          ? []
          : [new SecretFile({ path: modelKeyFile(home), ref: spec.model.api_key })]),
        ...callbackFiles(spec, home)
      ],
      environment: environmentOf(spec, home)
    })
    return { plan, report: assessed.report }
  })
