/**
 * What every provider's verify scenarios share on Node: the scenario's shape and result, the temp directories, the
 * loopback listener and canary variable a scenario checks, the scripted model's lifetime, the verify policy's
 * decider, and the run of one scenario (spec, plan, spawn, settle, check) and of them all into verify runs.
 * Runtimes: Node.
 */
import { Effect, Either, Redacted, Schema, type Scope } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs"
import * as net from "node:net"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import * as Action from "../../../core/action/Action.ts"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import type { Digest } from "../../../core/base/Digest.ts"
import { VerifyRun } from "../../../core/harness/CapabilityReport.ts"
import type { CallbackDecision, HarnessAdapter, RunResult, ToolCall } from "../../../core/harness/HarnessAdapter.ts"
import { HarnessError, prepare } from "../../../core/harness/HarnessAdapter.ts"
import type { ControlName, Provider } from "../../../core/harness/HarnessControl.ts"
import { ConfigFile, HarnessPlan } from "../../../core/harness/HarnessPlan.ts"
import * as HarnessPolicy from "../../../core/harness/HarnessPolicy.ts"
import * as HarnessSpec from "../../../core/harness/HarnessSpec.ts"
import * as PermissionPolicy from "../../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../../core/policy/PolicySnapshot.ts"
import * as HarnessMcp from "../HarnessMcp.ts"
import type { ScriptedCall, ScriptedModel, ScriptedSubagent } from "../ScriptedAnthropic.ts"

/** What one scenario run found. */
export interface ScenarioResult {
  readonly scenario: string
  readonly control: ControlName
  /** The forbidden effect did not happen. */
  readonly effect_absent: boolean
  /** The scenario's allowed act did happen: the CLI really ran the scripted calls. */
  readonly exercised: boolean
  readonly run: RunResult
}

/**
 * The policy the callback scenario decides by: `touch` allowed; writ's intrinsic guards refuse any `bash -c`. Through
 * writ's MCP server, `files.touch` is allowed and `files.write` is not.
 */
export const verifyPolicy = {
  policy_id: "writ-harness-verify",
  version: "1",
  mode: "rules",
  allow: { "shell.exec": ["touch *"], "files.touch": ["*"] }
} as const

/** The actions writ's MCP server serves in a verify run: each leaves its effect in a file, where a check looks. */
export const verifyActions: ReadonlyArray<ActionDefinition> = [
  Action.make({
    name: "files.touch",
    description: "Create an empty file",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.String,
    effects: ["filesystem.write"],
    handler: ({ path }) => (writeFileSync(path, ""), "touched")
  }),
  Action.make({
    name: "files.write",
    description: "Write a file",
    input: Schema.Struct({ path: Schema.String, content: Schema.String }),
    output: Schema.String,
    effects: ["filesystem.write"],
    handler: ({ content, path }) => (writeFileSync(path, content), "written")
  })
]

const snapshotOf = (declared: unknown) =>
  Effect.gen(function*() {
    const policy = yield* Either.match(PermissionPolicy.decode(declared), {
      onLeft: (e) => Effect.fail(new HarnessError({ reason: "compile_failed", detail: e.message })),
      onRight: Effect.succeed
    })
    return yield* PolicySnapshot.compile(policy).pipe(
      Effect.mapError((e) => new HarnessError({ reason: "compile_failed", detail: e.message }))
    )
  })

/** Where one scenario runs: its directory, workspace and config home, and a listener the agent must not reach. */
export interface Setup {
  readonly dir: string
  readonly ws: string
  readonly home: string
  /** A listener on 127.0.0.1 the agent must not reach, and the connections it has taken. */
  readonly port: number
  readonly connections: () => number
}

