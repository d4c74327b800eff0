/**
 * `writ harness probe|plan|run claude-code|codex|gemini-cli`: what the installed CLI can prove (its report, enforced only where a verify
 * run recorded in writ's data directory passed; `--verify` runs the scenarios against the real CLI and records them),
 * the plan and report a spec compiles to, and a run under that plan. Exit codes: 0 ok, 1 a required control not
 * enforced (nothing spawned), a failed verify scenario or a CLI that did not exit 0, 2 bad input.
 */
import { Args, Command, Options } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { Console, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import type { Scope } from "effect"
import { randomUUID } from "node:crypto"
import { realpathSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HarnessSpecFormat from "../../../adapters/memory/HarnessSpecFormat.ts"
import * as PolicyFormat from "../../../adapters/memory/PolicyFormat.ts"
import * as ClaudeCodeHarness from "../../../adapters/node/ClaudeCodeHarness.ts"
import * as Verify from "../../../adapters/node/ClaudeCodeVerify.ts"
import * as CodexHarness from "../../../adapters/node/CodexHarness.ts"
import * as CodexVerify from "../../../adapters/node/CodexVerify.ts"
import * as GeminiCliHarness from "../../../adapters/node/GeminiCliHarness.ts"
import * as GeminiVerify from "../../../adapters/node/GeminiCliVerify.ts"
import * as HarnessMcp from "../../../adapters/node/HarnessMcp.ts"
import * as HarnessStore from "../../../adapters/node/HarnessStore.ts"
import * as NodeHarnessProcess from "../../../adapters/node/NodeHarnessProcess.ts"
import * as Sqlite from "../../../adapters/node/Sqlite.ts"
import * as SqlHarnessRunStore from "../../../adapters/sql/SqlHarnessRunStore.ts"
import * as SqlObservationLog from "../../../adapters/sql/SqlObservationLog.ts"
import * as SqlVerifyRunStore from "../../../adapters/sql/SqlVerifyRunStore.ts"
import type * as Digest from "../../../core/base/Digest.ts"
import * as IdGenerator from "../../../core/base/IdGenerator.ts"
import * as Time from "../../../core/base/Time.ts"
import * as EvidenceProjector from "../../../core/evidence/EvidenceProjector.ts"
import type { AppendReceipt } from "../../../core/evidence/EvidenceStore.ts"
import { EvidenceWriter, openBoundary } from "../../../core/evidence/EvidenceWriter.ts"
import { DurableRun, EphemeralOperation } from "../../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../../core/execution/Ingress.ts"
import * as Report from "../../../core/harness/CapabilityReport.ts"
import * as ClaudeCode from "../../../core/harness/ClaudeCode.ts"
import * as Codex from "../../../core/harness/Codex.ts"
import * as GeminiCli from "../../../core/harness/GeminiCli.ts"
import * as GovernedRun from "../../../core/harness/GovernedRun.ts"
import * as HarnessAdapter from "../../../core/harness/HarnessAdapter.ts"
import { ControlName } from "../../../core/harness/HarnessControl.ts"
import * as HarnessPlan from "../../../core/harness/HarnessPlan.ts"
import * as HarnessPolicy from "../../../core/harness/HarnessPolicy.ts"
import * as HarnessRun from "../../../core/harness/HarnessRun.ts"
import { HarnessAttachment, HarnessRunStore } from "../../../core/harness/HarnessRunStore.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import { ObservationLog } from "../../../core/harness/ObservationLog.ts"
import * as PolicyNarrowing from "../../../core/harness/PolicyNarrowing.ts"
import { ProviderObservation } from "../../../core/harness/ProviderObservation.ts"
import { VerifyRunStore } from "../../../core/harness/VerifyRunStore.ts"
import type { PolicySnapshot } from "../../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import { EvidenceRef, RunTerminal } from "../../../core/state/Run.ts"
import { RunStore } from "../../../core/state/RunStore.ts"
import * as Demo from "../../Demo.ts"
import * as Embedded from "../../Embedded.ts"
import { checkDatabase, CliInputError, json, onDatabase, setExitCode } from "./internal/input.ts"
import { load } from "./internal/policyFile.ts"
import { table } from "./internal/render.ts"
import * as StatusLine from "./internal/statusLine.ts"

const provider = Args.choice([
  ["claude-code", "claude-code" as const],
  ["codex", "codex" as const],
  ["gemini-cli", "gemini-cli" as const]
], { name: "provider" }).pipe(Args.withDescription("claude-code, codex or gemini-cli"))

type Provider = "claude-code" | "codex" | "gemini-cli"

const specFile = Options.file("spec", { exists: "yes" }).pipe(Options.withDescription("a HarnessSpec (.yaml or .json)"))

const tmpHome = () => join(realpathSync(tmpdir()), `writ-harness-${randomUUID()}`)

/** Per provider: its adapter, its mapping's claims, its verify scenarios, and a fresh config home for one run. */
const providers = {
  "claude-code": {
    make: (store: HarnessStore.HarnessStore) => ClaudeCodeHarness.make({ store }),
    claims: (spec: HarnessSpec.HarnessSpec) => ClaudeCode.claims(spec),
    verify: (adapter: HarnessAdapter.HarnessAdapter.Service, _: HarnessStore.HarnessStore) => Verify.verify(adapter),
    home: (_: HarnessStore.HarnessStore) => tmpHome()
  },
  codex: {
    make: (store: HarnessStore.HarnessStore) => CodexHarness.make({ store }),
    claims: (spec: HarnessSpec.HarnessSpec) => Codex.claims(spec),
    verify: (adapter: HarnessAdapter.HarnessAdapter.Service, store: HarnessStore.HarnessStore) =>
      CodexVerify.verify(adapter, CodexHarness.homesDir(store)),
    // Not under /tmp: codex refuses to create its sandbox helpers in a CODEX_HOME there.
    home: (store: HarnessStore.HarnessStore) => join(CodexHarness.homesDir(store), randomUUID())
  },
  "gemini-cli": {
    make: (store: HarnessStore.HarnessStore) => GeminiCliHarness.make({ store }),
    claims: (spec: HarnessSpec.HarnessSpec) => GeminiCli.claims(spec, "/tmp/writ-harness"),
    verify: (adapter: HarnessAdapter.HarnessAdapter.Service, _: HarnessStore.HarnessStore) =>
      GeminiVerify.verify(adapter),
    home: (_: HarnessStore.HarnessStore) => tmpHome()
  }
} as const

const adapterOf = (name: Provider, store: HarnessStore.HarnessStore) =>
  Effect.provide(providers[name].make(store), NodeHarnessProcess.layer)

const encodeReport = Schema.encodeSync(Report.CapabilityReport)

const renderReport = (report: Report.CapabilityReport) =>
  [
    `provider ${report.provider} ${report.provider_version ?? "(unknown version)"}`,
    `executable ${report.executable?.path ?? "-"}  sha256 ${report.executable?.digest ?? "-"}`,
    ...report.notes.map((note) => `note: ${note}`),
    "",
    table(
      ["control", "level", "by", "mechanism", "evidence"],
      report.controls.map((c) => [
        c.control,
        c.level,
        c.source,
        c.mechanism,
        c.evidence._tag === "verified"
          ? `verified ${c.evidence.scenario} (${c.evidence.run_id.slice(0, 8)})`
          : c.note ?? "declared"
      ])
    )
  ].join("\n")

/** The report of every control the installed CLI could be asked for, from the mapping and the recorded verify runs. */
const probeReport = (
  name: Provider,
  probe: HarnessAdapter.ProbeResult,
  verifications: ReadonlyArray<Report.VerifyRun>
) =>
  Report.assess({
    provider: name,
    version: probe.version,
    executable: probe.executable,
    requested: ControlName.literals,
    claims: providers[name].claims(Either.getOrThrow(HarnessSpec.decode({
      spec_version: 1,
      provider: name,
      model: { name: "probe" },
      workspace: "/",
      tools: { callback: true }
    }))),
    verifications,
    notes: probe.notes
  })

/**
 * `use` with where verify runs are kept: `--db`'s database (checked, opened and migrated, closed after), else the cache
 * file in writ's data directory.
 */
const withVerifyRuns = <A, E, R>(
  db: Option.Option<string>,
  use: (verifyRuns: VerifyRunStore.Service) => Effect.Effect<A, E, R>
) =>
  Option.isNone(db)
    ? use(HarnessStore.make())
    : Effect.zipRight(
      checkDatabase(db.value, "new_or_existing"),
      Effect.flatMap(VerifyRunStore, use).pipe(
        Effect.provide(SqlVerifyRunStore.layer.pipe(Layer.provide(Sqlite.layer({ filename: db.value })))),
        onDatabase(db.value)
      )
    )

const verifyDb = Options.file("db").pipe(
  Options.optional,
  Options.withDescription(
    "a writ SQLite file (created if missing) keeping the verify runs, instead of writ's data directory"
  )
)

const probeCommand = Command.make(
  "probe",
  {
    provider,
    json,
    verify: Options.boolean("verify").pipe(Options.withDescription("run the verify scenarios")),
    db: verifyDb
  },
  ({ db, json, provider, verify }) =>
    withVerifyRuns(db, (verifyRuns) =>
      Effect.gen(function*() {
        const store = HarnessStore.make()
        const adapter = yield* adapterOf(provider, store)
        const failed: Array<string> = []
        if (verify) {
          const results = yield* providers[provider].verify(adapter, store)
          yield* verifyRuns.record(results.map((r) => r.run))
          for (const { result, run } of results) {
            if (!run.effect_absent) failed.push(run.scenario)
            if (!json) {
              yield* Console.error(
                `verify ${run.scenario}: ${run.effect_absent ? "passed" : "FAILED"} (effect ${
                  result.effect_absent ? "absent" : "happened"
                }, exercised ${result.exercised})`
              )
            }
          }
        }
        const report = probeReport(provider, yield* adapter.probe, yield* verifyRuns.verifications)
        yield* Console.log(
          json ? JSON.stringify({ report: encodeReport(report), failed }, null, 2) : renderReport(report)
        )
        if (failed.length > 0) yield* setExitCode(1)
      }))
).pipe(Command.withDescription("the installed CLI's version, identity and capability report; --verify proves it"))

const readSpec = (path: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((e) => new CliInputError({ message: `${path}: cannot be read (${e.message})` }))
    )
    return yield* Either.mapLeft(
      HarnessSpecFormat.parse(text, PolicyFormat.formatOf(path)),
      (e) => new CliInputError({ message: `${path}: ${e.message}` })
    )
  })

