/**
 * The gemini-cli compiler: a HarnessSpec into the exact argv, settings file, admin policy, hook and environment the
 * `gemini` CLI (a bundle directory run by Node) starts with, and the claims its mapping makes for each control
 * (spec/harness.md). Pure: the Node adapter probes, writes the files and spawns. A claim is only a claim:
 * `CapabilityReport.assess` makes it enforced only with a passing verify run for this executable and version.
 */
import { Effect, Either } from "effect"
import * as Canonical from "../base/Canonical.ts"
import type { Claim } from "./CapabilityReport.ts"
import type { Compiled, CompileInput } from "./HarnessAdapter.ts"
import { HarnessError } from "./HarnessAdapter.ts"
import type { ControlName } from "./HarnessControl.ts"
import { ConfigFile, SecretVar, SetVar } from "./HarnessPlan.ts"
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

/** gemini's shell tool. */
export const shellTool = "run_shell_command"

/** gemini's tools that reach the network from its own process, outside the tool sandbox. */
export const networkTools: ReadonlyArray<string> = ["web_fetch", "google_web_search"]

/** The verify scenarios of each control the mapping claims enforced: what `--verify` makes the real CLI attempt. */
export const scenarios: Partial<Record<ControlName, ReadonlyArray<string>>> = {
  "fs.write_roots@1": ["shell-write-outside-workspace", "write-file-outside-workspace"],
  "env.allowlist@1": ["shell-read-canary-env", "shell-read-model-key"],
  "callback.pre_tool@1": ["shell-bash-c-denied-command"],
  "callback.integrity@1": ["shell-read-callback-secret", "read-file-callback-secret"],
  "tools.allowlist@1": ["write-file-not-allowed"],
  "network.egress@1": ["shell-reach-loopback-listener"],
  "budget.turns@1": ["turn-beyond-limit"],
  "budget.wall_clock@1": ["shell-outlives-deadline"],
  "route.completeness@1": ["builtin-tool-absent-mcp-runs", "mcp-writ-tool-denied"]
}

/** Every tool of writ's MCP server as gemini names it (`mcp_<server>_<tool>`), a pattern its policy engine matches. */
export const writTools = `mcp_${writMcpName}_*`

/** The admin policy file: rules an agent's settings cannot override. */
export const policyFile = (home: string) => `${writDir(home)}/policy.toml`

/** The tool sandbox's mode file: no network and no per-command overrides in any mode writ runs. */
export const sandboxFile = (home: string) => `${home}/.gemini/policies/sandbox.toml`

/** gemini's user settings file in the config home. */
export const settingsFile = (home: string) => `${home}/.gemini/settings.json`

/** A config home under /tmp, which gemini's tool sandbox replaces with an empty tmpfs: hidden from the shell tool. */
const hiddenFromTools = (home: string) => home.startsWith("/tmp/")

/** What compile needs from the host: the Node that runs the CLI and the hook, and the hook's program. */
export interface Host {
  readonly node: string
  /**
   * The BeforeTool hook's program (run by `node`), reading the callback's URL and per-run token from `callbackFile`:
   * it must print the blocking deny unless writ answers allow, and never exit 1.
   */
  readonly hookScript: (callbackFile: string) => string
  /** writ's MCP server as a stdio program (run by `node`) bridging to the run's callback; needed by a spec that serves it. */
  readonly mcpBridge?: (callbackFile: string) => string
}

/** The claims on MCP: writ's server the only one, and (under `tools.writ_only`) the only route to a tool. */
const mcpClaims = (spec: HarnessSpec): ReadonlyArray<Claim> => {
  const out: Array<Claim> = []
  if (spec.mcp.length === 0) {
    out.push({
      control: "mcp.grants@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: servesWritMcp(spec)
        ? "mcpServers holds writ's server only, in a fresh config home"
        : "no mcpServers in a fresh config home"
    })
  }
  if (spec.tools.writ_only) {
    out.push({
      control: "route.completeness@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: `tools.core [${writTools}] (no built-in tool registered), an admin-policy deny of every tool but ` +
        "writ's server's, mcpServers with writ's server only: every call runs through writ's executor"
    })
  }
  return out
}

