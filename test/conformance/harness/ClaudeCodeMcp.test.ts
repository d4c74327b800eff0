// The real claude CLI (node_modules, 2.1.328) with writ's MCP server, driven by the scripted model on 127.0.0.1: route
// completeness (the model asks for a built-in tool that must not exist; writ's tools run through the executor, which
// refuses what the policy denies), the permission prompt answered by writ's policy, and a hostile project's own MCP
// server never started. Each is checked by its effect, and each loosened control shows the same act succeeding.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as ClaudeCodeHarness from "../../../adapters/node/ClaudeCodeHarness.ts"
import * as Verify from "../../../adapters/node/ClaudeCodeVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

const data = mkdtempSync(join(tmpdir(), "writ-harness-mcp-data-"))
const store = HarnessStore.make(data)
const adapter = ClaudeCodeHarness.make({ store })

const slow = { timeout: 300_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("claude-code, real CLI, writ's MCP server: each scenario passes by its effect", () => {
  it.live(
    "route completeness, the permission prompt and MCP grants are enforced only once verified",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, Verify.mcpScenarios)
        assertAllPassed(results)
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.mcpScenarios.map((s) => s.id))
        // The permission prompt's decisions were writ's, by the policy: the wrapped command denied, the plain one allowed.
        const prompt = results.find((r) => r.result.scenario === "permission-prompt-denied-command")!.result.run
        assert.deepStrictEqual(prompt.decisions.map((d) => [d.call.tool, d.decision.decision]), [
          ["Bash", "deny"],
          ["Bash", "allow"]
        ])
        const { after } = yield* reportsAroundRecord(service, store, results, {
          provider: "claude-code",
          tools: { writ_only: true }
        }, "/srv/home")
        const route = after.report.controls.find((c) => c.control === "route.completeness@1")!
        assert.strictEqual(route.level, "enforced")
        assert.strictEqual(route.evidence._tag, "verified")
        assert.strictEqual(after.report.controls.find((c) => c.control === "mcp.grants@1")!.level, "enforced")
        // The compiled plan has no built-in tool and writ's server as its only MCP server.
        const argv = after.plan.argv
        assert.strictEqual(argv[argv.indexOf("--tools") + 1], "")
        assert.include(argv, "--strict-mcp-config")
        assert.deepStrictEqual(Object.keys(JSON.parse(argv[argv.indexOf("--mcp-config") + 1]!).mcpServers), ["writ"])
      }).pipe(Effect.provide(layers)),
    slow
  )
})

loosenedSuite(
  "claude-code (writ's MCP server)",
  Verify.mcpScenarios,
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, true)),
  slow
)
