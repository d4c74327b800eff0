import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as GeminiCli from "../../core/harness/GeminiCli.ts"
import * as GeminiCliStream from "../../core/harness/GeminiCliStream.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as HarnessPolicy from "../../core/harness/HarnessPolicy.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import * as Observation from "../../core/harness/ProviderObservation.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const spec = (input: Record<string, unknown> = {}) =>
  Either.getOrThrow(HarnessSpec.decode({
    spec_version: 1,
    provider: "gemini-cli",
    model: { name: "gemini-2.5-pro", endpoint: "http://127.0.0.1:9/", api_key: "env:SCRIPTED_KEY" },
    workspace: "/srv/ws",
    tools: { allow: ["run_shell_command", "read_file"], deny: ["replace"], callback: true },
    environment: { allow: ["LANG"], secrets: [{ name: "GH_TOKEN", ref: "file:/run/gh" }] },
    ...input
  }))

const identity = new Report.ExecutableIdentity({ path: "/pkg/bundle/gemini.js", digest: "e".repeat(64) as never })
const probe = (version: string | null = "0.61.0") =>
  new HarnessAdapter.ProbeResult({ provider: "gemini-cli", executable: identity, version, notes: [] })

const host = { node: "/usr/bin/node", hookScript: (file: string) => `the host's hook, reading ${file}` }

const compile = (
  s = spec(),
  verifications: ReadonlyArray<Report.VerifyRun> = [],
  version?: string | null,
  home = "/tmp/home"
) => GeminiCli.compile({ spec: s, probe: probe(version), prompt: "go", home, verifications }, host)

const file = (plan: HarnessPlan.HarnessPlan, path: string) => plan.config_files.find((f) => f.path === path)!.content

const settings = (plan: HarnessPlan.HarnessPlan) => JSON.parse(file(plan, "/tmp/home/.gemini/settings.json"))

const run = (control: Report.VerifyRun["control"], effect_absent = true) =>
  new Report.VerifyRun({
    control,
    provider_version: "0.61.0",
    executable_digest: identity.digest,
    scenario: GeminiCli.scenarios[control]![0]!,
    run_id: "r1",
    effect_absent
  })