/** A spec wider than its policy, or not its policy's, as bad input naming the field. */
const widerInput = (wider: PolicyNarrowing.SpecWiderThanPolicy) =>
  new CliInputError({
    message: `the spec is ${wider.reason === "wider" ? "wider than" : "not"} its policy: ${wider.message}`
  })

/**
 * Probe, compile and admit a spec (narrowing `policy`, when given); a refusal is printed with its report and exits 1,
 * a spec wider than its policy is bad input naming the field.
 */
const prepared = (
  name: Provider,
  spec: HarnessSpec.HarnessSpec,
  prompt: string,
  asJson: boolean,
  policy?: PolicySnapshot,
  verifyRuns?: VerifyRunStore.Service
) =>
  Effect.gen(function*() {
    if (spec.provider !== name) {
      return yield* new CliInputError({ message: `the spec is for ${spec.provider}, not ${name}` })
    }
    const store = HarnessStore.make()
    const adapter = yield* adapterOf(name, store)
    const home = providers[name].home(store)
    const input = {
      spec,
      prompt,
      home,
      verifications: yield* (verifyRuns ?? store).verifications,
      ...(policy === undefined ? {} : { policy })
    }
    return yield* HarnessAdapter.prepare(adapter, input).pipe(
      Effect.map((admitted) => ({ adapter, admitted })),
      Effect.catchTag("SpecWiderThanPolicy", (wider) => Effect.fail(widerInput(wider))),
      Effect.catchTag("RequiredControlUnmet", (refused) =>
        Effect.zipRight(
          asJson
            ? Console.log(JSON.stringify({ refused: refused.unmet, report: encodeReport(refused.report) }, null, 2))
            : Console.log(`${renderReport(refused.report)}\n\nrefused: ${refused.message}`),
          Effect.zipRight(setExitCode(1), Effect.succeed(undefined))
        ))
    )
  })