/** The claims the mapping makes for a spec's controls; a control without one is reported unsupported. */
export const claims = (spec: HarnessSpec, home: string): ReadonlyArray<Claim> => {
  const extraWrites = spec.filesystem.write_roots.length > 0
  const domains = spec.network.allow_domains.length > 0
  const out: Array<Claim> = [
    {
      control: "tools.allowlist@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "tools.core, tools.exclude, admin-policy allow rules only for allowed tools"
    },
    {
      control: "env.allowlist@1",
      level: "enforced",
      source: "writ",
      mechanism: "empty environment plus the allowlist; the model key hidden from the shell by " +
        "security.environmentVariableRedaction",
      note: "gemini hands its own environment to the shell: the key's removal rests on gemini's name heuristic"
    },
    {
      control: "budget.wall_clock@1",
      level: "enforced",
      source: "writ",
      mechanism: "SIGTERM, then SIGKILL, to the process group (gemini relaunches itself as a child)"
    },
    {
      control: "subprocess.deny_commands@1",
      level: "degraded",
      source: "provider-claim",
      mechanism: "--admin-policy run_shell_command commandPrefix deny rules",
      note: "command-prefix rules are syntactic"
    },
    {
      control: "budget.turns@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "model.maxSessionTurns (exit 53)"
    },
    {
      control: "approval.non_interactive@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "headless -p with --approval-mode default: a call that would ask is refused"
    },
    {
      control: "fs.write_roots@1",
      level: extraWrites ? "degraded" : "enforced",
      source: "os",
      mechanism: "security.toolSandboxing (bwrap: / read-only, the workspace writable); write_file confined to the " +
        "workspace",
      ...(extraWrites ? { note: "write roots beyond the workspace are not expressible: they stay read-only" } : {})
    },
    {
      control: "fs.read_roots@1",
      level: "degraded",
      source: "os",
      mechanism: "security.toolSandboxing binds / read-only and hides /tmp",
      note: "read roots and deny_read are not expressible: the shell reads every path outside /tmp"
    },
    {
      control: "network.egress@1",
      level: domains ? "degraded" : "enforced",
      source: "os",
      mechanism: "policies/sandbox.toml modes without network (bwrap --unshare-all), web_fetch and google_web_search " +
        "excluded",
      ...(domains ? { note: "per-domain allow is not expressible: the network stays off" } : {})
    }
  ]
  out.push(...mcpClaims(spec))
  if (spec.tools.callback) {
    out.push({
      control: "callback.pre_tool@1",
      level: "enforced",
      source: "writ",
      mechanism: "hooks.BeforeTool",
      note: "gemini runs the tool when it times a hook out (30 s): writ's hook denies at its own 10 s deadline first"
    })
    out.push({
      control: "callback.integrity@1",
      level: hiddenFromTools(home) ? "enforced" : "degraded",
      source: "os",
      mechanism:
        "the callback token in a config home under /tmp, which the tool sandbox hides; read_file confined to " +
        "the workspace",
      ...(hiddenFromTools(home) ? {} : { note: "the config home is not under /tmp: the shell can read the token" })
    })
  }
  return out
}

/** The tools the agent may use: the allowlist, less the denied ones and (without network) the network tools. */
const allowedTools = (spec: HarnessSpec) => spec.tools.allow.filter((tool) => !excludedTools(spec).includes(tool))

const excludedTools = (spec: HarnessSpec) => [...new Set([...spec.tools.deny, ...networkTools])]

/** A TOML basic string: JSON's escapes are TOML's. */
const tomlString = (value: string) => Canonical.stringify(value)

/**
 * The admin policy: allow each allowed tool (the shell with redirection, else a redirecting command asks and is
 * refused), deny each denied command by prefix above every allow, and deny the excluded tools outright.
 */
export const policyOf = (spec: HarnessSpec): Either.Either<string, Canonical.CanonicalJsonError> =>
  Either.gen(function*() {
    const rules: Array<string> = []
    if (spec.tools.writ_only) {
      // Above every rule below: writ's server's tools run (writ's executor decides each), and nothing else does.
      rules.push(
        `[[rule]]\nmcpName = ${yield* tomlString(writMcpName)}\ntoolName = "*"\ndecision = "allow"\npriority = 990\n`,
        `[[rule]]\ntoolName = "*"\ndecision = "deny"\npriority = 980\n`
      )
    }
    for (const tool of allowedTools(spec)) {
      rules.push(
        `[[rule]]\ntoolName = ${yield* tomlString(tool)}\ndecision = "allow"\npriority = 100\n` +
          (tool === shellTool ? "allowRedirection = true\n" : "")
      )
    }
    for (const command of spec.subprocess.deny_commands) {
      rules.push(
        `[[rule]]\ntoolName = ${yield* tomlString(shellTool)}\ncommandPrefix = ${yield* tomlString(
          command
        )}\ndecision = "deny"\npriority = 900\n`
      )
    }
    for (const tool of excludedTools(spec)) {
      rules.push(`[[rule]]\ntoolName = ${yield* tomlString(tool)}\ndecision = "deny"\npriority = 900\n`)
    }
    return rules.join("\n")
  })

/**
 * The tool sandbox's modes, written whole rather than left to the shipped default: no network, no approved tools, no
 * persistent per-command grants (`tools.sandboxNetworkAccess` applies only to the container sandbox, not this one).
 * Overrides stay allowed: write_file asks the sandbox for the one file it writes, and is refused without them.
 */
export const sandboxModes = [
  ["plan", true],
  ["default", false],
  ["accepting_edits", false]
].map(([mode, readonly]) =>
  `[modes.${mode}]\nnetwork = false\nreadonly = ${readonly}\napprovedTools = []\nallowOverrides = true\n`
).join("\n") + "\n[commands]\n"