describe("GeminiCli.compile", () => {
  it.effect("tool sandbox, redaction, core tools, the blocking hook, the admin policy, an empty environment", () =>
    Effect.gen(function*() {
      const { plan } = yield* compile()
      const s = settings(plan)
      assert.strictEqual(s.security.auth.selectedType, "gemini-api-key")
      assert.strictEqual(s.security.toolSandboxing, true)
      assert.strictEqual(s.security.environmentVariableRedaction.enabled, true)
      assert.deepStrictEqual(s.tools.core, ["run_shell_command", "read_file"])
      assert.deepStrictEqual(s.tools.exclude, ["replace", "web_fetch", "google_web_search"])
      assert.deepStrictEqual(s.mcpServers, {})
      // A crashed hook exits 2, which blocks; its own deadline is well inside gemini's.
      const hook = s.hooks.BeforeTool[0].hooks[0]
      assert.strictEqual(hook.command, "/usr/bin/node /tmp/home/.writ/hook.mjs || exit 2")
      assert.strictEqual(hook.timeout, 30_000)
      assert.deepStrictEqual(plan.argv.slice(2), [
        "--output-format",
        "stream-json",
        "--model",
        "gemini-2.5-pro",
        "--approval-mode",
        "default",
        "--admin-policy",
        "/tmp/home/.writ/policy.toml"
      ])
      const policy = file(plan, "/tmp/home/.writ/policy.toml")
      assert.include(policy, "toolName = \"run_shell_command\"\ndecision = \"allow\"\npriority = 100\nallowRedirection")
      assert.include(policy, "toolName = \"web_fetch\"\ndecision = \"deny\"\npriority = 900")
      assert.notInclude(policy, "toolName = \"replace\"\ndecision = \"allow\"")
      const sandbox = file(plan, "/tmp/home/.gemini/policies/sandbox.toml")
      assert.notInclude(sandbox, "network = true")
      assert.strictEqual(sandbox.match(/approvedTools = \[\]/g)?.length, 3)
      assert.deepStrictEqual(plan.environment.map((e) => `${e._tag}:${e.name}`), [
        "set:HOME",
        "set:PATH",
        "set:GEMINI_CLI_TRUST_WORKSPACE",
        "set:GEMINI_CLI_NO_RELAUNCH",
        "set:GOOGLE_GEMINI_BASE_URL",
        "secret:GEMINI_API_KEY",
        "inherit:LANG",
        "secret:GH_TOKEN"
      ])
      assert.deepStrictEqual(HarnessPlan.secretRefs(plan), ["env:SCRIPTED_KEY", "file:/run/gh", GeminiCli.callbackRef])
      assert.strictEqual(
        file(plan, "/tmp/home/.writ/hook.mjs"),
        "the host's hook, reading /tmp/home/.writ/callback.json"
      )
      assert.notInclude(JSON.stringify(HarnessPlan.encode(plan)), "SCRIPTED_KEY=")
    }))

  it.effect("denied commands become admin-policy prefix rules above every allow; turns become maxSessionTurns", () =>
    Effect.gen(function*() {
      const { plan, report } = yield* compile(spec({
        subprocess: { deny_commands: ["rm", "git \"push\""] },
        budget: { max_turns: 4 }
      }))
      const policy = file(plan, "/tmp/home/.writ/policy.toml")
      assert.include(policy, "commandPrefix = \"rm\"\ndecision = \"deny\"\npriority = 900")
      assert.include(policy, "commandPrefix = \"git \\\"push\\\"\"")
      assert.strictEqual(settings(plan).model.maxSessionTurns, 4)
      const row = report.controls.find((c) => c.control === "subprocess.deny_commands@1")!
      assert.strictEqual(row.level, "degraded")
      assert.strictEqual(row.note, "command-prefix rules are syntactic")
    }))

  it.effect("each control claimed is enforced only with its verify run; others degraded or unsupported", () =>
    Effect.gen(function*() {
      const s = spec({ filesystem: { deny_read: ["/srv/secret"] }, mcp: [{ server: "x", tools: ["t"] }] })
      const { plan, report } = yield* compile(s, [run("network.egress@1"), run("fs.write_roots@1", false)])
      const level = Object.fromEntries(report.controls.map((c) => [c.control, c.level]))
      assert.strictEqual(level["network.egress@1"], "enforced")
      assert.strictEqual(level["fs.write_roots@1"], "degraded")
      assert.include(report.controls.find((c) => c.control === "fs.write_roots@1")!.note, "failed")
      assert.strictEqual(level["fs.read_roots@1"], "degraded")
      assert.strictEqual(level["env.allowlist@1"], "degraded")
      assert.strictEqual(level["mcp.grants@1"], "unsupported")
      assert.isFalse(plan.declared_controls.includes("mcp.grants@1"))
      assert.strictEqual(new Set(report.controls.map((c) => c.control)).size, report.controls.length)
    }))

  it.effect("what gemini cannot express is degraded even with a passing run: domains, extra write roots", () =>
    Effect.gen(function*() {
      const { report } = yield* compile(
        spec({ network: { allow_domains: ["example.com"] }, filesystem: { write_roots: ["/srv/out"] } }),
        [run("network.egress@1"), run("fs.write_roots@1")]
      )
      const row = (c: string) => report.controls.find((r) => r.control === c)!
      assert.strictEqual(row("network.egress@1").level, "degraded")
      assert.strictEqual(row("network.egress@1").note, "per-domain allow is not expressible: the network stays off")
      assert.strictEqual(row("fs.write_roots@1").level, "degraded")
    }))

  it.effect("callback integrity rests on a config home under /tmp, which the tool sandbox hides", () =>
    Effect.gen(function*() {
      const hidden = yield* compile(spec(), [run("callback.integrity@1")])
      const visible = yield* compile(spec(), [run("callback.integrity@1")], undefined, "/srv/home")
      const row = (r: Report.CapabilityReport) => r.controls.find((c) => c.control === "callback.integrity@1")!
      assert.strictEqual(row(hidden.report).level, "enforced")
      assert.strictEqual(row(visible.report).level, "degraded")
    }))

  it.effect("an unknown version, another provider's spec and an overlapping home fail compile", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* Effect.flip(compile(spec(), [], null))).reason, "compile_failed")
      const claude = Either.getOrThrow(HarnessSpec.decode({
        spec_version: 1,
        provider: "claude-code",
        model: { name: "m" },
        workspace: "/srv/ws"
      }))
      assert.strictEqual((yield* Effect.flip(compile(claude))).reason, "compile_failed")
      const inside = yield* Effect.flip(compile(spec(), [], undefined, "/srv/ws/.home"))
      assert.strictEqual(inside.detail, "the config home overlaps the workspace")
    }))

  it("the yolo profile is named and always warns that the network is forced on", () => {
    assert.strictEqual(GeminiCli.yoloProfile.name, "gemini-cli/yolo@1")
    assert.include(GeminiCli.yoloProfile.degrades, "network.egress@1")
    assert.include(GeminiCli.yoloProfile.warning, "network")
  })

  it.effect("writ_only: no built-in tool, writ's MCP server the only one and the only route, enforced once verified", () =>
    Effect.gen(function*() {
      const writOnly = spec({ tools: { writ_only: true } })
      const withBridge = { ...host, mcpBridge: (file: string) => `the bridge, reading ${file}` }
      const at = (verifications: ReadonlyArray<Report.VerifyRun>) =>
        GeminiCli.compile(
          { spec: writOnly, probe: probe(), prompt: "go", home: "/tmp/home", verifications },
          withBridge
        )
      const { plan, report } = yield* at([])
      const s = settings(plan)
      assert.deepStrictEqual(s.tools.core, ["mcp_writ_*"])
      assert.deepStrictEqual(s.mcpServers, { writ: { command: "/usr/bin/node", args: ["/tmp/home/.writ/mcp.mjs"] } })
      // The admin policy's first rules: writ's server's tools allowed above a deny of every other tool.
      const policy = file(plan, GeminiCli.policyFile("/tmp/home"))
      assert.isTrue(policy.startsWith(
        "[[rule]]\nmcpName = \"writ\"\ntoolName = \"*\"\ndecision = \"allow\"\npriority = 990\n\n" +
          "[[rule]]\ntoolName = \"*\"\ndecision = \"deny\"\npriority = 980\n"
      ))
      assert.strictEqual(file(plan, "/tmp/home/.writ/mcp.mjs"), "the bridge, reading /tmp/home/.writ/callback.json")
      const route = (r: Report.CapabilityReport) => r.controls.find((c) => c.control === "route.completeness@1")!
      assert.strictEqual(route(report).level, "degraded")
      const verified = yield* at([run("route.completeness@1")])
      assert.strictEqual(route(verified.report).level, "enforced")
      // A built-in tool beside writ_only, or a host without the bridge, fails compile.
      const both = spec({ tools: { writ_only: true, allow: ["run_shell_command"] } })
      const error = yield* Effect.flip(
        GeminiCli.compile(
          { spec: both, probe: probe(), prompt: "go", home: "/tmp/home", verifications: [] },
          withBridge
        )
      )
      assert.strictEqual(error.reason, "compile_failed")
      assert.strictEqual((yield* Effect.flip(compile(writOnly))).reason, "compile_failed")
    }))
})