const planCommand = Command.make("plan", {
  provider,
  spec: specFile,
  json,
  prompt: Options.text("prompt").pipe(Options.withDefault(""), Options.withDescription("the prompt the plan carries")),
  policy: Options.file("policy", { exists: "yes" }).pipe(
    Options.optional,
    Options.withDescription("the policy declaration the spec narrows: a spec wider than it is refused")
  ),
  db: verifyDb
}, (options) =>
  withVerifyRuns(options.db, (verifyRuns) =>
    Effect.gen(function*() {
      const spec = yield* readSpec(options.spec)
      const snapshot = Option.isSome(options.policy) ? (yield* load(options.policy.value)).snapshot : undefined
      const ready = yield* prepared(options.provider, spec, options.prompt, options.json, snapshot, verifyRuns)
      if (ready === undefined) return
      const { plan, report } = ready.admitted
      const digest = yield* HarnessPlan.digest(plan)
      if (options.json) {
        return yield* Console.log(
          JSON.stringify({ plan: HarnessPlan.encode(plan), plan_digest: digest, report: encodeReport(report) }, null, 2)
        )
      }
      yield* Console.log(
        [
          renderReport(report),
          "",
          `plan sha256 ${digest}`,
          `argv: ${[plan.executable.path, ...plan.argv].map((a) => JSON.stringify(a)).join(" ")}`,
          `environment: ${
            plan.environment.map((e) => (e._tag === "secret"
              ? `${e.name}=<${e.ref}>`
              : e._tag === "set"
              ? `${e.name}=${e.value}`
              : `${e.name} (inherited)`)
            ).join(", ")
          }`,
          ...plan.config_files.map((file) => `--- ${file.path}\n${file.content}`),
          ...plan.secret_files.map((file) => `--- ${file.path} <${file.ref}, written at spawn>`)
        ].join("\n")
      )
    }))).pipe(
    Command.withDescription("the plan and report a spec compiles to; exit 1 when a required control is not enforced")
  )

