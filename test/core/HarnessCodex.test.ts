import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as Codex from "../../core/harness/Codex.ts"
import * as CodexStream from "../../core/harness/CodexStream.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import type * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import type * as Observation from "../../core/harness/ProviderObservation.ts"

const binary = "/opt/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

const spec = (input: Record<string, unknown> = {}) =>
  Either.getOrThrow(HarnessSpec.decode({
    spec_version: 1,
    provider: "codex",
    model: { name: "scripted", endpoint: "http://127.0.0.1:9/v1/", api_key: "env:SCRIPTED_KEY" },
    workspace: "/srv/ws",
    tools: { callback: true },
    environment: { allow: ["LANG"], secrets: [{ name: "GH_TOKEN", ref: "file:/run/gh" }] },
    ...input
  }))

const identity = new Report.ExecutableIdentity({ path: binary, digest: "c".repeat(64) as never })
const probe = (version: string | null = "0.169.0") =>
  new HarnessAdapter.ProbeResult({ provider: "codex", executable: identity, version, notes: [] })

const compile = (s = spec(), home = "/srv/home", verifications: ReadonlyArray<Report.VerifyRun> = []) =>
  Codex.compile({ spec: s, probe: probe(), prompt: "go", home, verifications }, {
    node: "/usr/bin/node",
    hookScript: (file) => `the host's hook, reading ${file}`
  })

const file = (plan: HarnessPlan.HarnessPlan, suffix: string) => plan.config_files.find((f) => f.path.endsWith(suffix))

