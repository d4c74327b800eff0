// The real gemini CLI (node_modules, 0.61.0) with writ's MCP server, driven by the scripted Gemini model on 127.0.0.1:
// route completeness (the model asks for the built-in shell and write_file, which must not exist, while writ's tool runs
// through the executor) and a call of writ's tool that writ's policy denies. Each is checked by its effect, and each
// loosened control shows the same act succeeding.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as GeminiCliHarness from "../../../adapters/node/GeminiCliHarness.ts"
import * as Verify from "../../../adapters/node/GeminiCliVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as GeminiCli from "../../../core/harness/GeminiCli.ts"
import { ToolResult, ToolUse } from "../../../core/harness/ProviderObservation.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

const data = mkdtempSync(join(tmpdir(), "writ-harness-gemini-mcp-data-"))
const store = HarnessStore.make(data)
const adapter = GeminiCliHarness.make({ store })

const slow = { timeout: 300_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("gemini-cli, real CLI, writ's MCP server: each scenario passes by its effect", () => {
  it.live(
    "route completeness is enforced only once verified; writ's policy refuses a denied MCP call",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, Verify.mcpScenarios)
        assertAllPassed(results)
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.mcpScenarios.map((s) => s.id))
        // The model asked for the shell, write_file and writ's tool; only writ's tool ran.
        const route = results[0]!.result.run
        const uses = route.observations.filter((o) => o instanceof ToolUse).map((o) => o.tool)
        assert.include(uses, "mcp_writ_files_touch")
        // gemini skips an admin policy file it cannot read, with only this line: writ's rules were read.
        for (const { result } of results) assert.notInclude(result.run.stderr, "Policy file error")
        const { after } = yield* reportsAroundRecord(service, store, results, {
          provider: "gemini-cli",
          tools: { writ_only: true }
        }, "/tmp/writ-home")
        const control = after.report.controls.find((c) => c.control === "route.completeness@1")!
        assert.strictEqual(control.level, "enforced")
        assert.strictEqual(control.evidence._tag, "verified")
        // The compiled settings register no built-in tool and serve writ's server only.
        const settings = JSON.parse(
          after.plan.config_files.find((f) => f.path === GeminiCli.settingsFile("/tmp/writ-home"))!.content
        )
        assert.deepStrictEqual(settings.tools.core, [GeminiCli.writTools])
        assert.deepStrictEqual(Object.keys(settings.mcpServers), ["writ"])
        // The denied call reached writ, which refused it: the CLI saw an error result, and the allowed one succeed.
        const denied = results[1]!.result.run
        const outcomes = denied.observations.filter((o) => o instanceof ToolResult).map((o) => o.is_error)
        assert.deepStrictEqual(outcomes, [true, false])
      }).pipe(Effect.provide(layers)),
    slow
  )
})

loosenedSuite(
  "gemini-cli (writ's MCP server)",
  Verify.mcpScenarios,
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, true)),
  slow
)