/** A secret's value by its reference: `env:NAME` from writ's environment, `file:/path` from the file. */
const resolveSecrets = (plan: HarnessPlan.HarnessPlan) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const secrets = new Map<string, Redacted.Redacted<string>>()
    for (const ref of HarnessPlan.secretRefs(plan)) {
      if (ref === ClaudeCode.callbackRef || ref === Codex.callbackRef) continue
      const [scheme, rest] = [ref.slice(0, ref.indexOf(":")), ref.slice(ref.indexOf(":") + 1)]
      const value = scheme === "env"
        ? process.env[rest]
        : scheme === "file"
        ? yield* fs.readFileString(rest).pipe(Effect.map((t) => t.trim()), Effect.orElseSucceed(() => undefined))
        : undefined
      if (value === undefined) return yield* new CliInputError({ message: `secret ${ref} has no value here` })
      secrets.set(ref, Redacted.make(value))
    }
    return secrets
  })

type Ready = NonNullable<Effect.Effect.Success<ReturnType<typeof prepared>>>

const encodeObservation = Schema.encodeSync(ProviderObservation)

const line = (observation: ProviderObservation) => JSON.stringify(encodeObservation(observation))

/** writ's MCP server for a run whose spec asks for it: the demo's actions under the run's snapshot, and claude's permission prompts decided as its hook's. */
const writMcp = (
  spec: HarnessSpec.HarnessSpec,
  snapshot: PolicySnapshot | undefined,
  decide: HarnessAdapter.Launch["decide"]
) =>
  snapshot !== undefined && HarnessSpec.servesWritMcp(spec)
    ? HarnessMcp.make({
      actions: Demo.actions,
      snapshot,
      principal: "harness",
      decide,
      permissionTool: ClaudeCode.permissionTool
    })
    : Effect.succeed(undefined)

const encodeAttached = Schema.encodeSync(HarnessRun.Attached)

/** What a decision was decided in, as `--json` prints it: the run's scope and the digests of its plan and report. */
const decidedIn = (run: HarnessRun.Attached | undefined) =>
  run === undefined
    ? null
    : { scope: encodeAttached(run).scope, plan_digest: run.plan_digest, report_digest: run.report_digest }

/**
 * Spawn under the admitted plan, attached to `attached`'s scope, with `decide` as the blocking callback; print the
 * attachment first, then the observations, the exit and writ's decisions (`--json`: the attachment whole as the first
 * line and the decisions, each with the run it was decided in, as the last).
 */
