/**
 * The codex HarnessAdapter on Node: probe resolves the `codex` JavaScript launcher and the native binary it execs,
 * digests both and asks the binary's `--version` (each once per path, inode, size and mtime, kept in the harness
 * store); compile is
 * `core/harness/Codex.ts` with this Node running the hook; spawn refuses any hook source besides writ's when hook trust
 * is bypassed, writes the plan's files into a fresh CODEX_HOME, serves the blocking callback on 127.0.0.1 with a
 * per-run token, runs the native binary through the HarnessProcess port with exactly the plan's environment, and
 * parses its stream (and its stderr's hook denials) into redacted observations. Runtimes: Node.
 */
import { Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import { existsSync, readdirSync, statSync } from "node:fs"
import { realpath } from "node:fs/promises"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as Codex from "../../core/harness/Codex.ts"
import * as CodexStream from "../../core/harness/CodexStream.ts"
import type { Admitted, Launch } from "../../core/harness/HarnessAdapter.ts"
import { HarnessAdapter, HarnessError, ProbeResult } from "../../core/harness/HarnessAdapter.ts"
import type { HarnessPlan } from "../../core/harness/HarnessPlan.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import * as HarnessStore from "./HarnessStore.ts"
import * as ClaudeCodeHook from "./internal/claudeCodeHook.ts"
import { askVersion, runPlan } from "./internal/harnessLaunch.ts"
import * as McpBridge from "./internal/mcpBridge.ts"
import * as NodeHarnessProcess from "./NodeHarnessProcess.ts"

/** How the adapter finds its executable, where it keeps its identity and verify files, and where run homes go. */
export interface Options {
  /** The `codex` JavaScript launcher (`@openai/codex/bin/codex.js`); default: the one installed beside writ. */
  readonly launcher?: string
  readonly store?: HarnessStore.HarnessStore
  /** Keep the config home after the run (for inspection); default: removed. */
  readonly keepHome?: boolean
}

/** The platform package the launcher execs, by `process.platform`/`process.arch`, and its target triple. */
const platforms: Record<string, { readonly pkg: string; readonly triple: string }> = {
  "linux-x64": { pkg: "@openai/codex-linux-x64", triple: "x86_64-unknown-linux-musl" },
  "linux-arm64": { pkg: "@openai/codex-linux-arm64", triple: "aarch64-unknown-linux-musl" }
}

const installedLauncher = () => {
  try {
    const manifest = createRequire(import.meta.url).resolve("@openai/codex/package.json")
    return join(dirname(manifest), "bin", "codex.js")
  } catch {
    return undefined
  }
}

/** The native binary the launcher execs, resolved the way the launcher resolves it. */
const nativeOf = (launcher: string): string | undefined => {
  const platform = platforms[`${process.platform}-${process.arch}`]
  if (platform === undefined) return undefined
  try {
    const manifest = createRequire(launcher).resolve(`${platform.pkg}/package.json`)
    const binary = join(dirname(manifest), "vendor", platform.triple, "bin", "codex")
    return existsSync(binary) ? binary : undefined
  } catch {
    return undefined
  }
}

/** Where a home for a codex run goes: writ's data directory, never /tmp (codex refuses its helpers there). */
export const homesDir = (store: HarnessStore.HarnessStore) => join(store.dir, "harness", "homes")

const probeHome = (store: HarnessStore.HarnessStore) => join(store.dir, "harness", "codex-probe")

const unprobed = (note: string) =>
  new ProbeResult({ provider: "codex", executable: null, version: null, notes: [note] })

const probeWith = (options: Options, store: HarnessStore.HarnessStore, runner: HarnessProcess.Service) =>
  Effect.gen(function*() {
    const found = options.launcher ?? installedLauncher()
    if (found === undefined || !existsSync(found)) return unprobed("no codex launcher found")
    const failed = (e: unknown) => new HarnessError({ reason: "probe_failed", detail: String(e) })
    const launcher = yield* Effect.tryPromise({ try: () => realpath(found), catch: failed })
    const found_native = nativeOf(launcher)
    if (found_native === undefined) return unprobed(`no native codex binary for ${launcher} on this platform`)
    const native = yield* Effect.tryPromise({ try: () => realpath(found_native), catch: failed })
    let said = ""
    const ask = Effect.map(
      askVersion(runner, {
        command: native,
        args: ["--version"],
        // Its own home: codex creates $HOME/.codex, which must not land in (or above) any workspace.
        env: { PATH: "/usr/bin:/bin", HOME: probeHome(store), CODEX_HOME: probeHome(store) },
        cwd: "/",
        deadlineMillis: 30_000,
        pattern: /^codex-cli (\d+\.\d+\.\d+)\b/
      }),
      (asked) => {
        said = asked.said
        return asked.version
      }
    )
    const binary = yield* store.probed(native, "file", ask)
    const version = binary.version
    // The identity covers both: the launcher decides which binary runs, the binary is what runs.
    const parts = [yield* store.identity(launcher), binary.digest]
    const digest = Sha256Hex.make(createHash("sha256").update(`codex-identity-v1\n${parts.join("\n")}`).digest("hex"))
    return new ProbeResult({
      provider: "codex",
      executable: new ExecutableIdentity({ path: native, digest }),
      version,
      notes: [
        ...(version === null ? [`--version said: ${said}`] : []),
        `the launcher ${launcher} execs this native binary; the identity digest covers both`
      ]
    })
  })

// --- spawn: no other hook source, the fresh home, the secrets, the callback, the process (home removed last) ---

/**
 * Hook sources codex would load besides writ's: a non-empty `.codex`/`.agents` from the workspace up to its project
 * root (the nearest `.git`, codex's default marker; every ancestor when there is none), and /etc/codex.
 */
export const otherHookSources = (workspace: string): ReadonlyArray<string> => {
  const dirs: Array<string> = []
  for (let dir = workspace;; dir = dirname(dir)) {
    dirs.push(dir)
    if (existsSync(join(dir, ".git")) || dir === "/") break
  }
  // An empty directory configures nothing: codex itself leaves empty `.codex`/`.agents` mount points behind.
  const configures = (path: string) => {
    try {
      return !statSync(path).isDirectory() || readdirSync(path).length > 0
    } catch {
      return false
    }
  }
  return [...dirs.flatMap((dir) => [join(dir, ".codex"), join(dir, ".agents")]), "/etc/codex"].filter(configures)
}

const bypassesTrust = (plan: HarnessPlan) => plan.argv.includes("--dangerously-bypass-hook-trust")

const spawnWith = (options: Options, runner: HarnessProcess.Service) => (admitted: Admitted, launch: Launch) =>
  Effect.gen(function*() {
    const { plan } = admitted
    if (bypassesTrust(plan)) {
      const others = otherHookSources(plan.workspace)
      if (others.length > 0) {
        return yield* new HarnessError({
          reason: "spawn_failed",
          detail: `hook trust is bypassed, so writ's hook must be the only source: ${others.join(", ")} exist`
        })
      }
    }
    return yield* runPlan(runner, {
      plan,
      report: admitted.report,
      launch,
      keepHome: options.keepHome === true,
      callbackRef: Codex.callbackRef,
      command: plan.executable.path,
      args: plan.argv,
      makeParser: CodexStream.makeParser,
      stderrObservations: CodexStream.denials
    })
  })

/** The codex adapter over a process runner. */
export const make = (options: Options = {}) =>
  Effect.map(HarnessProcess, (runner): HarnessAdapter.Service => {
    const store = options.store ?? HarnessStore.make()
    return {
      provider: "codex",
      probe: probeWith(options, store, runner),
      compile: (input) =>
        Codex.compile(input, {
          node: process.execPath,
          hookScript: ClaudeCodeHook.script,
          mcpBridge: McpBridge.program
        }),
      spawn: spawnWith(options, runner)
    }
  })

/** The codex HarnessAdapter on Node's child processes. */
export const layer = (options: Options = {}): Layer.Layer<HarnessAdapter> =>
  Layer.effect(HarnessAdapter, make(options)).pipe(Layer.provide(NodeHarnessProcess.layer))