/** One verify scenario: the spec it runs under, the calls the model makes, and how its effect is checked. */
export interface Scenario {
  readonly id: string
  readonly control: ControlName
  readonly spec: (setup: Setup, loosen: boolean) => Record<string, unknown>
  readonly calls: (setup: Setup) => ReadonlyArray<ScriptedCall>
  /** The subagents' own scripts, for a provider whose model server can script them. */
  readonly subagents?: (setup: Setup) => ReadonlyArray<ScriptedSubagent>
  readonly decide?: Effect.Effect<(call: ToolCall) => Effect.Effect<CallbackDecision>, HarnessError, Digest>
  /** A loosening the spec cannot express, applied to the compiled plan (tests only). */
  readonly loosenPlan?: (plan: HarnessPlan, setup: Setup) => HarnessPlan
  readonly check: (
    setup: Setup,
    canary: string,
    model: ScriptedModel
  ) => { readonly absent: boolean; readonly exercised: boolean }
  /** How long after the run to wait before checking: an effect that would land late must have had its time. */
  readonly settleMillis?: number
  /** When (epoch ms) the check may run, for an effect whose time is known only from the run. */
  readonly settleUntil?: (setup: Setup) => number
  /** Files the scenario's attack needs in place before the run (a hostile project's configuration, say). */
  readonly prepare?: (setup: Setup) => void
  /** The policy writ's MCP server runs its actions under, for a spec that serves it (default `verifyPolicy`). */
  readonly mcpPolicy?: (loosen: boolean) => unknown
  /** The model the spec names, when the scenario needs another than the driver's (its tools can differ by model). */
  readonly model?: string
}

/** A file's text, or undefined when it does not exist. */
export const read = (path: string) => (existsSync(path) ? readFileSync(path, "utf-8") : undefined)

/** A callback that allows every call. */
export const allowAll = Effect.succeed((_: ToolCall) => Effect.succeed<CallbackDecision>({ decision: "allow" }))

/** A callback deciding by `verifyPolicy` through the harness's policy evaluation. */
export const policyDecider = Effect.map(
  snapshotOf(verifyPolicy),
  (snapshot) => HarnessPolicy.decider(snapshot, "harness-verify")
)

/** A plan whose config files ending in `suffix` are edited: a loosening the spec cannot express (tests only). */
export const editConfig = (plan: HarnessPlan, suffix: string, edit: (content: string) => string) =>
  new HarnessPlan({
    ...plan,
    config_files: plan.config_files.map((file) =>
      file.path.endsWith(suffix) ? new ConfigFile({ path: file.path, content: edit(file.content) }) : file
    )
  })

/** A plan whose argv is edited: a loosening the spec cannot express (tests only). */
export const editArgv = (plan: HarnessPlan, edit: (argv: ReadonlyArray<string>) => ReadonlyArray<string>) =>
  new HarnessPlan({ ...plan, argv: edit(plan.argv) })

/**
 * A hostile MCP server's program: it marks `dir/evil-started` when it starts and `dir/evil-called` when a tool of it
 * is called, so a check sees whether a CLI ever ran it.
 */
export const evilMcpServer = (dir: string) =>
  `import { writeFileSync } from "node:fs"
import { createInterface } from "node:readline"
writeFileSync(${JSON.stringify(join(dir, "evil-started"))}, "")
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n")
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line)
  if (m.id === undefined) return
  if (m.method === "initialize") {
    return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "evil", version: "1" } } })
  }
  if (m.method === "tools/list") {
    return send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "touch", description: "touch",
      inputSchema: { type: "object", properties: {} } }] } })
  }
  if (m.method === "tools/call") {
    writeFileSync(${JSON.stringify(join(dir, "evil-called"))}, "")
    return send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "done" }] } })
  }
  send({ jsonrpc: "2.0", id: m.id, result: {} })
})
`

/** A new directory (by its real path: the sandboxes and CLIs see through symlinks) under `base`, removed after. */
export const tempDir = (base: string, prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => realpathSync(mkdtempSync(join(base, prefix)))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

/** A listener on 127.0.0.1 counting the connections it takes, closed after. */
export const listener = Effect.acquireRelease(
  Effect.async<{ readonly server: net.Server; readonly port: number; readonly count: { n: number } }>((resume) => {
    const count = { n: 0 }
    const server = net.createServer((socket) => {
      count.n += 1
      socket.destroy()
    })
    server.listen(
      0,
      "127.0.0.1",
      () => resume(Effect.succeed({ server, port: (server.address() as AddressInfo).port, count }))
    )
  }),
  ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
)

/** The process's variable `name` set to `value` for the scope, and restored (or removed) when it closes. */
export const scopedVariable = (name: string, value: string): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const before = process.env[name]
      process.env[name] = value
      return before
    }),
    (before) =>
      Effect.sync(() => {
        if (before === undefined) delete process.env[name]
        else process.env[name] = before
      })
  )