const settingsOf = (spec: HarnessSpec, home: string, host: Host) => {
  // The hook's own deadline (10 s) falls well before gemini's, so a slow writ is a deny the hook prints itself.
  const hook = {
    matcher: "*",
    hooks: [{ type: "command", command: `${host.node} ${writDir(home)}/hook.mjs || exit 2`, timeout: 30_000 }]
  }
  return {
    security: {
      auth: { selectedType: "gemini-api-key" },
      toolSandboxing: true,
      environmentVariableRedaction: { enabled: true }
    },
    tools: {
      // A core list naming no built-in registers none; writ's server's tools are allowed by the same list.
      ...(spec.tools.writ_only
        ? { core: [writTools] }
        : spec.tools.allow.length > 0
        ? { core: allowedTools(spec) }
        : {}),
      exclude: excludedTools(spec)
    },
    privacy: { usageStatisticsEnabled: false },
    mcpServers: servesWritMcp(spec) ? { [writMcpName]: { command: host.node, args: [mcpBridgeFile(home)] } } : {},
    ...(spec.budget.max_turns === undefined ? {} : { model: { maxSessionTurns: spec.budget.max_turns } }),
    ...(spec.tools.callback ? { hooks: { BeforeTool: [hook] } } : {})
  }
}

const argvOf = (spec: HarnessSpec, prompt: string, home: string) => [
  "-p",
  prompt,
  "--output-format",
  "stream-json",
  "--model",
  spec.model.name,
  "--approval-mode",
  spec.yolo === true ? "yolo" : "default",
  "--admin-policy",
  policyFile(home)
]

const environmentOf = (spec: HarnessSpec, home: string): ReadonlyArray<EnvEntry> => {
  const allowed = new Set(spec.environment.allow)
  return [
    new SetVar({ name: "HOME", value: home }),
    ...(allowed.has("PATH") ? [] : [new SetVar({ name: "PATH", value: "/usr/local/bin:/usr/bin:/bin" })]),
    new SetVar({ name: "GEMINI_CLI_TRUST_WORKSPACE", value: "true" }),
    // One Node process instead of a relaunched child: half the start-up; the deadline still signals the whole group.
    new SetVar({ name: "GEMINI_CLI_NO_RELAUNCH", value: "true" }),
    ...(spec.model.endpoint === undefined
      ? []
      : [new SetVar({ name: "GOOGLE_GEMINI_BASE_URL", value: spec.model.endpoint.replace(/\/$/, "") })]),
    ...(spec.model.api_key === undefined ? [] : [new SecretVar({ name: "GEMINI_API_KEY", ref: spec.model.api_key })]),
    ...specEnvironment(spec)
  ]
}

/**
 * The legacy `yolo` flag as gemini's one named profile: `--approval-mode yolo`, which approves every call and gives
 * the tool sandbox the network whatever its mode file says (the admin policy's deny rules still hold).
 */
export const yoloProfile: YoloProfile = {
  name: "gemini-cli/yolo@1",
  mechanism: "--approval-mode yolo",
  degrades: [
    "approval.non_interactive@1",
    "tools.allowlist@1",
    "network.egress@1",
    "fs.write_roots@1",
    "callback.pre_tool@1",
    "callback.integrity@1"
  ],
  warning: "yolo approves every tool call and forces the tool sandbox's network on: network.egress is not " +
    "enforced, and nothing else was verified in this mode"
}

/** Compile a spec into gemini's plan and its report; a spec this adapter cannot express fails `compile_failed`. */
export const compile = (input: CompileInput, host: Host): Effect.Effect<Compiled, HarnessError> =>
  Effect.gen(function*() {
    const { home, spec } = input
    yield* checkInput("gemini-cli", input)
    if (spec.tools.writ_only && spec.tools.allow.length > 0) {
      return yield* new HarnessError({
        reason: "compile_failed",
        detail: "tools.writ_only turns every built-in tool off: tools.allow must be empty"
      })
    }
    if (servesWritMcp(spec) && host.mcpBridge === undefined) {
      return yield* new HarnessError({ reason: "compile_failed", detail: "this host cannot serve writ's MCP server" })
    }
    const assessed = yield* assess("gemini-cli", input, claims(spec, home), yoloProfile)
    const settings = Canonical.stringify(settingsOf(spec, home, host))
    const policy = policyOf(spec)
    if (Either.isLeft(settings) || Either.isLeft(policy)) {
      return yield* new HarnessError({ reason: "compile_failed", detail: "the settings or policy have no JSON form" })
    }
    const files = [
      new ConfigFile({ path: settingsFile(home), content: settings.right }),
      new ConfigFile({ path: policyFile(home), content: policy.right }),
      new ConfigFile({ path: sandboxFile(home), content: sandboxModes }),
      ...hookFiles(spec, home, host.hookScript),
      ...(host.mcpBridge === undefined ? [] : mcpFiles(spec, home, host.mcpBridge))
    ]
    const plan = planOf(input, assessed, "gemini-cli", scenarios, {
      argv: argvOf(spec, input.prompt, home),
      config_files: files,
      secret_files: callbackFiles(spec, home),
      environment: environmentOf(spec, home)
    })
    return { plan, report: assessed.report }
  })
