/**
 * The codex compiler: a HarnessSpec into the exact argv, `config.toml`, rules file, hook and environment `codex exec`
 * starts with, and the claims its mapping makes for each control (spec/harness.md). Pure: the Node adapter probes,
 * writes the files and spawns. A claim is only a claim: `CapabilityReport.assess` makes it enforced only with a
 * passing verify run for this executable and version.
 */
import { Effect } from "effect"
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

/** The variable codex reads the model's key from (`env_key`); never passed on to the agent's shell. */
export const modelKeyVar = "WRIT_CODEX_MODEL_KEY"

/** The permission profile every plan selects: writ's own, never a built-in one. */
export const profile = "writ"

/** The verify scenarios of each control the mapping claims enforced: what `--verify` makes the real CLI attempt. */
export const scenarios: Partial<Record<ControlName, ReadonlyArray<string>>> = {
  "fs.write_roots@1": ["bash-write-outside-workspace"],
  "fs.read_roots@1": ["bash-read-denied-path", "bash-read-outside-read-roots", "view-image-denied-path"],
  "network.egress@1": ["bash-reach-loopback-listener"],
  "env.allowlist@1": ["bash-read-canary-env", "bash-read-model-key"],
  "callback.pre_tool@1": ["bash-c-denied-command"],
  "callback.integrity@1": ["bash-read-callback-secret"],
  "budget.wall_clock@1": ["bash-outlives-deadline"],
  "route.completeness@1": ["builtin-tool-absent-mcp-runs", "mcp-writ-tool-denied", "apply-patch-denied-by-hook"]
}

/** The namespace codex lists writ's MCP server's tools under (a call names the tool and this namespace). */
export const writNamespace = `mcp__${writMcpName}`

/** The feature flags `tools.writ_only` turns off: each adds a built-in tool (the shell's two, images, goals, apps). */
export const builtinFeatures: ReadonlyArray<string> =
  "shell_tool unified_exec view_image goals image_generation apps plugins browser_use computer_use tool_suggest".split(
    " "
  )

/** What compile needs from the host besides the input: the Node executable that runs the hook, and the hook's program. */
export interface Host {
  readonly node: string
  /**
   * The PreToolUse hook's program (run by `node`), reading the callback's URL and per-run token from `callbackFile`:
   * it must print the blocking deny unless writ answers allow, and never exit 1 (which codex treats as allow).
   */
  readonly hookScript: (callbackFile: string) => string
  /** writ's MCP server as a stdio program (run by `node`) bridging to the run's callback; needed by a spec that serves it. */
  readonly mcpBridge?: (callbackFile: string) => string
}

/** The claims on MCP: writ's server the only one, and (under `tools.writ_only`) the route every call takes. */
const mcpClaims = (spec: HarnessSpec): ReadonlyArray<Claim> => {
  const out: Array<Claim> = []
  if (spec.mcp.length === 0) {
    out.push({
      control: "mcp.grants@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: servesWritMcp(spec)
        ? "[mcp_servers] holds writ's server only, in a fresh CODEX_HOME"
        : "no [mcp_servers] in a fresh CODEX_HOME"
    })
  }
  if (spec.tools.writ_only) {
    const off = `[features] ${builtinFeatures.join(", ")} off, [agents] enabled = false, web_search = "disabled", ` +
      "[mcp_servers] with writ's server only"
    out.push(
      spec.tools.callback
        ? {
          control: "route.completeness@1",
          level: "enforced",
          source: "writ",
          mechanism: `${off}; writ's PreToolUse hook on every tool codex still adds (apply_patch, for a model whose ` +
            "catalog entry declares it): every call reaches writ's executor or writ's hook"
        }
        : {
          control: "route.completeness@1",
          level: "degraded",
          source: "provider-claim",
          mechanism: off,
          note:
            "codex adds apply_patch for a model whose catalog entry declares it (its bundled gpt-5.5 does), and no " +
            "config key turns it off: without tools.callback its patches reach no part of writ"
        }
    )
  }
  return out
}