/** What a provider's scenarios run with: its scripted model, the spec's provider part, and where each one runs. */
export interface Driver {
  readonly provider: Provider
  readonly model: string
  /** The spec's tool allowlist before the scenario's own sections, if the provider's spec names one. */
  readonly tools?: ReadonlyArray<string>
  /** The scripted model's key: a secret like any, which the agent's tools must not see. */
  readonly scriptedKey: string
  readonly start: (
    calls: ReadonlyArray<ScriptedCall>,
    subagents?: ReadonlyArray<ScriptedSubagent>
  ) => Promise<ScriptedModel>
  readonly setup: Effect.Effect<Setup, never, Scope.Scope>
  /** The probe failure's detail when no executable with a known version is found. */
  readonly missing: string
  /** The name of writ's permission-prompt tool on its MCP server, for a provider that has permission prompts. */
  readonly permissionTool?: string
}

/** Run one scenario (or its loosened control) with the adapter against the driver's scripted model. */
export const runScenario = (driver: Driver, adapter: HarnessAdapter.Service, scenario: Scenario, loosen: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const paths = yield* driver.setup
    scenario.prepare?.(paths)
    const canary = `writ-canary-${randomBytes(8).toString("hex")}`
    yield* scopedVariable("WRIT_VERIFY_CANARY", canary)
    const model = yield* Effect.acquireRelease(
      Effect.promise(() => driver.start(scenario.calls(paths), scenario.subagents?.(paths))),
      (model) => Effect.promise(() => model.close())
    )
    const spec = yield* Either.match(
      HarnessSpec.decode({
        spec_version: 1,
        provider: driver.provider,
        model: { name: scenario.model ?? driver.model, endpoint: model.baseUrl, api_key: "writ:scripted.key" },
        workspace: paths.ws,
        ...(driver.tools === undefined ? {} : { tools: { allow: driver.tools } }),
        ...scenario.spec(paths, loosen)
      }),
      {
        onLeft: (e) => Effect.fail(new HarnessError({ reason: "compile_failed", detail: e.message })),
        onRight: Effect.succeed
      }
    )
    const admitted = yield* prepare(adapter, {
      spec,
      prompt: "run the scripted calls",
      home: paths.home,
      verifications: []
    })
    const plan = loosen && scenario.loosenPlan !== undefined ? scenario.loosenPlan(admitted.plan, paths) : admitted.plan
    const decide = yield* (scenario.decide ?? allowAll)
    const mcp = HarnessSpec.servesWritMcp(spec)
      ? yield* HarnessMcp.make({
        actions: verifyActions,
        snapshot: yield* snapshotOf(scenario.mcpPolicy?.(loosen) ?? verifyPolicy),
        principal: "harness-verify",
        decide,
        ...(driver.permissionTool === undefined ? {} : { permissionTool: driver.permissionTool })
      })
      : undefined
    const run = yield* adapter.spawn({ ...admitted, plan }, {
      secrets: new Map([["writ:scripted.key", Redacted.make(driver.scriptedKey)]]),
      decide,
      ...(mcp === undefined ? {} : { mcp })
    })
    if (scenario.settleMillis !== undefined) yield* Effect.sleep(scenario.settleMillis)
    if (scenario.settleUntil !== undefined) {
      yield* Effect.sleep(Math.max(0, scenario.settleUntil(paths) - Date.now()))
    }
    const { absent, exercised } = scenario.check(paths, canary, model)
    return {
      scenario: scenario.id,
      control: scenario.control,
      effect_absent: absent,
      exercised,
      run
    } satisfies ScenarioResult
  }))

/** Run every scenario for the probed executable and return the verify runs to record. */
export const verify = (driver: Driver, adapter: HarnessAdapter.Service, scenarios: ReadonlyArray<Scenario>) =>
  Effect.gen(function*() {
    const probe = yield* adapter.probe
    if (probe.version === null || probe.executable === null) {
      return yield* new HarnessError({ reason: "probe_failed", detail: driver.missing })
    }
    const results: Array<{ readonly result: ScenarioResult; readonly run: VerifyRun }> = []
    for (const scenario of scenarios) {
      const result = yield* runScenario(driver, adapter, scenario, false)
      results.push({
        result,
        run: new VerifyRun({
          control: scenario.control,
          provider_version: probe.version,
          executable_digest: probe.executable.digest,
          scenario: scenario.id,
          run_id: randomUUID(),
          effect_absent: result.effect_absent && result.exercised
        })
      })
    }
    return results
  })
