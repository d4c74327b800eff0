import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Equal, Schema } from "effect"
import * as HarnessSpecFormat from "../../adapters/memory/HarnessSpecFormat.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import { ActionAdmissionDecision } from "../../core/execution/AdmissionDecision.ts"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import * as Observation from "../../core/harness/ProviderObservation.ts"

const spec = (input: Record<string, unknown> = {}) =>
  Either.getOrThrow(HarnessSpec.decode({
    spec_version: 1,
    provider: "claude-code",
    model: { name: "scripted" },
    workspace: "/work/ws",
    ...input
  }))

const full = spec({
  model: { name: "claude-x", endpoint: "http://127.0.0.1:9/", api_key: "env:SCRIPTED_KEY" },
  policy: { policy_id: "repo-agent", version: "3" },
  tools: { allow: ["Bash", "Read"], deny: ["WebFetch"], callback: true },
  filesystem: { read_roots: ["/usr"], write_roots: ["/tmp/out"], deny_read: ["/etc/shadow"] },
  network: { allow_domains: ["example.com"] },
  subprocess: { deny_commands: ["rm -rf", "curl"] },
  mcp: [{ server: "writ", tools: ["exec"] }],
  environment: { allow: ["PATH", "LANG"], secrets: [{ name: "GH_TOKEN", ref: "env:GH_TOKEN" }] },
  budget: { wall_clock_seconds: 120, max_turns: 8, max_cost_microusd: 500000 },
  required: ["fs.write_roots@1", "route.completeness@1"]
})

const identity = new Report.ExecutableIdentity({ path: "/bin/claude", digest: "a".repeat(64) as never })
const verified = (control: Report.VerifyRun["control"], effect_absent = true) =>
  new Report.VerifyRun({
    control,
    provider_version: "2.1.328",
    executable_digest: identity.digest,
    scenario: "write-outside",
    run_id: "run-1",
    effect_absent
  })

const assess = (input: Partial<Report.Assessment>) =>
  Report.assess({
    provider: "claude-code",
    version: "2.1.328",
    executable: identity,
    requested: ["fs.write_roots@1", "env.allowlist@1", "network.egress@1"],
    claims: [
      { control: "fs.write_roots@1", level: "enforced", source: "os", mechanism: "sandbox" },
      { control: "env.allowlist@1", level: "enforced", source: "writ", mechanism: "empty env" }
    ],
    verifications: [verified("fs.write_roots@1")],
    ...input
  })

const levels = (report: Report.CapabilityReport) =>
  Object.fromEntries(report.controls.map((c) => [c.control, `${c.level}/${c.evidence._tag}`]))

describe("HarnessSpec", () => {
  it("round-trips losslessly through YAML and JSON", () => {
    for (const value of [full, spec()]) {
      for (const format of ["yaml", "json"] as const) {
        const text = HarnessSpecFormat.write(value, format)
        const back = Either.getOrThrow(HarnessSpecFormat.parse(text, format))
        assert.deepStrictEqual(back, value)
        assert.strictEqual(HarnessSpecFormat.write(back, format), text)
      }
    }
  })

  it("fails loudly with the path of the offending field", () => {
    const message = (text: string, format: "yaml" | "json") =>
      Either.match(HarnessSpecFormat.parse(text, format), { onLeft: (e) => e.message, onRight: () => "accepted" })
    const base = "spec_version: 1\nprovider: claude-code\nmodel: {name: m}\nworkspace: /w\n"
    assert.strictEqual(
      message(base + "filesystem: {write_roots: [relative]}\n", "yaml").split(":")[0],
      "$.filesystem.write_roots.0"
    )
    assert.strictEqual(
      message(base + "tools: {allow: [Bash], yolo: true}\n", "yaml"),
      "$.tools.yolo: is not a field of this declaration (nothing is silently ignored)"
    )
    assert.strictEqual(message(base + "required: [fs.anything]\n", "yaml").split(":")[0], "$.required.0")
    assert.strictEqual(
      message(base + "environment: {secrets: [{name: K, ref: hunter2}]}\n", "yaml").split(":")[0],
      "$.environment.secrets.0.ref"
    )
    assert.strictEqual(message("{\"spec_version\": 1, \"spec_version\": 1}", "json").split(":")[0], "$.spec_version")
  })

  it("requests each section's control once, plus every required one", () => {
    assert.deepStrictEqual(HarnessSpec.requestedControls(full), [
      "tools.allowlist@1",
      "approval.non_interactive@1",
      "callback.pre_tool@1",
      "callback.integrity@1",
      "fs.write_roots@1",
      "fs.read_roots@1",
      "network.egress@1",
      "subprocess.deny_commands@1",
      "env.allowlist@1",
      "mcp.grants@1",
      "budget.wall_clock@1",
      "budget.turns@1",
      "budget.cost@1",
      "route.completeness@1"
    ])
  })
})

