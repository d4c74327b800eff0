/**
 * The claude-code HarnessAdapter on Node: probe resolves the `claude` executable, asks its `--version` and digests
 * the binary (cached by path, inode, size and mtime); compile is `core/harness/ClaudeCode.ts` with this Node running
 * the hook; spawn writes the plan's files into a fresh config home, serves the blocking callback on 127.0.0.1 with a
 * per-run token, runs the CLI through the HarnessProcess port with exactly the plan's environment, and parses its
 * stream into redacted observations. Runtimes: Node.
 */
import { Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { chmod, mkdir, readdir, realpath, rm, writeFile } from "node:fs/promises"
import { createRequire } from "node:module"
import { delimiter, dirname, join } from "node:path"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as ClaudeCode from "../../core/harness/ClaudeCode.ts"
import { makeParser } from "../../core/harness/ClaudeCodeStream.ts"
import type { Admitted, CallbackRecord, Launch, RunResult } from "../../core/harness/HarnessAdapter.ts"
import { HarnessAdapter, HarnessError, ProbeResult } from "../../core/harness/HarnessAdapter.ts"
import type { HarnessPlan } from "../../core/harness/HarnessPlan.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import { Exit, type ProviderObservation, redact } from "../../core/harness/ProviderObservation.ts"
import * as HarnessStore from "./HarnessStore.ts"
import * as ClaudeCodeHook from "./internal/claudeCodeHook.ts"
import { serve } from "./internal/harnessCallback.ts"
import * as NodeHarnessProcess from "./NodeHarnessProcess.ts"

/** How the adapter finds its executable and where it keeps its identity and verify files. */
export interface Options {
  /** The `claude` executable; default: the one installed beside writ, else the first `claude` on PATH. */
  readonly executable?: string
  readonly store?: HarnessStore.HarnessStore
  /** Keep the config home after the run (for inspection); default: removed. */
  readonly keepHome?: boolean
}

const spawnFailed = (detail: string) => (cause: unknown) =>
  new HarnessError({ reason: "spawn_failed", detail: `${detail}: ${cause instanceof Error ? cause.message : cause}` })

const installed = () => {
  try {
    const manifest = createRequire(import.meta.url).resolve("@anthropic-ai/claude-code/package.json")
    return join(dirname(manifest), "bin", "claude.exe")
  } catch {
    return undefined
  }
}

const onPath = () =>
  (process.env.PATH ?? "").split(delimiter).map((dir) => join(dir, "claude")).find((path) => existsSync(path))

/** The Node version range a package's manifest next to the binary declares, when there is one. */
const declaredNode = (binary: string): string | undefined => {
  try {
    const manifest = JSON.parse(readFileSync(join(dirname(binary), "..", "package.json"), "utf-8")) as {
      readonly engines?: { readonly node?: string }
    }
    return manifest.engines?.node
  } catch {
    return undefined
  }
}

const engineNote = (binary: string): ReadonlyArray<string> => {
  const range = declaredNode(binary)
  const wanted = range === undefined ? undefined : /(\d+)/.exec(range)?.[1]
  const running = Number(process.versions.node.split(".")[0])
  if (range === undefined || wanted === undefined || running >= Number(wanted)) return []
  return [
    `the package declares node ${range} while writ runs on Node ${process.versions.node}: the CLI is a native ` +
    "binary, but its hook runs on this Node"
  ]
}

const probeWith = (options: Options, store: HarnessStore.HarnessStore, runner: HarnessProcess.Service) =>
  Effect.gen(function*() {
    const found = options.executable ?? installed() ?? onPath()
    if (found === undefined || !existsSync(found)) {
      return new ProbeResult({ provider: "claude-code", executable: null, version: null, notes: ["no claude found"] })
    }
    const path = yield* Effect.tryPromise({
      try: () => realpath(found),
      catch: (e) => new HarnessError({ reason: "probe_failed", detail: String(e) })
    })
    const lines: Array<string> = []
    const ran = yield* runner.run({
      command: path,
      args: ["--version"],
      env: { PATH: "/usr/bin:/bin", HOME: store.dir, DISABLE_AUTOUPDATER: "1" },
      cwd: "/",
      deadlineMillis: 30_000,
      graceMillis: 2_000,
      outputBytes: 64 * 1024,
      onLine: (line) => Effect.sync(() => lines.push(line))
    }).pipe(Effect.mapError((e) => new HarnessError({ reason: "probe_failed", detail: e.detail })))
    const version = ran.code === 0 ? /^(\d+\.\d+\.\d+)\b/.exec(lines[0] ?? "")?.[1] ?? null : null
    const digest = yield* store.identity(path)
    return new ProbeResult({
      provider: "claude-code",
      executable: new ExecutableIdentity({ path, digest }),
      version,
      notes: [
        ...(version === null ? [`--version said: ${lines[0] ?? ran.stderr.slice(0, 200)}`] : []),
        ...engineNote(path)
      ]
    })
  })

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

/** Serve the callback and write its URL and token where the plan's hook reads them. */
const callbackFiles = (plan: HarnessPlan, launch: Launch) =>
  Effect.gen(function*() {
    const records: Array<ReadonlyArray<CallbackRecord>> = []
    const tokens: Array<string> = []
    for (const file of plan.secret_files) {
      if (file.ref !== ClaudeCode.callbackRef) {
        const value = yield* secretOf(launch, file.ref)
        tokens.push(value)
        yield* Effect.tryPromise({
          try: async () => {
            await mkdir(dirname(file.path), { recursive: true, mode: 0o700 })
            await writeFile(file.path, value, { mode: 0o600 })
          },
          catch: spawnFailed(file.path)
        })
        continue
      }
      const token = randomBytes(32).toString("hex")
      const server = yield* serve(token, launch.decide)
      records.push(server.decisions)
      tokens.push(token)
      yield* Effect.tryPromise({
        try: async () => {
          await writeFile(file.path, JSON.stringify({ url: server.url, token }), { mode: 0o600 })
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
    const callback = yield* callbackFiles(plan, launch)
    const hidden = [...secrets, ...callback.tokens]
    const parser = makeParser(hidden)
    const observations: Array<ProviderObservation> = []
    const ended = yield* runner.run({
      command: plan.executable.path,
      args: plan.argv,
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

/** The claude-code adapter over a process runner. */
export const make = (options: Options = {}) =>
  Effect.map(HarnessProcess, (runner): HarnessAdapter.Service => {
    const store = options.store ?? HarnessStore.make()
    return {
      provider: "claude-code",
      probe: probeWith(options, store, runner),
      compile: (input) => ClaudeCode.compile(input, { node: process.execPath, hookScript: ClaudeCodeHook.script }),
      spawn: spawnWith(options, runner)
    }
  })

/** The claude-code HarnessAdapter on Node's child processes. */
export const layer = (options: Options = {}): Layer.Layer<HarnessAdapter> =>
  Layer.effect(HarnessAdapter, make(options)).pipe(Layer.provide(NodeHarnessProcess.layer))
