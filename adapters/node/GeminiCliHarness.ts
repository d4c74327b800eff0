/**
 * The gemini-cli HarnessAdapter on Node: probe resolves the `@google/gemini-cli` bundle directory, asks its
 * `--version` (once per identity) and digests the whole package tree (cached by path, inode, size and mtime); compile
 * is `core/harness/GeminiCli.ts` with this Node running the CLI and its hook; spawn writes the plan's files into a
 * fresh config home, serves the blocking callback on 127.0.0.1 with a per-run token, runs `node <bundle entry> ...`
 * through the HarnessProcess port with exactly the plan's environment (gemini relaunches itself as a child, so the
 * deadline signals the whole group), and parses its stream into redacted observations. Runtimes: Node.
 */
import { Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { chmod, mkdir, readdir, realpath, rm, writeFile } from "node:fs/promises"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import type { Sha256Hex } from "../../core/base/Digest.ts"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as GeminiCli from "../../core/harness/GeminiCli.ts"
import { makeParser } from "../../core/harness/GeminiCliStream.ts"
import type { Admitted, CallbackRecord, Launch, RunResult } from "../../core/harness/HarnessAdapter.ts"
import { HarnessAdapter, HarnessError, ProbeResult } from "../../core/harness/HarnessAdapter.ts"
import type { HarnessPlan } from "../../core/harness/HarnessPlan.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import { Exit, type ProviderObservation, redact } from "../../core/harness/ProviderObservation.ts"
import * as HarnessStore from "./HarnessStore.ts"
import * as GeminiCliHook from "./internal/geminiCliHook.ts"
import { serve } from "./internal/harnessCallback.ts"
import * as NodeHarnessProcess from "./NodeHarnessProcess.ts"

/** How the adapter finds its package and where it keeps its identity and verify files. */
export interface Options {
  /** The `@google/gemini-cli` package directory; default: the one installed beside writ. */
  readonly packageDir?: string
  readonly store?: HarnessStore.HarnessStore
  /** Keep the config home after the run (for inspection); default: removed. */
  readonly keepHome?: boolean
}

const spawnFailed = (detail: string) => (cause: unknown) =>
  new HarnessError({ reason: "spawn_failed", detail: `${detail}: ${cause instanceof Error ? cause.message : cause}` })

const installed = () => {
  try {
    return dirname(createRequire(import.meta.url).resolve("@google/gemini-cli/package.json"))
  } catch {
    return undefined
  }
}

/** The bundle's entry script inside the package directory. */
const entryOf = (packageDir: string) => join(packageDir, "bundle", "gemini.js")

const probeWith = (
  options: Options,
  store: HarnessStore.HarnessStore,
  runner: HarnessProcess.Service,
  versions: Map<Sha256Hex, string | null>
) =>
  Effect.gen(function*() {
    const found = options.packageDir ?? installed()
    if (found === undefined || !existsSync(entryOf(found))) {
      return new ProbeResult({ provider: "gemini-cli", executable: null, version: null, notes: ["no gemini found"] })
    }
    const dir = yield* Effect.tryPromise({
      try: () => realpath(found),
      catch: (e) => new HarnessError({ reason: "probe_failed", detail: String(e) })
    })
    const digest = yield* store.treeIdentity(dir)
    const lines: Array<string> = []
    let said = ""
    if (!versions.has(digest)) {
      // gemini writes its project registry into HOME even for --version: a throwaway one.
      const home = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "writ-gemini-probe-"))),
        (home) => Effect.sync(() => rmSync(home, { recursive: true, force: true }))
      )
      const ran = yield* runner.run({
        command: process.execPath,
        args: [entryOf(dir), "--version"],
        env: { PATH: "/usr/bin:/bin", HOME: home },
        cwd: home,
        deadlineMillis: 60_000,
        graceMillis: 2_000,
        outputBytes: 64 * 1024,
        onLine: (line) => Effect.sync(() => lines.push(line))
      }).pipe(Effect.mapError((e) => new HarnessError({ reason: "probe_failed", detail: e.detail })))
      const version = ran.code === 0 ? /^(\d+\.\d+\.\d+)\b/.exec(lines[0] ?? "")?.[1] ?? null : null
      said = lines[0] ?? ran.stderr.slice(0, 200)
      versions.set(digest, version)
    }
    const version = versions.get(digest) ?? null
    return new ProbeResult({
      provider: "gemini-cli",
      executable: new ExecutableIdentity({ path: entryOf(dir), digest }),
      version,
      notes: [
        `run by Node ${process.versions.node} (${process.execPath}); the digest covers the whole package tree`,
        ...(version === null ? [`--version said: ${said}`] : [])
      ]
    })
  }).pipe(Effect.scoped)

// --- spawn: the fresh home, the secrets, the callback, the process, teardown (home removed last) ---

const freshHome = (plan: HarnessPlan, keep: boolean) =>
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

const environmentOf = (plan: HarnessPlan, launch: Launch) =>
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

/** Serve the callback and write its URL and token where the plan's hook reads them; other secret files as given. */
const secretFiles = (plan: HarnessPlan, launch: Launch) =>
  Effect.gen(function*() {
    const records: Array<ReadonlyArray<CallbackRecord>> = []
    const tokens: Array<string> = []
    for (const file of plan.secret_files) {
      let content: string
      if (file.ref === GeminiCli.callbackRef) {
        const token = randomBytes(32).toString("hex")
        const server = yield* serve(token, launch.decide)
        records.push(server.decisions)
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

const spawnWith = (options: Options, runner: HarnessProcess.Service) => (admitted: Admitted, launch: Launch) =>
  Effect.scoped(Effect.gen(function*() {
    const { plan } = admitted
    yield* freshHome(plan, options.keepHome === true)
    const { env, secrets } = yield* environmentOf(plan, launch)
    const callback = yield* secretFiles(plan, launch)
    const hidden = [...secrets, ...callback.tokens]
    const parser = makeParser(hidden)
    const observations: Array<ProviderObservation> = []
    const ended = yield* runner.run({
      command: process.execPath,
      args: [plan.executable.path, ...plan.argv],
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
    observations.push(
      new Exit({ plane: "observation", code: ended.code, signal: ended.signal, killed_by_harness: ended.killed })
    )
    return {
      observations,
      decisions: [...callback.decisions()],
      stderr: redact(ended.stderr, hidden)
    } satisfies RunResult
  }))

/** The gemini-cli adapter over a process runner. */
export const make = (options: Options = {}) =>
  Effect.map(HarnessProcess, (runner): HarnessAdapter.Service => {
    const store = options.store ?? HarnessStore.make()
    const versions = new Map<Sha256Hex, string | null>()
    return {
      provider: "gemini-cli",
      probe: probeWith(options, store, runner, versions),
      compile: (input) => GeminiCli.compile(input, { node: process.execPath, hookScript: GeminiCliHook.script }),
      spawn: spawnWith(options, runner)
    }
  })

/** The gemini-cli HarnessAdapter on Node's child processes. */
export const layer = (options: Options = {}): Layer.Layer<HarnessAdapter> =>
  Layer.effect(HarnessAdapter, make(options)).pipe(Layer.provide(NodeHarnessProcess.layer))