describe("Codex.compile", () => {
  it.effect("config.toml: writ's permission profile, the provider on loopback, the shell's allowlist, one hook", () =>
    Effect.gen(function*() {
      const { plan } = yield* compile()
      const config = file(plan, "/config.toml")!.content
      assert.strictEqual(file(plan, "/config.toml")!.path, "/srv/home/config.toml")
      assert.include(config, "default_permissions = \"writ\"")
      assert.include(config, "approval_policy = \"never\"")
      assert.include(config, "base_url = \"http://127.0.0.1:9/v1\"")
      assert.include(config, `env_key = "${Codex.modelKeyVar}"`)
      assert.include(config, "wire_api = \"responses\"")
      assert.include(config, "[permissions.writ.filesystem]\n\"/\" = \"read\"\n\"/srv/ws\" = \"write\"\n")
      assert.include(config, "\"/srv/home/.writ\" = \"deny\"")
      assert.include(config, "[permissions.writ.network]\nenabled = false")
      assert.include(config, "include_only = [\"PATH\", \"HOME\", \"LANG\", \"GH_TOKEN\"]")
      assert.notInclude(config.split("include_only")[1]!.split("\n")[0]!, Codex.modelKeyVar)
      // writ's hook is the only one configured, and a crashed hook exits 2, which blocks (exit 1 would allow).
      assert.strictEqual(config.split("[[hooks.").length - 1, 2)
      assert.include(
        config,
        "command = \"/usr/bin/node /srv/home/.writ/hook.mjs || { echo \\\"writ's hook failed\\\" >&2; exit 2; }\""
      )
      assert.strictEqual(file(plan, "hook.mjs")!.content, "the host's hook, reading /srv/home/.writ/callback.json")
      assert.deepStrictEqual(plan.argv.slice(0, 7), [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--ephemeral",
        "--color",
        "never",
        "--dangerously-bypass-hook-trust"
      ])
      assert.deepStrictEqual(plan.argv.slice(-2), ["--", "go"])
      assert.deepStrictEqual(plan.environment.map((e) => `${e._tag}:${e.name}`), [
        "set:HOME",
        "set:CODEX_HOME",
        "set:PATH",
        `secret:${Codex.modelKeyVar}`,
        "inherit:LANG",
        "secret:GH_TOKEN"
      ])
      assert.deepStrictEqual(plan.secret_files.map((f) => [f.path, f.ref]), [
        ["/srv/home/.writ/callback.json", Codex.callbackRef]
      ])
    }))

  it.effect("without the callback: no hook, no trust bypass, no callback file", () =>
    Effect.gen(function*() {
      const { plan, report } = yield* compile(spec({ tools: { callback: false } }))
      assert.notInclude(file(plan, "/config.toml")!.content, "[[hooks.")
      assert.notInclude(plan.argv, "--dangerously-bypass-hook-trust")
      assert.deepStrictEqual(plan.secret_files, [])
      assert.isUndefined(report.controls.find((c) => c.control === "callback.pre_tool@1"))
    }))

  it.effect("read roots: :minimal plus the roots and codex's own helpers; deny entries stay", () =>
    Effect.gen(function*() {
      const { plan } = yield* compile(spec({ filesystem: { read_roots: ["/data"], deny_read: ["/data/private"] } }))
      const config = file(plan, "/config.toml")!.content
      assert.include(
        config,
        [
          "\":minimal\" = \"read\"",
          "\"/srv/home/tmp\" = \"read\"",
          "\"/opt/codex-linux-x64/vendor/x86_64-unknown-linux-musl\" = \"read\"",
          "\"/data\" = \"read\"",
          "\"/srv/ws\" = \"write\"",
          "\"/data/private\" = \"deny\"",
          "\"/srv/home/.writ\" = \"deny\""
        ].join("\n")
      )
      assert.notInclude(config, "\"/\" = \"read\"")
    }))

  it.effect("deny_commands: a prefix rule per command, claimed degraded; domains open the whole network, degraded", () =>
    Effect.gen(function*() {
      const { plan, report } = yield* compile(
        spec({ subprocess: { deny_commands: ["rm -rf", "curl"] }, network: { allow_domains: ["example.com"] } })
      )
      assert.strictEqual(
        file(plan, "/rules/writ.rules")!.content,
        "prefix_rule(pattern = [\"rm\", \"-rf\"], decision = \"forbidden\")\n" +
          "prefix_rule(pattern = [\"curl\"], decision = \"forbidden\")\n"
      )
      assert.include(file(plan, "/config.toml")!.content, "[permissions.writ.network]\nenabled = true")
      const row = (control: string) => report.controls.find((c) => c.control === control)!
      assert.strictEqual(row("subprocess.deny_commands@1").level, "degraded")
      assert.strictEqual(
        row("subprocess.deny_commands@1").note,
        "command-prefix rules are syntactic: bash -c bypasses them"
      )
      assert.strictEqual(row("network.egress@1").level, "degraded")
    }))

  it.effect("a quote in a value stays inside its TOML string", () =>
    Effect.gen(function*() {
      const { plan } = yield* compile(spec({ workspace: "/srv/w\"s", model: { name: "m\"x" } }))
      const config = file(plan, "/config.toml")!.content
      assert.include(config, "model = \"m\\\"x\"")
      assert.include(config, "\"/srv/w\\\"s\" = \"write\"")
    }))

  it.effect("enforced only with a passing verify run for this version and executable", () =>
    Effect.gen(function*() {
      const before = yield* compile()
      assert.isFalse(before.report.controls.some((c) => c.level === "enforced"))
      const run = new Report.VerifyRun({
        control: "fs.write_roots@1",
        provider_version: "0.169.0",
        executable_digest: identity.digest,
        scenario: "bash-write-outside-workspace",
        run_id: "r1",
        effect_absent: true
      })
      const after = yield* compile(spec(), "/srv/home", [run])
      const row = after.report.controls.find((c) => c.control === "fs.write_roots@1")!
      assert.strictEqual(row.level, "enforced")
      assert.strictEqual(row.source, "os")
      assert.deepStrictEqual(after.plan.expected_evidence.map((e) => e.scenario).slice(0, 1), [
        "bash-write-outside-workspace"
      ])
    }))

  it.effect("refused: a home under /tmp, a home overlapping the workspace, another provider's spec, no version", () =>
    Effect.gen(function*() {
      const reason = (effect: ReturnType<typeof compile>) =>
        Effect.map(Effect.flip(effect), (e) => `${e.reason}: ${e.detail}`)
      assert.strictEqual(yield* reason(compile(spec(), "/tmp/h")), "compile_failed: CODEX_HOME must not be under /tmp")
      assert.strictEqual(
        yield* reason(compile(spec(), "/srv/ws/home")),
        "compile_failed: the config home overlaps the workspace"
      )
      assert.strictEqual(
        yield* reason(compile(spec({ provider: "claude-code" }))),
        "compile_failed: a claude-code spec"
      )
      const unknown = Codex.compile(
        { spec: spec(), probe: probe(null), prompt: "go", home: "/srv/home", verifications: [] },
        { node: "/usr/bin/node", hookScript: () => "" }
      )
      assert.strictEqual(yield* reason(unknown), "compile_failed: the provider version is unknown")
    }))

  it.effect("writ_only: the built-in tools' features off, writ's server the only one; enforced only with the hook", () =>
    Effect.gen(function*() {
      const host = {
        node: "/usr/bin/node",
        hookScript: (file: string) => `the hook, reading ${file}`,
        mcpBridge: (file: string) => `the bridge, reading ${file}`
      }
      const at = (tools: Record<string, unknown>, verifications: ReadonlyArray<Report.VerifyRun> = []) =>
        Codex.compile({ spec: spec({ tools }), probe: probe(), prompt: "go", home: "/srv/home", verifications }, host)
      const verified = Codex.scenarios["route.completeness@1"]!.map((scenario, i) =>
        new Report.VerifyRun({
          control: "route.completeness@1",
          provider_version: "0.169.0",
          executable_digest: identity.digest,
          scenario,
          run_id: `r${i}`,
          effect_absent: true
        })
      )
      const hooked = yield* at({ writ_only: true, callback: true }, verified)
      const config = file(hooked.plan, "/config.toml")!.content
      assert.include(config, "web_search = \"disabled\"\n")
      assert.include(config, `[features]\n${Codex.builtinFeatures.map((f) => `${f} = false\n`).join("")}`)
      assert.include(config, "[agents]\nenabled = false\n")
      assert.include(
        config,
        "[mcp_servers.writ]\ncommand = \"/usr/bin/node\"\nargs = [\"/srv/home/.writ/mcp.mjs\"]\n" +
          "default_tools_approval_mode = \"approve\"\n"
      )
      assert.strictEqual(file(hooked.plan, "/mcp.mjs")!.content, "the bridge, reading /srv/home/.writ/callback.json")
      const route = (r: Report.CapabilityReport) => r.controls.find((c) => c.control === "route.completeness@1")!
      assert.strictEqual(route(hooked.report).level, "enforced")
      // Without writ's hook, apply_patch (which codex adds by the model's catalog entry) reaches no part of writ.
      const bare = yield* at({ writ_only: true }, verified)
      assert.strictEqual(route(bare.report).level, "degraded")
      assert.include(route(bare.report).note ?? "", "apply_patch")
      // Without writ_only, neither the features nor writ's server are configured.
      const plain = file((yield* compile()).plan, "/config.toml")!.content
      assert.notInclude(plain, "[features]")
      assert.notInclude(plain, "[mcp_servers.writ]")
      assert.strictEqual(
        (yield* Effect.flip(at({ writ_only: true, allow: ["exec_command"] }))).reason,
        "compile_failed"
      )
      assert.strictEqual((yield* Effect.flip(compile(spec({ tools: { writ_only: true } })))).reason, "compile_failed")
    }))
})

