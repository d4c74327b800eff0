/**
 * What every provider's compile shares: the run's writ-owned files in its config home (the callback's file and the
 * hook's program), the checks on the input, the report over the mapping's claims, and the plan around the provider's
 * own argv, files and environment.
 */
import { Effect } from "effect"
import type { Claim } from "../CapabilityReport.ts"
import * as Report from "../CapabilityReport.ts"
import type { CompileInput } from "../HarnessAdapter.ts"
import { HarnessError } from "../HarnessAdapter.ts"
import type { ControlName, Provider } from "../HarnessControl.ts"
import type { EnvEntry } from "../HarnessPlan.ts"
import { ConfigFile, ExpectedEvidence, HarnessPlan, InheritVar, SecretFile, SecretVar } from "../HarnessPlan.ts"
import type { HarnessSpec } from "../HarnessSpec.ts"
import { requestedControls, servesCallback, servesWritMcp, writMcpName } from "../HarnessSpec.ts"
import * as YoloProfile from "../YoloProfile.ts"

export { writMcpName }

/** The secret ref of the blocking callback's URL and per-run token. */
export const callbackRef = "writ:harness.callback"

/** Where a run's writ-owned files live inside its config home: hidden from the agent's sandboxed tools. */
export const writDir = (home: string) => `${home}/.writ`

/** The file the hook reads the callback's URL and per-run token from. */
export const callbackFile = (home: string) => `${writDir(home)}/callback.json`

/** The hook's program file, when the spec asks for the callback. */
export const hookFiles = (spec: HarnessSpec, home: string, hookScript: (callbackFile: string) => string) =>
  spec.tools.callback
    ? [new ConfigFile({ path: `${writDir(home)}/hook.mjs`, content: hookScript(callbackFile(home)) })]
    : []

/** The callback's secret file, when the spec asks for the callback or writ's MCP server (which is served through it). */
export const callbackFiles = (spec: HarnessSpec, home: string) =>
  servesCallback(spec) ? [new SecretFile({ path: callbackFile(home), ref: callbackRef })] : []

/** The program of writ's MCP server as the CLI starts it: a stdio bridge to the run's callback, in writ's directory. */
export const mcpBridgeFile = (home: string) => `${writDir(home)}/mcp.mjs`

/** The bridge's program file, when the spec asks for writ's MCP server. */
export const mcpFiles = (spec: HarnessSpec, home: string, bridgeScript: (callbackFile: string) => string) =>
  servesWritMcp(spec) ? [new ConfigFile({ path: mcpBridgeFile(home), content: bridgeScript(callbackFile(home)) })] : []

/** The environment's tail every provider ends with: the allowlist inherited, then the spec's secrets by reference. */
export const specEnvironment = (spec: HarnessSpec): ReadonlyArray<EnvEntry> => [
  ...spec.environment.allow.map((name) => new InheritVar({ name })),
  ...spec.environment.secrets.map(({ name, ref }) => new SecretVar({ name, ref }))
]

const overlapping = (spec: HarnessSpec, home: string) =>
  home === spec.workspace || home.startsWith(`${spec.workspace}/`) || spec.workspace.startsWith(`${home}/`)

/** Refuse a spec of another provider, or a config home that is relative or overlaps the workspace. */
export const checkInput = (provider: Provider, { home, spec }: CompileInput) =>
  spec.provider !== provider
    ? Effect.fail(new HarnessError({ reason: "compile_failed", detail: `a ${spec.provider} spec` }))
    : !home.startsWith("/") || overlapping(spec, home)
    ? Effect.fail(new HarnessError({ reason: "compile_failed", detail: "the config home overlaps the workspace" }))
    : Effect.void

/**
 * The report over the mapping's claims for the requested controls, under the provider's yolo profile when the spec
 * sets the flag (its controls degraded, its warning in the notes); an unknown provider version fails compile.
 */
export const assess = (
  provider: Provider,
  input: CompileInput,
  claims: ReadonlyArray<Claim>,
  yolo?: YoloProfile.YoloProfile
) =>
  Effect.gen(function*() {
    const { probe, spec } = input
    const profile = spec.yolo === true ? yolo : undefined
    if (spec.yolo === true && profile === undefined) {
      return yield* new HarnessError({ reason: "compile_failed", detail: `${provider} has no yolo profile` })
    }
    const requested = requestedControls(spec)
    const mapped = YoloProfile.degrade(claims, profile).filter((claim) => requested.includes(claim.control))
    const report = Report.assess({
      provider,
      version: probe.version,
      executable: probe.executable,
      requested,
      claims: mapped,
      verifications: input.verifications,
      notes: [...probe.notes, ...(profile === undefined ? [] : [YoloProfile.note(profile)])]
    })
    if (probe.version === null || probe.executable === null) {
      return yield* new HarnessError({ reason: "compile_failed", detail: "the provider version is unknown" })
    }
    return { mapped, report, version: probe.version, executable: probe.executable }
  })

/** The plan around a provider's argv, files and environment, declaring the mapped controls and their scenarios. */
export const planOf = (
  input: CompileInput,
  assessed: Effect.Effect.Success<ReturnType<typeof assess>>,
  provider: Provider,
  scenarios: Partial<Record<ControlName, ReadonlyArray<string>>>,
  parts: {
    readonly argv: ReadonlyArray<string>
    readonly config_files: ReadonlyArray<ConfigFile>
    readonly secret_files: ReadonlyArray<SecretFile>
    readonly environment: ReadonlyArray<EnvEntry>
  }
) =>
  new HarnessPlan({
    plan_version: 1,
    provider,
    provider_version: assessed.version,
    executable: assessed.executable,
    argv: parts.argv,
    config_files: parts.config_files,
    secret_files: parts.secret_files,
    environment: parts.environment,
    workspace: input.spec.workspace,
    home: input.home,
    wall_clock_seconds: input.spec.budget.wall_clock_seconds,
    declared_controls: assessed.mapped.map((claim) => claim.control),
    expected_evidence: assessed.mapped.flatMap((claim) =>
      (scenarios[claim.control] ?? []).map((scenario) => new ExpectedEvidence({ control: claim.control, scenario }))
    )
  })
