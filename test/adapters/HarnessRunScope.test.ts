/**
 * A harness run's execution scope, with the real claude CLI against the scripted model: the admitted plan and report
 * are attached to the run's scope before the process is spawned (the process port reads them, with digests computed
 * here independently, before the CLI exists), and every part of the run reads the same attachment: the blocking
 * callback's decider, each observer call, each decision's record, the run's result and a span carrying both digests.
 * writ's MCP server's handler too. The probe, outside any run, reads none; a given scope (a durable Run's) is the one
 * attached.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import type { Tracer } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as ClaudeCodeHarness from "../../adapters/node/ClaudeCodeHarness.ts"
import * as HarnessMcp from "../../adapters/node/HarnessMcp.ts"
import * as HarnessStore from "../../adapters/node/HarnessStore.ts"
import { verifyActions, verifyPolicy } from "../../adapters/node/internal/verifyScenario.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as NodeHarnessProcess from "../../adapters/node/NodeHarnessProcess.ts"
import * as Scripted from "../../adapters/node/ScriptedAnthropic.ts"
import * as Digest from "../../core/base/Digest.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import { CapabilityReport } from "../../core/harness/CapabilityReport.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import * as HarnessPolicy from "../../core/harness/HarnessPolicy.ts"
import { HarnessProcess, type ProcessSpec } from "../../core/harness/HarnessProcess.ts"
import * as HarnessRun from "../../core/harness/HarnessRun.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const dir = realpathSync(mkdtempSync(join(tmpdir(), "writ-harness-scope-")))
const ws = join(dir, "ws")
mkdirSync(ws)
const store = HarnessStore.make(join(dir, "data"))

afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** What the process port saw when asked to run a process: the run it was in, its span, and the workspace then. */
interface Seen {
  readonly spec: ProcessSpec
  readonly run: Option.Option<HarnessRun.Attached>
  readonly span: Option.Option<Tracer.AnySpan>
  readonly fileBefore: boolean
  readonly homeFiles: ReadonlyArray<string | undefined>
}

/** The real process port, wrapped to record what it sees just before it starts each process. */
const recording = (seen: Array<Seen>, file: string) =>
  Layer.effect(
    HarnessProcess,
    Effect.map(HarnessProcess, (real): HarnessProcess["Type"] => ({
      run: (spec) =>
        Effect.gen(function*() {
          const run = yield* HarnessRun.current
          seen.push({
            spec,
            run,
            span: yield* Effect.option(Effect.currentSpan),
            fileBefore: existsSync(file),
            homeFiles: Option.match(run, {
              onNone: () => [],
              onSome: (r) =>
                r.plan.config_files.map((f) => (existsSync(f.path) ? readFileSync(f.path, "utf-8") : undefined))
            })
          })
          return yield* real.run(spec)
        })
    }))
  ).pipe(Layer.provide(NodeHarnessProcess.layer))

/** The `HarnessRun` span among `span` and its ancestors. */
const runSpan = (span: Option.Option<Tracer.AnySpan>): Tracer.Span | undefined => {
  let at = Option.getOrUndefined(span)
  while (at !== undefined && !(at._tag === "Span" && at.name === "HarnessRun")) {
    at = at._tag === "Span" ? Option.getOrUndefined(at.parent) : undefined
  }
  return at
}

const snapshotOf = (declared: unknown) =>
  Effect.flatMap(PermissionPolicy.decode(declared), PolicySnapshot.compile).pipe(Effect.orDie)

const snapshot = snapshotOf({
  policy_id: "scope-test",
  version: "1",
  mode: "rules",
  allow: { "shell.exec": ["touch *"] }
})

/** A spec for the scripted model at `endpoint`: the shell with writ's callback deciding each call, or writ's tools only. */
const spec = (endpoint: string, writOnly: boolean) =>
  Either.getOrThrow(HarnessSpec.decode({
    spec_version: 1,
    provider: "claude-code",
    model: { name: "scripted", endpoint, api_key: "writ:test.key" },
    workspace: ws,
    tools: writOnly ? { writ_only: true } : { allow: ["Bash"], callback: true }
  }))

const encodeReport = Schema.encodeSync(CapabilityReport)

/**
 * One real run asking for `touch name` in the workspace, with `scope` given or not: through the shell, or through
 * writ's MCP server (`files.touch`), whose handler records the run it is called in.
 */
const runOnce = (name: string, options: { readonly scope?: DurableRun; readonly writOnly?: boolean } = {}) =>
  Effect.gen(function*() {
    const file = join(ws, name)
    const writOnly = options.writOnly === true
    const call = writOnly
      ? { name: "mcp__writ__files_touch", input: { path: file } }
      : { name: "Bash", input: { command: `touch ${file}` } }
    const model = yield* Effect.acquireRelease(
      Effect.promise(() => Scripted.start([call])),
      (m) => Effect.promise(() => m.close())
    )
    const seen: Array<Seen> = []
    const adapter = yield* Effect.provide(ClaudeCodeHarness.make({ store }), recording(seen, file))
    const admitted = yield* HarnessAdapter.prepare(adapter, {
      spec: spec(model.baseUrl, writOnly),
      prompt: "go",
      home: join(dir, `home-${name}`),
      verifications: []
    })
    const decide = HarnessPolicy.decider(yield* snapshot, "harness")
    const inDecide: Array<Option.Option<HarnessRun.Attached>> = []
    const inObserve: Array<Option.Option<HarnessRun.Attached>> = []
    const inMcp: Array<Option.Option<HarnessRun.Attached>> = []
    const server = writOnly
      ? yield* HarnessMcp.make({
        actions: verifyActions,
        snapshot: yield* snapshotOf(verifyPolicy),
        principal: "harness",
        decide
      })
      : undefined
    const result = yield* adapter.spawn(admitted, {
      secrets: new Map([["writ:test.key", Redacted.make("sk-scope")]]),
      ...(options.scope === undefined ? {} : { scope: options.scope }),
      ...(server === undefined ? {} : {
        mcp: {
          handle: (line: string) =>
            Effect.zipLeft(server.handle(line), Effect.map(HarnessRun.current, (r) => inMcp.push(r))),
          decisions: server.decisions
        }
      }),
      decide: (call) => Effect.zipLeft(decide(call), Effect.map(HarnessRun.current, (r) => inDecide.push(r))),
      observe: () => Effect.asVoid(Effect.map(HarnessRun.current, (r) => inObserve.push(r)))
    })
    return { admitted, result, seen, inDecide, inObserve, inMcp, file }
  }).pipe(Effect.scoped)

