/**
 * The claude-code HarnessAdapter on Node: probe resolves the `claude` executable, digests the binary and asks its
 * `--version` (both once per path, inode, size and mtime, kept in the harness store); compile is `core/harness/ClaudeCode.ts` with this Node running
 * the hook; spawn writes the plan's files into a fresh config home, serves the blocking callback on 127.0.0.1 with a
 * per-run token, runs the CLI through the HarnessProcess port with exactly the plan's environment, and parses its
 * stream into redacted observations. Runtimes: Node.
 */
import { Effect, Layer } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { realpath } from "node:fs/promises"
import { createRequire } from "node:module"
import { delimiter, dirname, join } from "node:path"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as ClaudeCode from "../../core/harness/ClaudeCode.ts"
import { makeParser } from "../../core/harness/ClaudeCodeStream.ts"
import type { Admitted, Launch } from "../../core/harness/HarnessAdapter.ts"
import { HarnessAdapter, HarnessError, ProbeResult } from "../../core/harness/HarnessAdapter.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import * as HarnessStore from "./HarnessStore.ts"
import * as ClaudeCodeHook from "./internal/claudeCodeHook.ts"
import { askVersion, runPlan } from "./internal/harnessLaunch.ts"
import * as McpBridge from "./internal/mcpBridge.ts"
import * as NodeHarnessProcess from "./NodeHarnessProcess.ts"

/** How the adapter finds its executable and where it keeps its identity and verify files. */
export interface Options {
  /** The `claude` executable; default: the one installed beside writ, else the first `claude` on PATH. */
  readonly executable?: string
  readonly store?: HarnessStore.HarnessStore
  /** Keep the config home after the run (for inspection); default: removed. */
  readonly keepHome?: boolean
}

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
    let said = ""
    const ask = Effect.map(
      askVersion(runner, {
        command: path,
        args: ["--version"],
        env: { PATH: "/usr/bin:/bin", HOME: store.dir, DISABLE_AUTOUPDATER: "1" },
        cwd: "/",
        deadlineMillis: 30_000,
        pattern: /^(\d+\.\d+\.\d+)\b/
      }),
      (asked) => {
        said = asked.said
        return asked.version
      }
    )
    const { digest, version } = yield* store.probed(path, "file", ask)
    return new ProbeResult({
      provider: "claude-code",
      executable: new ExecutableIdentity({ path, digest }),
      version,
      notes: [
        ...(version === null ? [`--version said: ${said}`] : []),
        ...engineNote(path)
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
    callbackRef: ClaudeCode.callbackRef,
    command: admitted.plan.executable.path,
    args: admitted.plan.argv,
    makeParser
  })

/** The claude-code adapter over a process runner. */
export const make = (options: Options = {}) =>
  Effect.map(HarnessProcess, (runner): HarnessAdapter.Service => {
    const store = options.store ?? HarnessStore.make()
    return {
      provider: "claude-code",
      probe: probeWith(options, store, runner),
      compile: (input) =>
        ClaudeCode.compile(input, {
          node: process.execPath,
          hookScript: ClaudeCodeHook.script,
          mcpBridge: McpBridge.program
        }),
      spawn: spawnWith(options, runner)
    }
  })

/** The claude-code HarnessAdapter on Node's child processes. */
export const layer = (options: Options = {}): Layer.Layer<HarnessAdapter> =>
  Layer.effect(HarnessAdapter, make(options)).pipe(Layer.provide(NodeHarnessProcess.layer))