const spawnPrinted = (
  ready: Ready,
  attached: HarnessRun.Attached,
  asJson: boolean,
  decide: HarnessAdapter.Launch["decide"],
  serving: Effect.Effect<HarnessAdapter.Launch["mcp"] | undefined, never, Digest.Digest>
) =>
  Effect.gen(function*() {
    const secrets = yield* resolveSecrets(ready.admitted.plan)
    const mcp = yield* serving
    const scope = `${attached.scope._tag} ${HarnessRun.scopeId(attached)}`
    yield* Console.error(`writ: ${scope}: plan sha256 ${attached.plan_digest}, report sha256 ${attached.report_digest}`)
    if (asJson) yield* Console.log(JSON.stringify({ attached: encodeAttached(attached) }))
    const status = yield* StatusLine.make(ready.admitted.plan.provider)
    // Each observation is printed as the stream yields it; the exit comes last, once the process has ended.
    const print = (observation: ProviderObservation) => status.print(observation, line(observation))
    const result = yield* Effect.scoped(Effect.gen(function*() {
      yield* status.live
      const result = yield* ready.adapter.spawn(ready.admitted, {
        secrets,
        scope: attached.scope,
        decide: status.decide(decide),
        observe: print,
        ...(mcp === undefined ? {} : { mcp })
      })
      yield* print(result.observations.at(-1)!)
      return result
    }))
    for (const { call, decision } of result.decisions) {
      yield* Console.error(
        `writ ${decision.decision} ${call.tool}${decision.decision === "deny" ? `: ${decision.reason}` : ""}`
      )
    }
    if (asJson) {
      const decisions = result.decisions.map(({ call, decision, run }) => ({
        tool: call.tool,
        call_id: call.call_id,
        ...decision,
        decided_in: decidedIn(run)
      }))
      yield* Console.log(JSON.stringify({ decisions }))
    }
    const exit = result.observations.at(-1)
    if (exit?._tag !== "exit" || exit.code !== 0) yield* setExitCode(1)
    return result
  })

/** The spec's snapshot from the database's policy store, after `--policy FILE` (if given) is stored and activated. */
const storedPolicy = (spec: HarnessSpec.HarnessSpec, file: Option.Option<string>) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    if (Option.isSome(file)) {
      const { snapshot } = yield* load(file.value)
      yield* store.put(snapshot).pipe(Effect.mapError((e) => new CliInputError({ message: `--policy: ${e.message}` })))
      const stored = yield* Effect.orDie(store.get(snapshot.policy_id, snapshot.version))
      if (stored.release_state === "staged") {
        yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "writ-harness", yield* Time.now))
      }
    }
    if (spec.policy === undefined) {
      return yield* new CliInputError({
        message: "--db runs the governed profile: the spec must name its policy (policy: {policy_id, version})"
      })
    }
    const { policy_id, version } = spec.policy
    const snapshot = yield* store.get(policy_id, version).pipe(
      Effect.mapError(() =>
        new CliInputError({ message: `the database holds no policy ${policy_id}@${version} (give --policy FILE)` })
      )
    )
    if (snapshot.release_state !== "active") {
      return yield* new CliInputError({ message: `policy ${policy_id}@${version} is ${snapshot.release_state}` })
    }
    return snapshot
  })

/** How a spawn ended, as the governed run's terminal record states it. */
const endOf = (
  result: Either.Either<HarnessAdapter.RunResult, HarnessAdapter.HarnessError | CliInputError>
): GovernedRun.End => {
  if (Either.isLeft(result)) return { _tag: "spawn_failed", detail: result.left.message }
  const exit = result.right.observations.at(-1)
  return exit?._tag === "exit"
    ? { _tag: "exited", code: exit.code, signal: exit.signal, killed: exit.killed_by_harness }
    : { _tag: "spawn_failed", detail: "the run ended without an exit" }
}

/** The Run's terminal outcome for how the run ended, citing the run's terminal record. */
const runTerminalOf = (end: GovernedRun.End, terminal: AppendReceipt) => {
  const evidence = [new EvidenceRef({ chain_id: terminal.chain_id, record_id: terminal.record_id })]
  const [status, quality, reason_code] = end._tag === "spawn_failed"
    ? ["failed" as const, "indeterminate" as const, "harness.spawn_failed"]
    : end.killed
    ? ["timed_out" as const, "partial" as const, "harness.deadline"]
    : end.code === 0
    ? ["completed" as const, "full" as const, "harness.exit_0"]
    : ["failed" as const, "indeterminate" as const, `harness.exit_${end.code ?? end.signal ?? "unknown"}`]
  return new RunTerminal({ status, acceptance: "not_applicable", quality, reason_code, evidence, cost: null })
}

