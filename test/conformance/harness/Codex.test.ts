// The real codex CLI (node_modules, 0.169.0) under plans the codex adapter compiled, driven by the scripted Responses
// model on 127.0.0.1: each control the mapping claims enforced is verified by the effect of the forbidden act, and each
// scenario's loosened control shows the same act succeeding, so none of these can pass vacuously.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs"
import { join } from "node:path"
import * as CodexHarness from "../../../adapters/node/CodexHarness.ts"
import * as Verify from "../../../adapters/node/CodexVerify.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as ClaudeCodeHook from "../../../adapters/node/internal/claudeCodeHook.ts"
import * as Scripted from "../../../adapters/node/ScriptedOpenAI.ts"
import * as HarnessAdapter from "../../../core/harness/HarnessAdapter.ts"
import { ConfigFile, HarnessPlan } from "../../../core/harness/HarnessPlan.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import { Denial, ToolResult, ToolUse, Usage } from "../../../core/harness/ProviderObservation.ts"
import { assertAllPassed, layers, loosenedSuite, reportsAroundRecord } from "../../fixtures/harnessConformance.ts"

// Not under /tmp: codex refuses to create its sandbox helpers in a CODEX_HOME there.
mkdirSync("/var/tmp", { recursive: true })
const data = realpathSync(mkdtempSync("/var/tmp/writ-codex-data-"))
const store = HarnessStore.make(data)
const homes = CodexHarness.homesDir(store)
const adapter = CodexHarness.make({ store })

const slow = { timeout: 180_000 }

afterAll(() => rmSync(data, { recursive: true, force: true }))

describe("codex, real CLI: --verify makes the CLI attempt each forbidden act under the compiled plan", () => {
  it.live(
    "every scenario passes by its effect, is recorded, and only then is the control enforced/verified",
    () =>
      Effect.gen(function*() {
        const service = yield* adapter
        const results = yield* Verify.verify(service, homes, Verify.scenarios)
        assertAllPassed(results)
        const { after, probe } = yield* reportsAroundRecord(service, store, results, {
          provider: "codex",
          filesystem: { deny_read: ["/srv/secret"] },
          tools: { callback: true }
        }, "/srv/home")
        assert.strictEqual(probe.version, "0.169.0")
        const enforced = after.report.controls.filter((c) => c.level === "enforced").map((c) => c.control)
        assert.deepStrictEqual(enforced.sort(), [
          "budget.wall_clock@1",
          "callback.integrity@1",
          "callback.pre_tool@1",
          "env.allowlist@1",
          "fs.read_roots@1",
          "fs.write_roots@1",
          "network.egress@1"
        ])
        const level = (control: string) => after.report.controls.find((c) => c.control === control)?.level
        assert.strictEqual(level("subprocess.deny_commands@1"), undefined)
        assert.strictEqual(level("tools.allowlist@1"), "degraded")
        assert.strictEqual(level("budget.turns@1"), undefined)
        assert.deepStrictEqual(results.map((r) => r.run.scenario), Verify.scenarios.map((s) => s.id))
        // The callback scenario's denial came from writ's policy; the stream showed the allowed call only.
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
  "codex",
  Verify.scenarios,
  (scenario) => Effect.flatMap(adapter, (service) => Verify.runScenario(service, scenario, homes, true)),
  slow
)

describe("codex, real CLI: an allowed call runs and the stream is observed", () => {
  it.live(
    "the scripted command runs in the workspace; observations name it, its output and the usage",
    () =>
      Effect.gen(function*() {
        const ws = realpathSync(mkdtempSync(join(data, "ws-")))
        const model = yield* Effect.promise(() =>
          Scripted.start([{ name: "exec_command", input: { cmd: "echo observed > out.txt; echo printed" } }])
        )
        const service = yield* adapter
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "codex",
          model: { name: "scripted", endpoint: model.baseUrl, api_key: "writ:key" },
          workspace: ws
        })
        assert.strictEqual(spec._tag, "Right")
        if (spec._tag !== "Right") return
        const admitted = yield* HarnessAdapter.prepare(service, {
          spec: spec.right,
          prompt: "go",
          home: join(homes, "observed"),
          verifications: []
        })
        const run = yield* service.spawn(admitted, {
          secrets: new Map([["writ:key", Redacted.make("sk-observed")]]),
          decide: () => Effect.succeed({ decision: "allow" })
        }).pipe(Effect.either)
        yield* Effect.promise(() => model.close())
        assert.strictEqual(run._tag, "Right")
        if (run._tag !== "Right") return
        assert.strictEqual(readFileSync(join(ws, "out.txt"), "utf-8"), "observed\n")
        const use = run.right.observations.find((o) => o instanceof ToolUse)
        assert.include(use?.input, "echo observed > out.txt")
        const result = run.right.observations.find((o) => o instanceof ToolResult)
        assert.strictEqual(result?.content, "printed\n")
        assert.isFalse(result?.is_error)
        assert.isTrue(run.right.observations.some((o) => o instanceof Usage && o.input_tokens !== null))
        assert.strictEqual(run.right.observations.at(-1)?._tag, "exit")
      }).pipe(Effect.provide(layers)),
    slow
  )
})

describe("codex, real CLI: why subprocess.deny_commands@1 is degraded", () => {
  it.live(
    "the prefix rule refuses the plain command, and the same command through bash -c runs",
    () =>
      Effect.gen(function*() {
        const ws = realpathSync(mkdtempSync(join(data, "ws-")))
        const model = yield* Effect.promise(() =>
          Scripted.start([
            { name: "exec_command", input: { cmd: `touch ${ws}/plain.txt` } },
            { name: "exec_command", input: { cmd: `bash -c "touch ${ws}/wrapped.txt"` } },
            { name: "exec_command", input: { cmd: `echo ran > ${ws}/ran.txt` } }
          ])
        )
        const service = yield* adapter
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "codex",
          model: { name: "scripted", endpoint: model.baseUrl },
          workspace: ws,
          subprocess: { deny_commands: ["touch"] }
        })
        assert.strictEqual(spec._tag, "Right")
        if (spec._tag !== "Right") return
        const admitted = yield* HarnessAdapter.prepare(service, {
          spec: spec.right,
          prompt: "go",
          home: join(homes, "rules"),
          verifications: []
        })
        const row = admitted.report.controls.find((c) => c.control === "subprocess.deny_commands@1")
        assert.strictEqual(row?.level, "degraded")
        yield* service.spawn(admitted, { secrets: new Map(), decide: () => Effect.succeed({ decision: "allow" }) })
        yield* Effect.promise(() => model.close())
        assert.strictEqual(readFileSync(join(ws, "ran.txt"), "utf-8"), "ran\n")
        assert.isFalse(existsSync(join(ws, "plain.txt")), "the rule holds for the plain command")
        assert.isTrue(existsSync(join(ws, "wrapped.txt")), "bash -c is not matched by a prefix rule")
      }).pipe(Effect.provide(layers)),
    slow
  )
})

