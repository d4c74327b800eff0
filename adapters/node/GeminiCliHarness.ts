/**
 * The gemini-cli HarnessAdapter on Node: probe resolves the `@google/gemini-cli` bundle directory, digests the whole
 * package tree and asks its `--version` (both once per path, inode, size and newest mtime, kept in the harness store); compile
 * is `core/harness/GeminiCli.ts` with this Node running the CLI and its hook; spawn writes the plan's files into a
 * fresh config home, serves the blocking callback on 127.0.0.1 with a per-run token, runs `node <bundle entry> ...`
 * through the HarnessProcess port with exactly the plan's environment (gemini relaunches itself as a child, so the
 * deadline signals the whole group), and parses its stream into redacted observations. Runtimes: Node.
 */
import { Effect, Layer } from "effect"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { realpath } from "node:fs/promises"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as GeminiCli from "../../core/harness/GeminiCli.ts"
import { makeParser } from "../../core/harness/GeminiCliStream.ts"
import type { Admitted, Launch } from "../../core/harness/HarnessAdapter.ts"
import { HarnessAdapter, HarnessError, ProbeResult } from "../../core/harness/HarnessAdapter.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import * as HarnessStore from "./HarnessStore.ts"
import * as GeminiCliHook from "./internal/geminiCliHook.ts"
import { askVersion, runPlan } from "./internal/harnessLaunch.ts"
import * as McpBridge from "./internal/mcpBridge.ts"
import * as NodeHarnessProcess from "./NodeHarnessProcess.ts"

/** How the adapter finds its package and where it keeps its identity and verify files. */
export interface Options {
  /** The `@google/gemini-cli` package directory; default: the one installed beside writ. */
  readonly packageDir?: string
  readonly store?: HarnessStore.HarnessStore
  /** Keep the config home after the run (for inspection); default: removed. */
  readonly keepHome?: boolean
}

const installed = () => {
  try {
    return dirname(createRequire(import.meta.url).resolve("@google/gemini-cli/package.json"))
  } catch {
    return undefined
  }
}

/** The bundle's entry script inside the package directory. */
const entryOf = (packageDir: string) => join(packageDir, "bundle", "gemini.js")

const probeWith = (options: Options, store: HarnessStore.HarnessStore, runner: HarnessProcess.Service) =>
  Effect.gen(function*() {
    const found = options.packageDir ?? installed()
    if (found === undefined || !existsSync(entryOf(found))) {
      return new ProbeResult({ provider: "gemini-cli", executable: null, version: null, notes: ["no gemini found"] })
    }
    const dir = yield* Effect.tryPromise({
      try: () => realpath(found),
      catch: (e) => new HarnessError({ reason: "probe_failed", detail: String(e) })
    })
    let said = ""
    const ask = Effect.gen(function*() {
      // gemini writes its project registry into HOME even for --version: a throwaway one.
      const home = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "writ-gemini-probe-"))),
        (home) => Effect.sync(() => rmSync(home, { recursive: true, force: true }))
      )
      const asked = yield* askVersion(runner, {
        command: process.execPath,
        args: [entryOf(dir), "--version"],
        env: { PATH: "/usr/bin:/bin", HOME: home },
        cwd: home,
        deadlineMillis: 60_000,
        pattern: /^(\d+\.\d+\.\d+)\b/
      })
      said = asked.said
      return asked.version
    }).pipe(Effect.scoped)
    const { digest, version } = yield* store.probed(dir, "tree", ask)
    return new ProbeResult({
      provider: "gemini-cli",
      executable: new ExecutableIdentity({ path: entryOf(dir), digest }),
      version,
      notes: [
        `run by Node ${process.versions.node} (${process.execPath}); the digest covers the whole package tree`,
        ...(version === null ? [`--version said: ${said}`] : [])
      ]
    })
  })

// --- spawn: the fresh home, the secrets, the callback, the process, teardown (home removed last) ---

const spawnWith = (options: Options, runner: HarnessProcess.Service) => (admitted: Admitted, launch: Launch) =>
  runPlan(runner, {
    plan: admitted.plan,
    report: admitted.report,
    launch,
    keepHome: options.keepHome === true,
    callbackRef: GeminiCli.callbackRef,
    command: process.execPath,
    args: [admitted.plan.executable.path, ...admitted.plan.argv],
    makeParser
  })

/** The gemini-cli adapter over a process runner. */
export const make = (options: Options = {}) =>
  Effect.map(HarnessProcess, (runner): HarnessAdapter.Service => {
    const store = options.store ?? HarnessStore.make()
    return {
      provider: "gemini-cli",
      probe: probeWith(options, store, runner),
      compile: (input) =>
        GeminiCli.compile(input, {
          node: process.execPath,
          hookScript: GeminiCliHook.script,
          mcpBridge: McpBridge.program
        }),
      spawn: spawnWith(options, runner)
    }
  })

/** The gemini-cli HarnessAdapter on Node's child processes. */
export const layer = (options: Options = {}): Layer.Layer<HarnessAdapter> =>
  Layer.effect(HarnessAdapter, make(options)).pipe(Layer.provide(NodeHarnessProcess.layer))