/** The invocation's admission: the spec is for this provider and only narrows its policy (bad input otherwise). */
const admission = (name: Provider, spec: HarnessSpec.HarnessSpec, policy: PolicySnapshot) =>
  spec.provider !== name
    ? Effect.fail(new CliInputError({ message: `the spec is for ${spec.provider}, not ${name}` }))
    : Effect.mapError(PolicyNarrowing.check(spec, policy), widerInput)

/** The Run's terminal outcome for a run that ended before spawn (no evidence: its operation never started). */
const unspawned = (reason_code: string) =>
  new RunTerminal({
    status: "failed",
    acceptance: "not_applicable",
    quality: "indeterminate",
    reason_code,
    evidence: [],
    cost: null
  })

/**
 * The governed profile: the run is one governed operation on a new task boundary's chain (started with the plan's and
 * report's digests, one gate record per callback decision, one terminal), closed and verified after, and a durable
 * Run that carries the plan and report (attached before spawn) and, after, its observations (their own table, keyed
 * by the operation id, never in the chain). writ's MCP server, when the spec serves it, runs each tool call through
 * the governed executor on the same boundary and in the same Run.
 */
const runGoverned = (
  options: { readonly provider: Provider; readonly prompt: string; readonly json: boolean },
  spec: HarnessSpec.HarnessSpec,
  file: Option.Option<string>
) =>
  Effect.gen(function*() {
    const snapshot = yield* storedPolicy(spec, file)
    // Admission first: a spec for another provider, or wider than its policy, is refused and has no Run.
    yield* admission(options.provider, spec, snapshot)
    // Admitted, the Run exists before the plan is compiled, so a run refused before spawn has one too.
    const runs = yield* RunStore
    const durable = yield* runs.createRun({
      policy: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
    })
    const ready = yield* prepared(options.provider, spec, options.prompt, options.json, snapshot, yield* VerifyRunStore)
      .pipe(
        Effect.tapError(() => runs.finish(durable.run_id, unspawned("harness.probe_failed")))
      )
    if (ready === undefined) {
      yield* runs.finish(durable.run_id, unspawned("harness.required_control_unmet"))
      return
    }
    const { plan, report } = ready.admitted
    const attached = yield* HarnessRun.attach(ready.admitted, DurableRun.make({ run_id: durable.run_id }))
    const { plan_digest, report_digest } = attached
    const boundary = yield* openBoundary(snapshot)
    const writer = yield* EvidenceWriter
    const run = yield* GovernedRun.start({
      boundary,
      snapshot,
      plan,
      plan_digest,
      report,
      report_digest,
      prompt: options.prompt,
      principal: "harness",
      run_id: durable.run_id
    })
    yield* (yield* HarnessRunStore).attach(
      new HarnessAttachment({
        run_id: durable.run_id,
        operation_id: run.operation.operation_id,
        chain_id: boundary.chain_id,
        plan,
        plan_digest,
        report,
        report_digest,
        attached_at: yield* Time.now
      })
    )
    yield* runs.transition(durable.run_id, "preparing", "queued")
    yield* runs.transition(durable.run_id, "queued", "running")
    // The whole context (the stores' optional services too: a governed executor binds the Run through them).
    const services = yield* Effect.context<
      FileSystem.FileSystem | Exclude<Effect.Effect.Context<ReturnType<typeof HarnessMcp.makeGoverned>>, Scope.Scope>
    >()
    const mcp = HarnessSpec.servesWritMcp(spec)
      ? HarnessMcp.makeGoverned({
        actions: Demo.actions,
        snapshot,
        principal: "harness",
        decide: run.decide,
        permissionTool: ClaudeCode.permissionTool,
        boundary,
        run_id: durable.run_id
      })
      : Effect.succeed(undefined)
    const [spawned, terminal] = yield* writer.track(
      boundary.chain_id,
      Effect.gen(function*() {
        const serving = yield* mcp
        const result = yield* Effect.either(
          spawnPrinted(ready, attached, options.json, run.decide, Effect.succeed(serving))
        )
        return [result, yield* run.end(endOf(result))] as const
      }).pipe(Effect.scoped, Effect.provide(services))
    )
    const observations = Either.isRight(spawned) ? spawned.right.observations : []
    yield* (yield* ObservationLog).append(run.operation.operation_id, observations)
    // The Run's attempts (the run's operation, writ's MCP calls) are projected from the chain before the Run ends; a
    // projection that fails leaves them to recovery, and the Run still ends as the run did.
    const projected = yield* Effect.either(EvidenceProjector.drain())
    if (Either.isLeft(projected)) yield* Console.error(`the Run's projection is pending: ${projected.left.message}`)
    yield* runs.finish(durable.run_id, runTerminalOf(endOf(spawned), terminal))
    const { closed, verification } = yield* Ingress.closeAndCertify(boundary, false)
    yield* Console.error(
      `evidence: chain ${boundary.chain_id}, ${closed.sequence + 1} records, verification ${
        verification.valid ? "valid" : `FAILED (${verification.failure_code})`
      }; operation ${run.operation.operation_id}; run ${durable.run_id}; ${observations.length} observations kept apart`
    )
    if (!verification.valid) yield* setExitCode(1)
    if (Either.isLeft(spawned)) return yield* spawned.left
  })

