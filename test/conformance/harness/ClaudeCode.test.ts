// The real claude CLI (node_modules, 2.1.328) under plans the claude-code adapter compiled, driven by the scripted
// model on 127.0.0.1: each control the mapping claims enforced is verified by the effect of the forbidden act, and each
// scenario's loosened control shows the same act succeeding, so none of these can pass vacuously.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as ClaudeCodeHarness from "../../../adapters/node/ClaudeCodeHarness.ts"
import * as Verify from "../../../adapters/node/ClaudeCodeVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as Scripted from "../../../adapters/node/ScriptedAnthropic.ts"
import * as HarnessAdapter from "../../../core/harness/HarnessAdapter.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import { Denial } from "../../../core/harness/ProviderObservation.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

const data = mkdtempSync(join(tmpdir(), "writ-harness-data-"))
const store = HarnessStore.make(data)
const adapter = ClaudeCodeHarness.make({ store })

const slow = { timeout: 300_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("claude-code, real CLI: --verify makes the CLI attempt each forbidden act under the compiled plan", () => {
  it.live(
    "every scenario passes by its effect, is recorded, and only then is the control enforced/verified",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, Verify.scenarios)
        assertAllPassed(results)
        const { after } = yield* reportsAroundRecord(service, store, results, {
          provider: "claude-code",
          tools: { allow: ["Bash"], callback: true }
        }, "/srv/home")
        const enforced = after.report.controls.filter((c) => c.level === "enforced").map((c) => c.control)
        assert.deepStrictEqual(enforced.sort(), [
          "budget.wall_clock@1",
          "callback.integrity@1",
          "callback.pre_tool@1",
          "env.allowlist@1",
          "fs.write_roots@1",
          "network.egress@1",
          "tools.allowlist@1"
        ])
        // Each route of a control was tried and recorded: a control is enforced only when all of its scenarios passed.
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.scenarios.map((s) => s.id))
        for (const control of after.report.controls.filter((c) => c.level === "enforced")) {
          assert.strictEqual(control.evidence._tag, "verified")
        }
        // The callback scenario's denial came from writ's policy, and the stream showed it only as an observation.
        const callback = results.find((r) => r.result.control === "callback.pre_tool@1")!.result.run
        assert.deepStrictEqual(callback.decisions.map((d) => d.decision.decision), ["deny", "allow"])
        assert.isTrue(
          callback.observations.some((o) => o instanceof Denial && o.detail.includes("shell.unsafe_syntax"))
        )
      }).pipe(Effect.provide(layers)),
    slow
  )
})

loosenedSuite(
  "claude-code",
  Verify.scenarios,
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, true)),
  slow
)

describe("claude-code: a required control that is not enforced refuses before spawn", () => {
  it.live(
    "with no verify run recorded, requiring fs.write_roots@1 fails with the report and the CLI never runs",
    () =>
      Effect.gen(function*() {
        const fresh = mkdtempSync(join(tmpdir(), "writ-harness-fresh-"))
        const service = yield* ClaudeCodeHarness.make({ store: HarnessStore.make(fresh) })
        const model = yield* Effect.promise(() => Scripted.start([{ name: "Bash", input: { command: "true" } }]))
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "claude-code",
          model: { name: "m", endpoint: model.baseUrl },
          workspace: fresh,
          required: ["fs.write_roots@1"]
        })
        assert.strictEqual(spec._tag, "Right")
        if (spec._tag !== "Right") return
        const error = yield* Effect.flip(
          HarnessAdapter.prepare(service, {
            spec: spec.right,
            prompt: "p",
            home: join(tmpdir(), "writ-harness-unused-home"),
            verifications: yield* HarnessStore.make(fresh).verifications
          })
        )
        assert.strictEqual(error._tag, "RequiredControlUnmet")
        if (error._tag === "RequiredControlUnmet") {
          assert.deepStrictEqual(error.unmet, ["fs.write_roots@1"])
          const row = error.report.controls.find((c) => c.control === "fs.write_roots@1")!
          assert.strictEqual(row.level, "degraded")
          assert.strictEqual(row.note, "not verified for this executable and version")
        }
        assert.strictEqual(model.requests.length, 0)
        yield* Effect.promise(() => model.close())
        rmSync(fresh, { recursive: true, force: true })
      }).pipe(Effect.provide(layers)),
    slow
  )
})