// Lines as the real codex 0.169.0 printed them against the scripted model.
const stream = [
  `{"type":"thread.started","thread_id":"01a2452e"}`,
  `{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for \`scripted\` not found."}}`,
  `{"type":"turn.started"}`,
  `{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo sk-secret'","aggregated_output":"","exit_code":null,"status":"in_progress"}}`,
  `{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo sk-secret'","aggregated_output":"sk-secret\\n","exit_code":0,"status":"completed"}}`,
  `{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}`,
  `{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"finished"}}`,
  `{"type":"turn.completed","usage":{"input_tokens":20,"cached_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0}}`,
  "not json",
  "[1]"
].join("\n")

describe("CodexStream", () => {
  it("command executions, usage; redacted; an undocumented record or a non-record skipped", () => {
    const seen = CodexStream.parse(stream, ["sk-secret"])
    assert.deepStrictEqual(seen.map((o) => o._tag), ["tool_use", "tool_result", "tool_use", "tool_result", "usage"])
    const [use, result, , failed, usage] = seen as [
      Observation.ToolUse,
      Observation.ToolResult,
      Observation.ToolUse,
      Observation.ToolResult,
      Observation.Usage
    ]
    assert.strictEqual(use.tool, "Bash")
    assert.strictEqual(use.call_id, "item_1")
    assert.strictEqual(use.input, "/bin/bash -lc 'echo [redacted]'")
    assert.strictEqual(result.content, "[redacted]\n")
    assert.isFalse(result.is_error)
    assert.isTrue(failed.is_error)
    assert.deepStrictEqual([usage.input_tokens, usage.output_tokens, usage.turns], [20, 10, null])
    for (const o of seen) assert.strictEqual(o.plane, "observation")
  })

  it("MCP tool calls: one use named as codex's hooks name it, and its result or error; redacted", () => {
    const lines = [
      {
        type: "item.started",
        item: {
          id: "item_1",
          type: "mcp_tool_call",
          server: "writ",
          tool: "files_touch",
          arguments: { path: "/srv/ws/sk-secret" },
          result: null,
          error: null,
          status: "in_progress"
        }
      },
      {
        type: "item.completed",
        item: {
          id: "item_1",
          type: "mcp_tool_call",
          server: "writ",
          tool: "files_touch",
          arguments: { path: "/srv/ws/sk-secret" },
          result: { content: [{ type: "text", text: "touched" }], structured_content: null },
          error: null,
          status: "completed"
        }
      },
      {
        type: "item.completed",
        item: {
          id: "item_2",
          type: "mcp_tool_call",
          server: "writ",
          tool: "files_write",
          arguments: {},
          result: null,
          error: { message: "MCP tool call requires approval" },
          status: "failed"
        }
      }
    ].map((line) => JSON.stringify(line)).join("\n")
    const seen = CodexStream.parse(lines, ["sk-secret"])
    assert.deepStrictEqual(seen.map((o) => o._tag), ["tool_use", "tool_result", "tool_use", "tool_result"])
    const [use, result, , failed] = seen as [
      Observation.ToolUse,
      Observation.ToolResult,
      Observation.ToolUse,
      Observation.ToolResult
    ]
    assert.strictEqual(use.tool, "mcp__writ__files_touch")
    assert.strictEqual(use.input, "{\"path\":\"/srv/ws/[redacted]\"}")
    assert.isFalse(result.is_error)
    assert.include(result.content, "touched")
    assert.isTrue(failed.is_error)
    assert.strictEqual(failed.content, "MCP tool call requires approval")
  })

  it("the hook's denials, which codex prints only on stderr", () => {
    const stderr = "2026-12-05T07:50:17Z ERROR codex_core::tools::router: error=Command blocked by PreToolUse hook: " +
      "writ: shell.unsafe_syntax. Command: bash -c \"touch /srv/ws/denied.txt sk-secret\"\nReading additional input"
    const denials = CodexStream.denials(stderr, ["sk-secret"])
    assert.strictEqual(denials.length, 1)
    const denial = denials[0] as Observation.Denial
    assert.strictEqual(denial.tool, "Bash")
    assert.isNull(denial.call_id)
    assert.strictEqual(denial.detail, "writ: shell.unsafe_syntax: bash -c \"touch /srv/ws/denied.txt [redacted]\"")
  })
})