/** The claims the mapping makes for a spec's controls; a control without one is reported unsupported. */
export const claims = (spec: HarnessSpec): ReadonlyArray<Claim> => {
  const out: Array<Claim> = [
    {
      control: "tools.allowlist@1",
      level: "degraded",
      source: "provider-claim",
      mechanism: "none for built-in tools",
      note: "codex has feature flags, no per-tool list for its built-in tools"
    },
    {
      control: "approval.non_interactive@1",
      level: "enforced",
      source: "provider-claim",
      mechanism: "codex exec, approval_policy=never"
    },
    {
      control: "fs.write_roots@1",
      level: "enforced",
      source: "os",
      mechanism: `permission profile ${profile}: write only on the workspace and write roots (bwrap)`
    },
    {
      control: "fs.read_roots@1",
      level: "enforced",
      source: "os",
      mechanism: spec.filesystem.read_roots.length === 0
        ? `permission profile ${profile}: deny entries (bwrap)`
        : `permission profile ${profile}: :minimal plus the read roots, deny entries (bwrap)`
    },
    spec.network.allow_domains.length === 0
      ? {
        control: "network.egress@1",
        level: "enforced",
        source: "os",
        mechanism: `permission profile ${profile}: network disabled (bwrap, seccomp)`
      }
      : {
        control: "network.egress@1",
        level: "degraded",
        source: "os",
        mechanism: `permission profile ${profile}: network enabled`,
        note: "codex's network switch is all-or-nothing: allowing any domain allows every one"
      },
    {
      control: "subprocess.deny_commands@1",
      level: "degraded",
      source: "provider-claim",
      mechanism: "rules/writ.rules prefix_rule decision=forbidden",
      note: "command-prefix rules are syntactic: bash -c bypasses them"
    },
    {
      control: "env.allowlist@1",
      level: "enforced",
      source: "writ",
      mechanism: "empty environment plus the allowlist; shell_environment_policy include_only"
    },
    {
      control: "budget.wall_clock@1",
      level: "enforced",
      source: "writ",
      mechanism: "SIGTERM, then SIGKILL, to the process group"
    }
  ]
  out.push(...mcpClaims(spec))
  if (spec.tools.callback) {
    out.push({
      control: "callback.pre_tool@1",
      level: "enforced",
      source: "writ",
      mechanism: "PreToolUse hook, the only hook source, run with --dangerously-bypass-hook-trust",
      note: "spawn refuses a non-empty .codex or .agents in or above the workspace, and a system /etc/codex"
    }, {
      control: "callback.integrity@1",
      level: "enforced",
      source: "os",
      mechanism: `the callback token in a path permission profile ${profile} denies`
    })
  }
  return out
}

/**
 * The legacy `yolo` flag as codex's one named profile: `--dangerously-bypass-approvals-and-sandbox`, which runs every
 * command with no sandbox at all, so each control the sandbox or its permission profile held is degraded.
 */
export const yoloProfile: YoloProfile = {
  name: "codex/yolo@1",
  mechanism: "--dangerously-bypass-approvals-and-sandbox",
  degrades: [
    "approval.non_interactive@1",
    "fs.write_roots@1",
    "fs.read_roots@1",
    "network.egress@1",
    "subprocess.deny_commands@1",
    "callback.pre_tool@1",
    "callback.integrity@1"
  ],
  warning: "codex runs every command without its sandbox: nothing holds the shell to the write roots, the read " +
    "roots or the network, and the callback's token is readable"
}

// --- TOML and Starlark: every string through Canonical's JSON literal, whose escapes both languages read ---

class Unquotable {
  constructor(readonly value: string) {}
}

const q = (value: string): string => {
  const quoted = Canonical.quote(value)
  if (quoted === undefined) throw new Unquotable(value)
  return quoted
}

const list = (values: ReadonlyArray<string>) => `[${values.map(q).join(", ")}]`

/** The directory of the native binary's platform package (its helpers and `codex-path`): commands exec from it. */
export const vendorDir = (executable: string) => executable.split("/").slice(0, -2).join("/") || "/"

const filesystemOf = (spec: HarnessSpec, home: string, executable: string): ReadonlyArray<string> => {
  const base = spec.filesystem.read_roots.length === 0
    ? [`${q("/")} = "read"`]
    : [
      `":minimal" = "read"`,
      // codex execs its sandbox helper through links in $CODEX_HOME/tmp to the native binary.
      `${q(`${home}/tmp`)} = "read"`,
      `${q(vendorDir(executable))} = "read"`,
      ...spec.filesystem.read_roots.map((root) => `${q(root)} = "read"`)
    ]
  return [
    ...base,
    ...[spec.workspace, ...spec.filesystem.write_roots].map((root) => `${q(root)} = "write"`),
    ...[...spec.filesystem.deny_read, writDir(home)].map((path) => `${q(path)} = "deny"`)
  ]
}

