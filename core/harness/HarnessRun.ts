/**
 * The execution scope a native agent run is in, with the immutable plan and capability report attached to it before
 * spawn: an ephemeral operation of its own in the minimal profile, the durable Run in the durable and governed ones.
 * Every effect of the run (the blocking callback's decisions, writ's MCP server, observers, the process port) runs with
 * it in context and under a span that carries both digests, so each can read the plan and report of the run it is in.
 */
import { Context, Effect, Schema } from "effect"
import type { Option } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import * as Digest from "../base/Digest.ts"
import { ExecutionScopeRef } from "../execution/ExecutionScope.ts"
import { CapabilityReport } from "./CapabilityReport.ts"
import * as HarnessPlan from "./HarnessPlan.ts"

/** A run's scope with the plan and report attached to it, and their `sha256-v1` digests. */
export class Attached extends Schema.Class<Attached>("HarnessRunAttached")({
  scope: ExecutionScopeRef,
  plan: HarnessPlan.HarnessPlan,
  plan_digest: Digest.Sha256Hex,
  report: CapabilityReport,
  report_digest: Digest.Sha256Hex
}) {}

/** The harness run the current effect is part of. */
export class HarnessRun extends Context.Tag("writ/HarnessRun")<HarnessRun, Attached>() {}

const encodeReport = Schema.encodeSync(CapabilityReport)

/** The report's `sha256-v1` digest (over its wire form, as the governed evidence states it). */
export const reportDigest = (
  report: CapabilityReport
): Effect.Effect<Digest.Sha256Hex, CanonicalJsonError, Digest.Digest> => Digest.canonical(encodeReport(report))

/** Attach a plan and its report to `scope`: both digested, frozen together. */
export const attach = (
  compiled: { readonly plan: HarnessPlan.HarnessPlan; readonly report: CapabilityReport },
  scope: ExecutionScopeRef
): Effect.Effect<Attached, CanonicalJsonError, Digest.Digest> =>
  Effect.map(
    Effect.all([HarnessPlan.digest(compiled.plan), reportDigest(compiled.report)]),
    ([plan_digest, report_digest]) =>
      new Attached({ scope, plan: compiled.plan, plan_digest, report: compiled.report, report_digest })
  )

/** The scope's id as spans and logs name it: the ephemeral operation's, else the Run's. */
export const scopeId = (attached: Attached): string =>
  attached.scope._tag === "ephemeral_operation" ? attached.scope.scope_id : attached.scope.run_id

/** Run `self` inside the attached run: `HarnessRun` provided, under a `HarnessRun` span annotated with both digests. */
export const within = (attached: Attached) => <A, E, R>(self: Effect.Effect<A, E, R>) =>
  self.pipe(
    Effect.provideService(HarnessRun, attached),
    Effect.withSpan("HarnessRun", {
      attributes: {
        "writ.harness.provider": attached.plan.provider,
        "writ.harness.scope": attached.scope._tag,
        "writ.harness.scope_id": scopeId(attached),
        "writ.harness.plan_digest": attached.plan_digest,
        "writ.harness.report_digest": attached.report_digest
      }
    })
  )

/** The run the current effect is in, if any. */
export const current: Effect.Effect<Option.Option<Attached>> = Effect.serviceOption(HarnessRun)
