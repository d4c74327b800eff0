// The real codex CLI (node_modules, 0.169.0) with writ's MCP server, driven by the scripted Responses model on
// 127.0.0.1: route completeness under tools.writ_only (the built-in shell the model asks for does not exist, writ's tool
// runs through the executor, a call writ's policy denies is refused, and apply_patch, which codex still gives a model
// whose catalog entry declares it, is refused by writ's hook). Each is checked by its effect, and each loosened control
// shows the same act succeeding: without the hook, the patch lands, which is why writ_only alone is only degraded.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs"
import * as CodexHarness from "../../../adapters/node/CodexHarness.ts"
import * as Verify from "../../../adapters/node/CodexVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as Codex from "../../../core/harness/Codex.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import { ToolUse } from "../../../core/harness/ProviderObservation.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

// Not under /tmp: codex refuses to create its sandbox helpers in a CODEX_HOME there.
mkdirSync("/var/tmp", { recursive: true })
const data = realpathSync(mkdtempSync("/var/tmp/writ-codex-mcp-data-"))
const store = HarnessStore.make(data)
const homes = CodexHarness.homesDir(store)
const adapter = CodexHarness.make({ store })

const slow = { timeout: 180_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("codex, real CLI, writ's MCP server: each scenario passes by its effect", () => {
  it.live(
    "route completeness is enforced, once verified, only with writ's hook; writ's policy refuses a denied MCP call",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, homes, Verify.mcpScenarios)
        assertAllPassed(results)
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.mcpScenarios.map((s) => s.id))
        // writ's hook saw writ's tool (and let its executor decide it) and refused apply_patch.
        const [absent, denied, patch] = results.map((r) => r.result.run)
        assert.deepStrictEqual(absent!.decisions.map((d) => [d.call.tool, d.decision.decision]), [
          ["mcp__writ__files_touch", "allow"]
        ])
        assert.deepStrictEqual(denied!.decisions.map((d) => d.decision.decision), ["allow", "allow"])
        assert.deepStrictEqual(patch!.decisions.map((d) => [d.call.tool, d.decision.decision]), [
          ["apply_patch", "deny"],
          ["mcp__writ__files_touch", "allow"]
        ])
        // The stream showed writ's tool call, parsed from the real CLI's item records (the shell never ran).
        assert.deepStrictEqual(absent!.observations.filter((o) => o instanceof ToolUse).map((o) => o.tool), [
          "mcp__writ__files_touch"
        ])
        const { after } = yield* reportsAroundRecord(service, store, results, {
          provider: "codex",
          tools: { writ_only: true, callback: true }
        }, "/srv/home")
        const route = after.report.controls.find((c) => c.control === "route.completeness@1")!
        assert.strictEqual(route.level, "enforced")
        assert.strictEqual(route.evidence._tag, "verified")
        const config = after.plan.config_files.find((f) => f.path === "/srv/home/config.toml")!.content
        for (const feature of Codex.builtinFeatures) assert.include(config, `\n${feature} = false\n`)
        assert.include(config, "[mcp_servers.writ]\n")
        assert.include(config, "web_search = \"disabled\"\n")
        // Without the hook the same verify runs do not make it enforced: apply_patch would reach no part of writ.
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "codex",
          model: { name: "m" },
          workspace: "/srv/ws",
          tools: { writ_only: true }
        })
        if (spec._tag === "Left") return assert.fail(spec.left.message)
        const bare = yield* service.compile({
          spec: spec.right,
          probe: yield* service.probe,
          prompt: "p",
          home: "/srv/home",
          verifications: yield* store.verifications
        })
        const degraded = bare.report.controls.find((c) => c.control === "route.completeness@1")!
        assert.strictEqual(degraded.level, "degraded")
        assert.include(degraded.note ?? "", "apply_patch")
      }).pipe(Effect.provide(layers)),
    slow
  )
})

loosenedSuite(
  "codex (writ's MCP server)",
  Verify.mcpScenarios,
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, homes, true)),
  slow
)