const runCommand = Command.make("run", {
  provider,
  spec: specFile,
  json,
  policy: Options.file("policy", { exists: "yes" }).pipe(
    Options.optional,
    Options.withDescription("the policy declaration the blocking callback decides by (required with tools.callback)")
  ),
  db: Options.file("db").pipe(
    Options.optional,
    Options.withDescription(
      "a writ SQLite file (created if missing): the governed profile, the run one operation on a new evidence chain"
    )
  ),
  prompt: Args.text({ name: "PROMPT" })
}, (options) =>
  Effect.gen(function*() {
    const spec = yield* readSpec(options.spec)
    if (Option.isSome(options.db)) {
      const filename = options.db.value
      yield* checkDatabase(filename, "new_or_existing")
      return yield* runGoverned(options, spec, options.policy).pipe(
        Effect.provide(
          Layer.mergeAll(SqlObservationLog.layer, SqlHarnessRunStore.layer, SqlVerifyRunStore.layer).pipe(
            Layer.provideMerge(Embedded.layerStores({ filename }))
          )
        ),
        onDatabase(filename)
      )
    }
    const snapshot = Option.isSome(options.policy) ? (yield* load(options.policy.value)).snapshot : undefined
    if (spec.tools.callback && snapshot === undefined) {
      return yield* new CliInputError({ message: "tools.callback needs --policy FILE: writ decides each call by it" })
    }
    if (HarnessSpec.servesWritMcp(spec) && snapshot === undefined) {
      return yield* new CliInputError({
        message: "tools.permission_prompt and tools.writ_only need --policy FILE: writ's MCP server runs by it"
      })
    }
    if (
      snapshot !== undefined && spec.policy !== undefined &&
      (spec.policy.policy_id !== snapshot.policy_id || spec.policy.version !== snapshot.version)
    ) {
      return yield* new CliInputError({
        message: `--policy is ${snapshot.policy_id}@${snapshot.version}, not the spec's`
      })
    }
    const ready = yield* prepared(options.provider, spec, options.prompt, options.json, snapshot)
    if (ready === undefined) return
    const decide = snapshot === undefined
      ? () => Effect.succeed<HarnessAdapter.CallbackDecision>({ decision: "deny", reason: "no policy" })
      : HarnessPolicy.decider(snapshot, "harness")
    // The minimal profile: the run's scope is an ephemeral operation of its own, its plan and report attached to it.
    const scope = EphemeralOperation.make({
      scope_id: yield* IdGenerator.uuid.pipe(Effect.provide(IdGenerator.layerCrypto))
    })
    const attached = yield* HarnessRun.attach(ready.admitted, scope)
    yield* spawnPrinted(ready, attached, options.json, decide, writMcp(spec, snapshot, decide))
  })).pipe(
    Command.withDescription(
      "spawn the CLI under the compiled plan; print its observations live (JSON lines); --db: governed, with evidence"
    )
  )

/** `writ harness`: native coding agents under a compiled, verified plan. */
export const command = Command.make("harness").pipe(
  Command.withDescription("native coding-agent CLIs under a plan writ compiles, with a report writ verified"),
  Command.withSubcommands([probeCommand, planCommand, runCommand])
)