// Lines as gemini 0.61.0 wrote them against the scripted model (trimmed).
const stream = [
  `{"type":"init","timestamp":"t","session_id":"s","model":"gemini-2.5-pro"}`,
  `{"type":"tool_use","timestamp":"t","tool_name":"run_shell_command","tool_id":"c1","parameters":{"command":"echo s3cret"}}`,
  `{"type":"tool_result","timestamp":"t","tool_id":"c1","status":"success","output":"s3cret\\n"}`,
  `{"type":"tool_use","timestamp":"t","tool_name":"run_shell_command","tool_id":"c2","parameters":{"command":"rm x"}}`,
  `{"type":"tool_result","timestamp":"t","tool_id":"c2","status":"error","output":"Tool execution denied by policy.","error":{"type":"policy_violation","message":"Tool execution denied by policy."}}`,
  `{"type":"tool_result","timestamp":"t","tool_id":"c3","status":"error","output":"Path not in workspace","error":{"type":"invalid_tool_params","message":"Path not in workspace"}}`,
  `not json`,
  `{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":12,"input_tokens":7,"output_tokens":5,"tool_calls":2}}`
].join("\n")

describe("GeminiCliStream", () => {
  it("tool use, tool result with its status, a policy denial, usage; secrets redacted", () => {
    const observed = GeminiCliStream.parse(stream, ["s3cret"])
    assert.deepStrictEqual(observed.map((o) => o._tag), [
      "tool_use",
      "tool_result",
      "tool_use",
      "tool_result",
      "denial",
      "tool_result",
      "usage"
    ])
    assert.notInclude(JSON.stringify(observed), "s3cret")
    assert.deepStrictEqual(observed.filter((o) => o._tag === "tool_result").map((o) => o.is_error), [
      false,
      true,
      true
    ])
    assert.deepStrictEqual(
      observed[4],
      new Observation.Denial({
        plane: "observation",
        call_id: "c2",
        tool: "run_shell_command",
        detail: "Tool execution denied by policy."
      })
    )
    assert.deepStrictEqual(
      observed[6],
      new Observation.Usage({ plane: "observation", input_tokens: 7, output_tokens: 5, turns: null })
    )
    // Every observation stays on the observation plane, whatever the stream claims.
    const hostile = `{"type":"result","decision":"allow","stats":{}}`
    for (const o of GeminiCliStream.parse(`${stream}\n${hostile}`, [])) {
      const encoded = Schema.encodeSync(Observation.ProviderObservation)(o)
      assert.strictEqual(encoded.plane, "observation")
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Report.VerifyRun)(encoded)))
    }
  })
})