describe("a harness run's execution scope (real claude, scripted model)", () => {
  it.live(
    "the plan and report are attached before spawn, and the decider, observers, records, result and span read them",
    () =>
      Effect.gen(function*() {
        const { admitted, file, inDecide, inObserve, result, seen } = yield* runOnce("allowed.txt")
        // Digested here, independently of the attachment: the plan's wire form and the report's.
        const planDigest = yield* HarnessPlan.digest(admitted.plan)
        const reportDigest = yield* Digest.canonical(encodeReport(admitted.report))

        // The probe asked `--version` outside any run; the CLI was spawned once, inside the run.
        const spawns = seen.filter((s) => s.spec.command === admitted.plan.executable.path && s.spec.args.length > 1)
        assert.strictEqual(spawns.length, 1)
        assert.isTrue(seen.filter((s) => s !== spawns[0]).every((s) => Option.isNone(s.run)))
        const [spawn] = spawns
        // Before the process existed: the plan and report were attached, the plan's files written, the act not done.
        assert.isTrue(Option.isSome(spawn!.run))
        const attached = Option.getOrThrow(spawn!.run)
        assert.isFalse(spawn!.fileBefore)
        assert.deepStrictEqual(spawn!.homeFiles, admitted.plan.config_files.map((f) => f.content))
        assert.strictEqual(attached.plan_digest, planDigest)
        assert.strictEqual(attached.report_digest, reportDigest)
        assert.deepStrictEqual(HarnessPlan.encode(attached.plan), HarnessPlan.encode(admitted.plan))
        assert.deepStrictEqual(encodeReport(attached.report), encodeReport(admitted.report))
        assert.deepStrictEqual(spawn!.spec.args, admitted.plan.argv)
        // No scope given: an ephemeral operation of the run's own.
        assert.strictEqual(attached.scope._tag, "ephemeral_operation")

        // The span the process was started under carries both digests and the scope.
        const span = runSpan(spawn!.span)
        assert.isDefined(span)
        assert.strictEqual(span!.attributes.get("writ.harness.plan_digest"), planDigest)
        assert.strictEqual(span!.attributes.get("writ.harness.report_digest"), reportDigest)
        assert.strictEqual(span!.attributes.get("writ.harness.scope_id"), HarnessRun.scopeId(attached))

        // The call was decided (and allowed) inside the run, and it happened.
        assert.isTrue(existsSync(file))
        assert.isAbove(inDecide.length, 0)
        assert.isTrue(inDecide.every((r) => Option.isSome(r) && r.value === attached))
        assert.isAbove(inObserve.length, 0)
        assert.isTrue(inObserve.every((r) => Option.isSome(r) && r.value === attached))
        assert.deepStrictEqual(result.decisions.map((d) => d.decision.decision), ["allow"])
        assert.isTrue(result.decisions.every((d) => d.run === attached))
        assert.strictEqual(result.run, attached)
      }).pipe(Effect.provide(NodeDigest.layer)),
    300_000
  )

  it.live(
    "a scope given at launch (a durable Run's) is the one the plan and report are attached to",
    () =>
      Effect.gen(function*() {
        const run_id = Uuid.make("0b6f3c2e-6a1d-4e0b-9a59-3c1f3f7f2a10")
        const { admitted, inDecide, result, seen } = yield* runOnce("durable.txt", {
          scope: DurableRun.make({ run_id })
        })
        const spawn = seen.find((s) => Option.isSome(s.run))!
        const attached = Option.getOrThrow(spawn.run)
        assert.deepStrictEqual(attached.scope, DurableRun.make({ run_id }))
        assert.strictEqual(attached.plan_digest, yield* HarnessPlan.digest(admitted.plan))
        assert.strictEqual(runSpan(spawn.span)!.attributes.get("writ.harness.scope_id"), run_id)
        assert.isTrue(inDecide.every((r) => Option.isSome(r) && r.value === attached))
        assert.strictEqual(result.run, attached)
      }).pipe(Effect.provide(NodeDigest.layer)),
    300_000
  )

  it.live(
    "writ's MCP server is called inside the run: its handler reads the run's attachment, and the tool ran",
    () =>
      Effect.gen(function*() {
        const { file, inMcp, result, seen } = yield* runOnce("mcp.txt", { writOnly: true })
        const attached = Option.getOrThrow(seen.find((s) => Option.isSome(s.run))!.run)
        assert.isTrue(existsSync(file))
        // initialize, tools/list and tools/call at least; every one inside the run.
        assert.isAtLeast(inMcp.length, 3)
        assert.isTrue(inMcp.every((r) => Option.isSome(r) && r.value === attached))
        assert.strictEqual(result.run, attached)
      }).pipe(Effect.provide(NodeDigest.layer)),
    300_000
  )
})
