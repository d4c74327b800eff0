/**
 * The harness-adapter port: one per provider CLI. `probe` finds the executable and its version, `compile` turns a
 * spec into a plan and its report, `spawn` runs a plan and returns what was observed. `prepare` is the one route
 * to a spawnable plan: it refuses a required control that is not enforced before anything runs.
 */
import { Context, Effect, Either, Schema } from "effect"
import type { Redacted } from "effect"
import type { ExecutionScopeRef } from "../execution/ExecutionScope.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import type { CapabilityReport } from "./CapabilityReport.ts"
import { ExecutableIdentity } from "./CapabilityReport.ts"
import * as Report from "./CapabilityReport.ts"
import { Provider } from "./HarnessControl.ts"
import type { HarnessPlan } from "./HarnessPlan.ts"
import type { CallbackDecision, ToolCall } from "./HarnessPolicy.ts"
import type { Attached } from "./HarnessRun.ts"
import type { HarnessSpec } from "./HarnessSpec.ts"
import * as PolicyNarrowing from "./PolicyNarrowing.ts"
import type { ProviderObservation } from "./ProviderObservation.ts"

/** What a probe found: the resolved executable, its identity and version (null: unknown), and notes. */
export class ProbeResult extends Schema.Class<ProbeResult>("ProbeResult")({
  provider: Provider,
  executable: Schema.NullOr(ExecutableIdentity),
  version: Schema.NullOr(Schema.String),
  notes: Schema.Array(Schema.String)
}) {}

/** Why a harness step failed, with the step. */
export class HarnessError extends Schema.TaggedError<HarnessError>()("HarnessError", {
  reason: Schema.Literal("probe_failed", "compile_failed", "spawn_failed", "secret_unresolved"),
  detail: Schema.String
}) {}

/** A delegated tool call and writ's answer to it (declared with the decision, in HarnessPolicy). */
export type { CallbackDecision, ToolCall } from "./HarnessPolicy.ts"

/** What compile needs besides the spec. */
export interface CompileInput {
  readonly spec: HarnessSpec
  readonly probe: ProbeResult
  readonly prompt: string
  /** The fresh, empty config home the CLI is to start in. */
  readonly home: string
  readonly verifications: ReadonlyArray<Report.VerifyRun>
  /** The snapshot the spec narrows: with one, a spec wider than it is refused before anything is compiled. */
  readonly policy?: PolicySnapshot
}

/** A plan with its report. */
export interface Compiled {
  readonly plan: HarnessPlan
  readonly report: CapabilityReport
}

/** A plan whose required controls are all enforced: only `prepare` makes one. */
export interface Admitted extends Compiled {
  readonly admitted: true
}

/** What spawn needs at run time: the secrets' values by reference, and writ's decision for delegated calls. */
export interface Launch {
  readonly secrets: ReadonlyMap<string, Redacted.Redacted<string>>
  /** The run's execution scope (a durable Run's, say); default: a fresh ephemeral operation of its own. */
  readonly scope?: ExecutionScopeRef
  readonly decide: (call: ToolCall) => Effect.Effect<CallbackDecision>
  /** Each observation as the stream yields it (a live view); the run's result holds them all too. */
  readonly observe?: (observation: ProviderObservation) => Effect.Effect<void>
  /**
   * writ's MCP server for the run (`McpServer.make`), for a plan that serves it: its bridge posts each message to the
   * run's callback, which answers with `handle`; its permission decisions join the run's.
   */
  readonly mcp?: {
    readonly handle: (line: string) => Effect.Effect<string | undefined>
    readonly decisions: ReadonlyArray<CallbackRecord>
  }
}

/** One decision writ's blocking callback gave during a run. */
export interface CallbackRecord {
  readonly call: ToolCall
  readonly decision: CallbackDecision
  /** The harness run it was decided in (its scope, plan and report), when it was decided in one. */
  readonly run?: Attached
}

/** What one run came to: what the stream said (observations), and what writ itself decided (callback decisions). */
export interface RunResult {
  /** The scope the run was in, with the plan and report attached to it before spawn. */
  readonly run: Attached
  readonly observations: ReadonlyArray<ProviderObservation>
  readonly decisions: ReadonlyArray<CallbackRecord>
  readonly stderr: string
}

/** One provider CLI's harness adapter. */
export class HarnessAdapter extends Context.Tag("writ/HarnessAdapter")<HarnessAdapter, HarnessAdapter.Service>() {}

/** The HarnessAdapter service. */
export declare namespace HarnessAdapter {
  /** What a harness adapter provides. */
  export interface Service {
    readonly provider: Provider
    readonly probe: Effect.Effect<ProbeResult, HarnessError>
    readonly compile: (input: CompileInput) => Effect.Effect<Compiled, HarnessError>
    /**
     * Attach the plan and report to the run's scope (`HarnessRun`) before anything is written or spawned, and run
     * everything of the run inside it: the callback's `decide`, writ's MCP server, `observe`, the process port.
     */
    readonly spawn: (admitted: Admitted, launch: Launch) => Effect.Effect<RunResult, HarnessError>
  }
}

/**
 * Check, probe, compile and admit: a spec wider than its policy is refused first; a compile failure reports every
 * control unsupported; an unmet requirement refuses.
 */
export const prepare = (
  adapter: HarnessAdapter.Service,
  input: Omit<CompileInput, "probe">
): Effect.Effect<Admitted, HarnessError | Report.RequiredControlUnmet | PolicyNarrowing.SpecWiderThanPolicy> =>
  Effect.gen(function*() {
    if (input.policy !== undefined) yield* PolicyNarrowing.check(input.spec, input.policy)
    const probe = yield* adapter.probe
    const compiled = yield* adapter.compile({ ...input, probe }).pipe(
      Effect.catchTag(
        "HarnessError",
        (error): Effect.Effect<never, HarnessError | Report.RequiredControlUnmet> =>
          error.reason === "compile_failed"
            ? Effect.fail(
              new Report.RequiredControlUnmet({
                unmet: input.spec.required,
                report: Report.uncompiled(adapter.provider, input.spec.required, error.detail)
              })
            )
            : Effect.fail(error)
      )
    )
    const admitted = Report.admit(compiled.report, input.spec.required)
    if (Either.isLeft(admitted)) {
      return yield* Effect.fail(admitted.left)
    }
    return { ...compiled, admitted: true as const }
  })