describe("codex, real CLI: writ's hook fails closed", () => {
  const hooks = {
    "an unreadable callback file (writ unreachable) prints the blocking deny": ClaudeCodeHook.script("/nonexistent/cb"),
    "a hook that crashes with exit 1 (which codex treats as allow) is turned into exit 2": "process.exit(1)\n"
  }
  for (const [name, program] of Object.entries(hooks)) {
    it.live(name, () =>
      Effect.gen(function*() {
        const ws = realpathSync(mkdtempSync(join(data, "ws-")))
        const model = yield* Effect.promise(() =>
          Scripted.start([{ name: "exec_command", input: { cmd: `touch ${ws}/ran.txt` } }])
        )
        const service = yield* adapter
        const spec = HarnessSpec.decode({
          spec_version: 1,
          provider: "codex",
          model: { name: "scripted", endpoint: model.baseUrl },
          workspace: ws,
          tools: { callback: true }
        })
        assert.strictEqual(spec._tag, "Right")
        if (spec._tag !== "Right") return
        const admitted = yield* HarnessAdapter.prepare(service, {
          spec: spec.right,
          prompt: "go",
          home: join(homes, `hook-${ws.slice(-6)}`),
          verifications: []
        })
        const plan = new HarnessPlan({
          ...admitted.plan,
          config_files: admitted.plan.config_files.map((file) =>
            file.path.endsWith("/hook.mjs") ? new ConfigFile({ path: file.path, content: program }) : file
          )
        })
        const run = yield* service.spawn({ ...admitted, plan }, {
          secrets: new Map(),
          decide: () => Effect.succeed({ decision: "allow" })
        })
        yield* Effect.promise(() => model.close())
        // The model did ask, and codex did reach the point of running it: the hook alone stopped it.
        assert.strictEqual(model.requests.length, 2)
        assert.isFalse(existsSync(join(ws, "ran.txt")))
        assert.isTrue(run.observations.some((o) => o instanceof Denial))
        assert.deepStrictEqual(run.decisions, [])
      }).pipe(Effect.provide(layers)), slow)
  }
})
