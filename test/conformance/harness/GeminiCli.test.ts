// The real gemini CLI (node_modules, 0.61.0) under plans the gemini-cli adapter compiled, driven by the scripted
// Gemini model on 127.0.0.1: each control the mapping claims enforced is verified by the effect of the forbidden act,
// and each scenario's loosened control shows the same act succeeding, so none of these can pass vacuously.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as GeminiCliHarness from "../../../adapters/node/GeminiCliHarness.ts"
import * as Verify from "../../../adapters/node/GeminiCliVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as Scripted from "../../../adapters/node/ScriptedGemini.ts"
import * as HarnessAdapter from "../../../core/harness/HarnessAdapter.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import { Denial, ToolResult, ToolUse, Usage } from "../../../core/harness/ProviderObservation.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

const data = mkdtempSync(join(tmpdir(), "writ-harness-gemini-data-"))
const store = HarnessStore.make(data)
const adapter = GeminiCliHarness.make({ store })

const slow = { timeout: 300_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("gemini-cli, real CLI: --verify makes the CLI attempt each forbidden act under the compiled plan", () => {
  it.live(
    "every scenario passes by its effect, is recorded, and only then is the control enforced/verified",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, Verify.scenarios)
        assertAllPassed(results)
        const { after, probe } = yield* reportsAroundRecord(service, store, results, {
          provider: "gemini-cli",
          tools: { allow: ["run_shell_command"], callback: true },
          budget: { max_turns: 5 }
        }, "/tmp/writ-home")
        assert.strictEqual(probe.version, "0.61.0")
        const enforced = after.report.controls.filter((c) => c.level === "enforced").map((c) => c.control)
        assert.deepStrictEqual(enforced.sort(), [
          "budget.turns@1",
          "budget.wall_clock@1",
          "callback.integrity@1",
          "callback.pre_tool@1",
          "env.allowlist@1",
          "fs.write_roots@1",
          "network.egress@1",
          "tools.allowlist@1"
        ])
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.scenarios.map((s) => s.id))
        for (const control of after.report.controls.filter((c) => c.level === "enforced")) {
          assert.strictEqual(control.evidence._tag, "verified")
        }
        // writ's hook denied the bash -c call through its policy and allowed the plain touch; the stream showed the
        // denial only as an observation, parsed from the real CLI's stream-json.
        const callback = results.find((r) => r.result.control === "callback.pre_tool@1")!.result.run
        assert.deepStrictEqual(callback.decisions.map((d) => d.decision.decision), ["deny", "allow"])
        const denial = callback.observations.find((o) => o instanceof Denial)
        assert.isDefined(denial)
        assert.include((denial as Denial).detail, "shell.unsafe_syntax")
        const uses = callback.observations.filter((o) => o instanceof ToolUse)
        assert.deepStrictEqual(uses.map((u) => u.tool), ["run_shell_command", "run_shell_command"])
        const results_ = callback.observations.filter((o) => o instanceof ToolResult)
        assert.deepStrictEqual(results_.map((r) => r.is_error), [true, false])
        const usage = callback.observations.find((o) => o instanceof Usage)
        assert.isTrue(usage !== undefined && (usage.input_tokens ?? 0) > 0)
        // The model's key never appears in what the run kept.
        assert.notInclude(JSON.stringify(results.map((r) => r.result.run)), "sk-scripted-gemini-key")
      }).pipe(Effect.provide(layers)),
    slow
  )
})

loosenedSuite(
  "gemini-cli",
  [...Verify.scenarios, Verify.denyCommand],
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, true)),
  slow
)

describe("gemini-cli, real CLI: a degraded control still holds where it can be checked", () => {
  it.live(
    "the admin policy's rm prefix rule refuses rm, also through bash -c; it stays degraded (syntactic)",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const result = yield* Verify.runScenario(service, Verify.denyCommand)
        assert.isTrue(result.exercised)
        assert.isTrue(result.effect_absent)
        assert.isTrue(result.run.observations.some((o) => o instanceof Denial))
      }).pipe(Effect.provide(layers)),
    slow
  )
})

describe("gemini-cli: a required control that is not enforced refuses before spawn", () => {
  it.live(
    "with no verify run recorded, requiring network.egress@1 fails with the report and the CLI never runs",
    () =>
      Effect.gen(function*() {
        const fresh = mkdtempSync(join(tmpdir(), "writ-harness-gemini-fresh-"))
        const service = yield* GeminiCliHarness.make({ store: HarnessStore.make(fresh) })
        const model = yield* Effect.promise(() => Scripted.start([]))
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "gemini-cli",
          model: { name: "m", endpoint: model.baseUrl },
          workspace: fresh,
          required: ["network.egress@1"]
        })
        assert.strictEqual(spec._tag, "Right")
        if (spec._tag !== "Right") return
        const error = yield* Effect.flip(
          HarnessAdapter.prepare(service, {
            spec: spec.right,
            prompt: "p",
            home: join(tmpdir(), "writ-harness-gemini-unused-home"),
            verifications: []
          })
        )
        assert.strictEqual(error._tag, "RequiredControlUnmet")
        if (error._tag === "RequiredControlUnmet") {
          assert.deepStrictEqual(error.unmet, ["network.egress@1"])
          assert.strictEqual(
            error.report.controls.find((c) => c.control === "network.egress@1")!.note,
            "not verified for this executable and version"
          )
        }
        assert.strictEqual(model.requests.length, 0)
        yield* Effect.promise(() => model.close())
        rmSync(fresh, { recursive: true, force: true })
      }).pipe(Effect.provide(layers)),
    slow
  )
})
