// The legacy yolo flag: a spec field that round-trips, compiled by each provider into its own named profile, whose
// touched controls are degraded even with passing verify runs (which ran under writ's own profile), always with the
// profile's warning in the report. Pure compile: no CLI runs here.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as HarnessSpecFormat from "../../adapters/memory/HarnessSpecFormat.ts"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as ClaudeCode from "../../core/harness/ClaudeCode.ts"
import * as Codex from "../../core/harness/Codex.ts"
import * as GeminiCli from "../../core/harness/GeminiCli.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import { ControlName, type Provider } from "../../core/harness/HarnessControl.ts"
import type * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import type { YoloProfile } from "../../core/harness/YoloProfile.ts"

const host = { node: "/usr/bin/node", hookScript: (file: string) => `the host's hook, reading ${file}` }

interface Case {
  readonly provider: Provider
  readonly version: string
  readonly home: string
  readonly tools: ReadonlyArray<string>
  readonly profile: YoloProfile
  readonly compile: typeof ClaudeCode.compile
  /** Where the profile shows in the plan. */
  readonly shows: (plan: HarnessPlan.HarnessPlan) => boolean
}

const setVar = (plan: HarnessPlan.HarnessPlan, name: string) =>
  plan.environment.find((e) => e._tag === "set" && e.name === name)

const cases: ReadonlyArray<Case> = [
  {
    provider: "claude-code",
    version: "2.1.328",
    home: "/tmp/home",
    tools: ["Bash", "Write"],
    profile: ClaudeCode.yoloProfile,
    compile: ClaudeCode.compile,
    shows: (plan) =>
      plan.argv.join(" ").includes("--permission-mode bypassPermissions") && !plan.argv.includes("dontAsk") &&
      setVar(plan, "IS_SANDBOX")?._tag === "set" &&
      plan.config_files.some((f) => f.content.includes("\"defaultMode\":\"bypassPermissions\""))
  },
  {
    provider: "codex",
    version: "0.169.0",
    home: "/srv/home",
    tools: [],
    profile: Codex.yoloProfile,
    compile: Codex.compile,
    shows: (plan) => plan.argv.includes("--dangerously-bypass-approvals-and-sandbox")
  },
  {
    provider: "gemini-cli",
    version: "0.61.0",
    home: "/tmp/home",
    tools: ["run_shell_command"],
    profile: GeminiCli.yoloProfile,
    compile: GeminiCli.compile,
    shows: (plan) => plan.argv.join(" ").includes("--approval-mode yolo") && !plan.argv.includes("default")
  }
]

const specOf = (c: Case, yolo: boolean | undefined) =>
  Either.getOrThrow(HarnessSpec.decode({
    spec_version: 1,
    provider: c.provider,
    model: { name: "m", endpoint: "http://127.0.0.1:9/", api_key: "env:KEY" },
    workspace: "/srv/ws",
    tools: { allow: c.tools, callback: true },
    filesystem: { deny_read: ["/srv/secret"] },
    subprocess: { deny_commands: ["rm -rf"] },
    ...(yolo === undefined ? {} : { yolo })
  }))

const digest = "f".repeat(64)

/** A passing verify run for every control: without yolo these make the mapping's enforced claims enforced. */
const allPassed = (c: Case) =>
  ControlName.literals.map((control) =>
    new Report.VerifyRun({
      control,
      provider_version: c.version,
      executable_digest: digest as never,
      scenario: "scenario",
      run_id: "run-1",
      effect_absent: true
    })
  )

const compiled = (c: Case, yolo: boolean | undefined) =>
  c.compile({
    spec: specOf(c, yolo),
    probe: new HarnessAdapter.ProbeResult({
      provider: c.provider,
      executable: new Report.ExecutableIdentity({ path: "/opt/cli/bin/cli", digest: digest as never }),
      version: c.version,
      notes: []
    }),
    prompt: "go",
    home: c.home,
    verifications: allPassed(c)
  }, host)

const levels = (report: Report.CapabilityReport) =>
  Object.fromEntries(report.controls.map((row) => [row.control, row.level]))

describe("HarnessSpec.yolo", () => {
  it("round-trips losslessly through YAML and JSON, set, unset and false", () => {
    for (const yolo of [true, false, undefined]) {
      const value = specOf(cases[0]!, yolo)
      assert.strictEqual(value.yolo, yolo)
      for (const format of ["yaml", "json"] as const) {
        const text = HarnessSpecFormat.write(value, format)
        assert.deepStrictEqual(Either.getOrThrow(HarnessSpecFormat.parse(text, format)), value)
      }
    }
  })

  it("is a boolean, else the spec fails with its path", () => {
    const parsed = HarnessSpecFormat.parse(
      "spec_version: 1\nprovider: codex\nmodel: {name: m}\nworkspace: /w\nyolo: always\n",
      "yaml"
    )
    assert.strictEqual(Either.isLeft(parsed) ? parsed.left.path : "accepted", "$.yolo")
  })
})

describe("the yolo profile, per provider", () => {
  for (const c of cases) {
    it.effect(`${c.provider}: ${c.profile.name} in the plan, its controls degraded despite verify runs, its warning`, () =>
      Effect.gen(function*() {
        const plain = yield* compiled(c, undefined)
        const yolo = yield* compiled(c, true)
        assert.isFalse(c.shows(plain.plan), "the plain plan carries no yolo flag")
        assert.isTrue(c.shows(yolo.plan), "the yolo plan carries the provider's own flag")
        assert.match(c.profile.name, new RegExp(`^${c.provider}/yolo@\\d+$`))

        const before = levels(plain.report)
        const after = levels(yolo.report)
        const touched = c.profile.degrades.filter((control) => control in after)
        // The same verify runs make these enforced without the flag: the profile is what degrades them.
        assert.isTrue(touched.some((control) => before[control] === "enforced"))
        for (const control of touched) {
          assert.notStrictEqual(after[control], "enforced", `${control} under ${c.profile.name}`)
          const row = yolo.report.controls.find((r) => r.control === control)!
          if (before[control] === "enforced") assert.include(row.note, c.profile.name)
        }
        // Controls the profile does not touch keep their level.
        for (const control of Object.keys(after).filter((k) => !touched.includes(k as ControlName))) {
          assert.strictEqual(after[control], before[control], control)
        }
        const warning = yolo.report.notes.find((n) => n.startsWith("yolo: "))
        assert.isDefined(warning)
        assert.include(warning, c.profile.name)
        assert.include(warning, c.profile.warning)
        assert.include(warning, "not a portable claim")
        assert.isFalse(plain.report.notes.some((n) => n.startsWith("yolo: ")))
        // A required control the profile degrades refuses the run.
        const refused = Report.admit(yolo.report, ["fs.write_roots@1"])
        assert.isTrue(Either.isLeft(refused))
      }))
  }

  it.effect("yolo: false compiles exactly as no flag", () =>
    Effect.gen(function*() {
      for (const c of cases) {
        const unset = yield* compiled(c, undefined)
        const off = yield* compiled(c, false)
        assert.deepStrictEqual(off.plan.argv, unset.plan.argv)
        assert.deepStrictEqual(off.report, unset.report)
      }
    }))
})
