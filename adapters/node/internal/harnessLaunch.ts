/**
 * What spawning any harness CLI under a plan takes on Node: the fresh config home holding exactly the plan's files
 * (removed after unless kept), the plan's whole environment with its secrets resolved, the callback served with a
 * per-run token written where the plan's hook reads it, and the run itself with its stream parsed into observations.
 */
import { Effect, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { chmod, mkdir, readdir, rm, writeFile } from "node:fs/promises"
import { dirname } from "node:path"
import { Digest } from "../../../core/base/Digest.ts"
import * as IdGenerator from "../../../core/base/IdGenerator.ts"
import { EphemeralOperation } from "../../../core/execution/ExecutionScope.ts"
import type { CapabilityReport } from "../../../core/harness/CapabilityReport.ts"
import type { CallbackRecord, Launch, RunResult } from "../../../core/harness/HarnessAdapter.ts"
import { HarnessError } from "../../../core/harness/HarnessAdapter.ts"
import type { HarnessPlan } from "../../../core/harness/HarnessPlan.ts"
import type { HarnessProcess } from "../../../core/harness/HarnessProcess.ts"
import * as HarnessRun from "../../../core/harness/HarnessRun.ts"
import { Exit, type ProviderObservation, redact } from "../../../core/harness/ProviderObservation.ts"
import * as NodeDigest from "../NodeDigest.ts"
import { serve } from "./harnessCallback.ts"

/** A spawn failure naming what failed. */
export const spawnFailed = (detail: string) => (cause: unknown) =>
  new HarnessError({ reason: "spawn_failed", detail: `${detail}: ${cause instanceof Error ? cause.message : cause}` })

/** The plan's config home, new or empty, holding the plan's files (mode 0600 in 0700 directories) for the scope. */
export const freshHome = (plan: HarnessPlan, keep: boolean) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        await mkdir(plan.home, { recursive: true, mode: 0o700 })
        if ((await readdir(plan.home)).length > 0) throw new Error(`${plan.home} is not empty`)
        for (const file of plan.config_files) {
          await mkdir(dirname(file.path), { recursive: true, mode: 0o700 })
          await writeFile(file.path, file.content, { mode: 0o600 })
        }
      },
      catch: spawnFailed("cannot prepare the config home")
    }),
    () => (keep ? Effect.void : Effect.promise(() => rm(plan.home, { recursive: true, force: true })))
  )

const secretOf = (launch: Launch, ref: string) => {
  const value = launch.secrets.get(ref)
  return value === undefined
    ? Effect.fail(new HarnessError({ reason: "secret_unresolved", detail: `no value for ${ref}` }))
    : Effect.succeed(Redacted.value(value))
}

/** The plan's whole environment (inherited names from writ's own), and the secret values in it. */
export const environmentOf = (plan: HarnessPlan, launch: Launch) =>
  Effect.gen(function*() {
    const env: Record<string, string> = {}
    const secrets: Array<string> = []
    for (const entry of plan.environment) {
      if (entry._tag === "set") env[entry.name] = entry.value
      else if (entry._tag === "inherit") {
        const value = process.env[entry.name]
        if (value !== undefined) env[entry.name] = value
      } else {
        const value = yield* secretOf(launch, entry.ref)
        env[entry.name] = value
        secrets.push(value)
      }
    }
    return { env, secrets }
  })

/** Write the plan's secret files; the callback's (by `callbackRef`) gets a served callback and a fresh token. */
export const secretFiles = (plan: HarnessPlan, launch: Launch, callbackRef: string) =>
  Effect.gen(function*() {
    const records: Array<ReadonlyArray<CallbackRecord>> = []
    const tokens: Array<string> = []
    for (const file of plan.secret_files) {
      let content: string
      if (file.ref === callbackRef) {
        const token = randomBytes(32).toString("hex")
        const server = yield* serve(token, launch.decide, launch.mcp?.handle)
        records.push(server.decisions)
        if (launch.mcp !== undefined) records.push(launch.mcp.decisions)
        tokens.push(token)
        content = JSON.stringify({ url: server.url, token })
      } else {
        content = yield* secretOf(launch, file.ref)
        tokens.push(content)
      }
      yield* Effect.tryPromise({
        try: async () => {
          await mkdir(dirname(file.path), { recursive: true, mode: 0o700 })
          await writeFile(file.path, content, { mode: 0o600 })
          await chmod(dirname(file.path), 0o700)
        },
        catch: spawnFailed(file.path)
      })
    }
    return { decisions: () => records.flat(), tokens }
  })