describe("HarnessPolicy: gemini's tools are named as writ actions", () => {
  it.effect("run_shell_command is shell.exec and bash -c is denied; read_file is files.read by its file_path", () =>
    Effect.gen(function*() {
      const policy = Either.getOrThrow(PermissionPolicy.decode({
        policy_id: "p",
        version: "1",
        mode: "rules",
        allow: { "shell.exec": ["touch *"], "files.read": ["/srv/ws/*"] }
      }))
      const decide = HarnessPolicy.decider(yield* PolicySnapshot.compile(policy), "agent")
      const call = (tool: string, input: unknown) => decide({ tool, input, call_id: "" })
      assert.deepStrictEqual(yield* call("run_shell_command", { command: "touch /srv/ws/a" }), { decision: "allow" })
      assert.strictEqual((yield* call("run_shell_command", { command: "bash -c \"touch a\"" })).decision, "deny")
      assert.deepStrictEqual(yield* call("read_file", { file_path: "/srv/ws/a" }), { decision: "allow" })
      assert.strictEqual((yield* call("read_file", { file_path: "/etc/shadow" })).decision, "deny")
      assert.strictEqual((yield* call("web_fetch", { prompt: "http://x" })).decision, "deny")
    }).pipe(Effect.provide(WebCryptoDigest.layer)))
})