describe("CapabilityReport", () => {
  it("is enforced only with a passing verify run; a claim alone is degraded, no mapping is unsupported", () => {
    assert.deepStrictEqual(levels(assess({})), {
      "fs.write_roots@1": "enforced/verified",
      "env.allowlist@1": "degraded/declared",
      "network.egress@1": "unsupported/declared"
    })
  })

  it("an unknown version, another executable or a failed scenario is never enforced", () => {
    assert.deepStrictEqual(Object.values(levels(assess({ version: null }))), Array(3).fill("unsupported/declared"))
    const other = new Report.ExecutableIdentity({ path: "/bin/claude", digest: "b".repeat(64) as never })
    assert.strictEqual(levels(assess({ executable: other }))["fs.write_roots@1"], "degraded/declared")
    const failed = assess({ verifications: [verified("fs.write_roots@1"), verified("fs.write_roots@1", false)] })
    assert.strictEqual(levels(failed)["fs.write_roots@1"], "degraded/declared")
    assert.match(failed.controls[0]!.note!, /write-outside failed/)
  })

  it("cannot state enforced without verified evidence, nor a control twice", () => {
    const control = { control: "fs.write_roots@1", source: "os", mechanism: "m", evidence: { _tag: "declared" } }
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Report.ControlReport)({ ...control, level: "enforced" })))
    const twice = { provider: "codex", provider_version: "1", executable: null, notes: [] }
    const row = { ...control, level: "degraded" }
    assert.isTrue(
      Either.isLeft(Schema.decodeUnknownEither(Report.CapabilityReport)({ ...twice, controls: [row, row] }))
    )
  })

  it("a required control not enforced refuses, with the report", () => {
    const refused = Report.admit(assess({}), ["fs.write_roots@1", "env.allowlist@1"])
    assert.isTrue(Either.isLeft(refused))
    if (Either.isLeft(refused)) {
      assert.deepStrictEqual(refused.left.unmet, ["env.allowlist@1"])
      assert.strictEqual(refused.left.report.controls.length, 3)
    }
    assert.isTrue(Either.isRight(Report.admit(assess({}), ["fs.write_roots@1"])))
  })
})

const probe = new HarnessAdapter.ProbeResult({
  provider: "claude-code",
  executable: identity,
  version: "2.1.328",
  notes: []
})

const adapter = (compile: HarnessAdapter.HarnessAdapter.Service["compile"]) => {
  const service: HarnessAdapter.HarnessAdapter.Service = {
    provider: "claude-code",
    probe: Effect.succeed(probe),
    compile,
    spawn: () => Effect.dieMessage("nothing is spawned here")
  }
  return { service }
}

describe("HarnessAdapter.prepare", () => {
  it.effect("a compile failure is every required control unsupported, and nothing is admitted", () =>
    Effect.gen(function*() {
      const { service } = adapter(() =>
        Effect.fail(new HarnessAdapter.HarnessError({ reason: "compile_failed", detail: "x" }))
      )
      const s = spec({ required: ["fs.write_roots@1"] })
      const error = yield* Effect.flip(
        HarnessAdapter.prepare(service, { spec: s, prompt: "p", home: "/h", verifications: [] })
      )
      assert.strictEqual(error._tag, "RequiredControlUnmet")
      if (error._tag === "RequiredControlUnmet") assert.strictEqual(error.report.controls[0]!.level, "unsupported")
    }))
})