/** How one provider's CLI is run under its plan: the callback's secret ref, the command, and its stream parsing. */
export interface RunSpec {
  readonly plan: HarnessPlan
  readonly report: CapabilityReport
  readonly launch: Launch
  readonly keepHome: boolean
  readonly callbackRef: string
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly makeParser: (hidden: ReadonlyArray<string>) => {
    readonly line: (line: string) => ReadonlyArray<ProviderObservation>
  }
  /** Observations read from the ended run's stderr, after the stream's and before the exit. */
  readonly stderrObservations?: (stderr: string, hidden: ReadonlyArray<string>) => ReadonlyArray<ProviderObservation>
}

/** The plan and report attached to the launch's scope, else to a fresh ephemeral operation. */
const attachment = (spec: RunSpec) =>
  Effect.gen(function*() {
    const scope = spec.launch.scope ?? EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    return yield* HarnessRun.attach(spec, scope)
  }).pipe(
    Effect.provideService(Digest, NodeDigest.make),
    Effect.provide(IdGenerator.layerCrypto),
    Effect.mapError(spawnFailed("cannot digest the plan and report"))
  )

const runAttached = (runner: HarnessProcess.Service, spec: RunSpec, attached: HarnessRun.Attached) =>
  Effect.scoped(Effect.gen(function*() {
    const { launch, plan } = spec
    yield* freshHome(plan, spec.keepHome)
    const { env, secrets } = yield* environmentOf(plan, launch)
    const callback = yield* secretFiles(plan, launch, spec.callbackRef)
    const hidden = [...secrets, ...callback.tokens]
    const parser = spec.makeParser(hidden)
    const observations: Array<ProviderObservation> = []
    const ended = yield* runner.run({
      command: spec.command,
      args: spec.args,
      env,
      cwd: plan.workspace,
      deadlineMillis: plan.wall_clock_seconds * 1000,
      graceMillis: 5_000,
      outputBytes: 32 * 1024 * 1024,
      onLine: (line) => {
        const seen = parser.line(line)
        observations.push(...seen)
        return launch.observe === undefined ? Effect.void : Effect.forEach(seen, launch.observe, { discard: true })
      }
    }).pipe(Effect.mapError((e) => new HarnessError({ reason: "spawn_failed", detail: e.detail })))
    const late = spec.stderrObservations?.(ended.stderr, hidden) ?? []
    if (launch.observe !== undefined) yield* Effect.forEach(late, launch.observe, { discard: true })
    observations.push(
      ...late,
      new Exit({ plane: "observation", code: ended.code, signal: ended.signal, killed_by_harness: ended.killed })
    )
    return {
      run: attached,
      observations,
      decisions: [...callback.decisions()],
      stderr: redact(ended.stderr, hidden)
    } satisfies RunResult
  }))

/**
 * Attach the plan and report to the run's scope, then, inside it, run the CLI in its fresh home with the plan's
 * environment and callback; secrets and tokens redacted throughout.
 */
export const runPlan = (runner: HarnessProcess.Service, spec: RunSpec) =>
  Effect.flatMap(attachment(spec), (attached) => HarnessRun.within(attached)(runAttached(runner, spec, attached)))

/** How to ask a provider's executable its version: the command, its environment and the line's pattern. */
export interface VersionQuestion {
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly env: Record<string, string>
  readonly cwd: string
  readonly deadlineMillis: number
  /** Matches the version's first line, the version in its first group. */
  readonly pattern: RegExp
}

/**
 * Ask an executable `--version`, bounded: what it said first (its first line, else its stderr's start) and the
 * version read there, or null when it did not exit 0 or said none.
 */
export const askVersion = (runner: HarnessProcess.Service, question: VersionQuestion) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const ran = yield* runner.run({
      command: question.command,
      args: question.args,
      env: question.env,
      cwd: question.cwd,
      deadlineMillis: question.deadlineMillis,
      graceMillis: 2_000,
      outputBytes: 64 * 1024,
      onLine: (line) => Effect.sync(() => lines.push(line))
    }).pipe(Effect.mapError((e) => new HarnessError({ reason: "probe_failed", detail: e.detail })))
    const said = lines[0] ?? ran.stderr.slice(0, 200)
    return { said, version: ran.code === 0 ? question.pattern.exec(lines[0] ?? "")?.[1] ?? null : null }
  })