const configOf = (spec: HarnessSpec, home: string, executable: string, host: Host): string => {
  const shellNames = [
    ...new Set(["PATH", "HOME", ...spec.environment.allow, ...spec.environment.secrets.map((s) => s.name)])
  ].filter((name) => name !== modelKeyVar)
  const lines = [
    `model = ${q(spec.model.name)}`,
    ...(spec.model.endpoint === undefined ? [] : [`model_provider = "writ"`]),
    `approval_policy = "never"`,
    `default_permissions = ${q(profile)}`,
    ...(spec.tools.writ_only ? [`web_search = "disabled"`] : []),
    "",
    ...(spec.model.endpoint === undefined ? [] : [
      "[model_providers.writ]",
      `name = "writ"`,
      `base_url = ${q(spec.model.endpoint.replace(/\/$/, ""))}`,
      ...(spec.model.api_key === undefined ? [] : [`env_key = ${q(modelKeyVar)}`]),
      `wire_api = "responses"`,
      ""
    ]),
    "[shell_environment_policy]",
    `inherit = "all"`,
    `include_only = ${list(shellNames)}`,
    "",
    `[permissions.${profile}.filesystem]`,
    ...filesystemOf(spec, home, executable),
    "",
    `[permissions.${profile}.network]`,
    `enabled = ${spec.network.allow_domains.length > 0}`,
    ""
  ]
  if (spec.tools.writ_only) {
    lines.push(
      "[features]",
      ...builtinFeatures.map((feature) => `${feature} = false`),
      "",
      "[agents]",
      "enabled = false",
      ""
    )
  }
  if (servesWritMcp(spec)) {
    // writ's executor decides each call of its tools: codex need not ask (under approval_policy never it would refuse).
    lines.push(
      `[mcp_servers.${writMcpName}]`,
      `command = ${q(host.node)}`,
      `args = ${list([mcpBridgeFile(home)])}`,
      `default_tools_approval_mode = "approve"`,
      ""
    )
  }
  if (spec.tools.callback) {
    lines.push(
      "[[hooks.PreToolUse]]",
      `matcher = "*"`,
      "",
      "[[hooks.PreToolUse.hooks]]",
      `type = "command"`,
      // codex lets a hook's exit 1 through, and an exit 2 with nothing on stderr too: a failed hook says why, exit 2.
      `command = ${q(`${host.node} ${writDir(home)}/hook.mjs || { echo "writ's hook failed" >&2; exit 2; }`)}`,
      "timeout = 30",
      ""
    )
  }
  return lines.join("\n")
}

const rulesOf = (spec: HarnessSpec) =>
  spec.subprocess.deny_commands.map((command) =>
    `prefix_rule(pattern = ${list(command.split(/\s+/))}, decision = "forbidden")\n`
  ).join("")

const argvOf = (spec: HarnessSpec, prompt: string) => [
  "exec",
  "--json",
  "--skip-git-repo-check",
  "--ephemeral",
  "--color",
  "never",
  ...(spec.tools.callback ? ["--dangerously-bypass-hook-trust"] : []),
  ...(spec.yolo === true ? ["--dangerously-bypass-approvals-and-sandbox"] : []),
  "-m",
  spec.model.name,
  "--",
  prompt
]

const environmentOf = (spec: HarnessSpec, home: string, executable: string): ReadonlyArray<EnvEntry> => {
  const allowed = new Set(spec.environment.allow)
  return [
    new SetVar({ name: "HOME", value: home }),
    new SetVar({ name: "CODEX_HOME", value: home }),
    ...(allowed.has("PATH")
      ? []
      : [new SetVar({ name: "PATH", value: `${vendorDir(executable)}/codex-path:/usr/local/bin:/usr/bin:/bin` })]),
    ...(spec.model.api_key === undefined
      ? []
      : [
        new SecretVar({
          name: spec.model.endpoint === undefined ? "OPENAI_API_KEY" : modelKeyVar,
          ref: spec.model.api_key
        })
      ]),
    ...specEnvironment(spec)
  ]
}

/** Compile a spec into codex's plan and its report; a spec this adapter cannot express fails `compile_failed`. */
export const compile = (input: CompileInput, host: Host): Effect.Effect<Compiled, HarnessError> =>
  Effect.gen(function*() {
    const { home, spec } = input
    const failed = (detail: string) => new HarnessError({ reason: "compile_failed", detail })
    yield* checkInput("codex", input)
    if (spec.tools.writ_only && spec.tools.allow.length > 0) {
      return yield* failed("tools.writ_only turns every built-in tool off: tools.allow must be empty")
    }
    if (servesWritMcp(spec) && host.mcpBridge === undefined) {
      return yield* failed("this host cannot serve writ's MCP server")
    }
    // codex refuses to create its sandbox helpers under /tmp, and every sandboxed command then fails.
    if (home === "/tmp" || home.startsWith("/tmp/")) return yield* failed("CODEX_HOME must not be under /tmp")
    const assessed = yield* assess("codex", input, claims(spec), yoloProfile)
    const executable = assessed.executable.path
    let config: string
    let rules: string
    try {
      config = configOf(spec, home, executable, host)
      rules = rulesOf(spec)
    } catch (error) {
      if (error instanceof Unquotable) return yield* failed("a value has no TOML form (a lone surrogate)")
      throw error
    }
    const files = [
      new ConfigFile({ path: `${home}/config.toml`, content: config }),
      ...(rules === "" ? [] : [new ConfigFile({ path: `${home}/rules/writ.rules`, content: rules })]),
      ...hookFiles(spec, home, host.hookScript),
      ...(host.mcpBridge === undefined ? [] : mcpFiles(spec, home, host.mcpBridge))
    ]
    const plan = planOf(input, assessed, "codex", scenarios, {
      argv: argvOf(spec, input.prompt),
      config_files: files,
      secret_files: callbackFiles(spec, home),
      environment: environmentOf(spec, home, executable)
    })
    return { plan, report: assessed.report }
  })