describe("HarnessPlan", () => {
  const plan = new HarnessPlan.HarnessPlan({
    plan_version: 1,
    provider: "claude-code",
    provider_version: "2.1.328",
    executable: identity,
    argv: ["-p", "hello"],
    config_files: [new HarnessPlan.ConfigFile({ path: "/h/.claude/settings.json", content: "{}" })],
    secret_files: [new HarnessPlan.SecretFile({ path: "/h/.writ/callback.json", ref: "writ:harness.callback" })],
    environment: [
      new HarnessPlan.SetVar({ name: "HOME", value: "/h" }),
      new HarnessPlan.InheritVar({ name: "PATH" }),
      new HarnessPlan.SecretVar({ name: "ANTHROPIC_API_KEY", ref: "env:SCRIPTED_KEY" })
    ],
    workspace: "/work/ws",
    home: "/h",
    wall_clock_seconds: 60,
    declared_controls: ["fs.write_roots@1"],
    expected_evidence: [new HarnessPlan.ExpectedEvidence({ control: "fs.write_roots@1", scenario: "write-outside" })]
  })

  it.effect("is canonical and hashed, and holds secrets only as references", () =>
    Effect.gen(function*() {
      const first = yield* HarnessPlan.digest(plan)
      const again = yield* HarnessPlan.digest(new HarnessPlan.HarnessPlan({ ...plan, argv: [...plan.argv] }))
      const other = yield* HarnessPlan.digest(new HarnessPlan.HarnessPlan({ ...plan, argv: ["-p", "other"] }))
      assert.strictEqual(first, again)
      assert.notStrictEqual(first, other)
      assert.deepStrictEqual(HarnessPlan.secretRefs(plan), ["env:SCRIPTED_KEY", "writ:harness.callback"])
      // A secret's value has no field to go in: a set variable is a literal, a secret only its reference.
      assert.isTrue(
        Either.isLeft(Schema.decodeUnknownEither(HarnessPlan.EnvEntry)({ _tag: "secret", name: "K", value: "v" }))
      )
    }).pipe(Effect.provide(WebCryptoDigest.layer)))
})

describe("ProviderObservation", () => {
  const result = new Observation.ToolResult({ plane: "observation", call_id: "c1", is_error: false, content: "ok" })
  const use = new Observation.ToolUse({ plane: "observation", call_id: "c1", tool: "Bash", input: "{}" })

  it("can never verify a control, nor be an admission decision", () => {
    // @ts-expect-error an observation is not a verify run: it has no control, version, executable or effect check
    const asRun: Report.VerifyRun = result
    // @ts-expect-error an observation is not an admission decision
    const asDecision: ActionAdmissionDecision = use
    assert.isFalse(Schema.is(Report.VerifyRun)(asRun))
    assert.isFalse(Schema.is(ActionAdmissionDecision)(asDecision))
    for (const observation of [result, use]) {
      const encoded = Schema.encodeSync(Observation.ProviderObservation)(observation)
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Report.VerifyRun)(encoded)))
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(ActionAdmissionDecision)(encoded)))
      assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Report.Evidence)(encoded)))
    }
  })

  it("is redacted: every secret value replaced, cut to its bound", () => {
    assert.strictEqual(Observation.redact("key=s3cret; again s3cret", ["s3cret"]), "key=[redacted]; again [redacted]")
    assert.strictEqual(Observation.redact("x".repeat(5000), []).length, Observation.maxText + 1)
  })

  it("built by `observed`, is exactly the instance its Schema constructor makes", () => {
    const o = { plane: "observation" } as const
    const pairs = [
      [
        new Observation.ToolUse({ ...o, call_id: "c1", tool: "Bash", input: "{}" }),
        Observation.observed(Observation.ToolUse, { ...o, call_id: "c1", tool: "Bash", input: "{}" })
      ],
      [result, Observation.observed(Observation.ToolResult, { ...o, call_id: "c1", is_error: false, content: "ok" })],
      [
        new Observation.Denial({ ...o, call_id: null, tool: "Bash", detail: "no" }),
        Observation.observed(Observation.Denial, { ...o, call_id: null, tool: "Bash", detail: "no" })
      ],
      [
        new Observation.Usage({ ...o, input_tokens: 3, output_tokens: null, turns: 1 }),
        Observation.observed(Observation.Usage, { ...o, input_tokens: 3, output_tokens: null, turns: 1 })
      ],
      [
        new Observation.Exit({ ...o, code: 0, signal: null, killed_by_harness: false }),
        Observation.observed(Observation.Exit, { ...o, code: 0, signal: null, killed_by_harness: false })
      ]
    ] as const
    for (const [made, built] of pairs) {
      assert.strictEqual(Object.getPrototypeOf(built), Object.getPrototypeOf(made))
      assert.deepStrictEqual(Object.entries(built), Object.entries(made))
      assert.isTrue(Equal.equals(built, made))
      assert.isTrue(Schema.is(Observation.ProviderObservation)(built))
      const encode = Schema.encodeSync(Observation.ProviderObservation)
      assert.deepStrictEqual(Object.entries(encode(built)), Object.entries(encode(made)))
    }
  })
})
