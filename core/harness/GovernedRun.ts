/**
 * A native agent run under the governed profile is one governed operation on its task boundary's chain, written by the
 * harness alone: `policy_bound` and `operation_started` (carrying the plan's and the capability report's digests),
 * one `gate_evaluated` per decision of the blocking callback, decided by the same side-effect-free evaluation as the
 * executor's stages 6 and 7 (`PolicyGate.reduce`, guards then policy, over the pinned snapshot) and committed before
 * its answer is given, and one terminal record for the run's end. Observations are never among its records.
 */
import { Effect, Either, Schema } from "effect"
import * as Digest from "../base/Digest.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import type * as Evidence from "../evidence/Evidence.ts"
import type { AppendReceipt } from "../evidence/EvidenceStore.ts"
import { EvidenceWriter, failureDetail, GovernanceEvidenceError } from "../evidence/EvidenceWriter.ts"
import * as ledger from "../evidence/internal/ledger.ts"
import { appendOperation } from "../evidence/internal/writer.ts"
import { OperationContext } from "../evidence/OperationContext.ts"
import type { TaskBoundary } from "../evidence/TaskBoundary.ts"
import type { GateOutcome } from "../execution/Interceptor.ts"
import * as PolicyGate from "../policy/PolicyGate.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import type { CapabilityReport } from "./CapabilityReport.ts"
import type { CallbackDecision, ToolCall } from "./HarnessAdapter.ts"
import type { HarnessPlan } from "./HarnessPlan.ts"
import { inputOf } from "./HarnessPolicy.ts"

/** A run that cannot be opened as a governed operation: its boundary is not under its snapshot. */
export class GovernedRunError extends Schema.TaggedError<GovernedRunError>()("GovernedRunError", {
  reason: Schema.Literal("policy_mismatch"),
  detail: Schema.String
}) {}

/** What opens a governed run: its boundary and snapshot, the admitted plan and report with their digests, the prompt. */
export interface Start {
  readonly boundary: TaskBoundary
  readonly snapshot: PolicySnapshot
  readonly plan: HarnessPlan
  readonly plan_digest: Digest.Sha256Hex
  readonly report: CapabilityReport
  readonly report_digest: Digest.Sha256Hex
  readonly prompt: string
  /** Who the run acts for: the principal every callback decision is evaluated as. */
  readonly principal: string
  /** The durable Run the operation belongs to (its scope); absent, the operation is ephemeral. */
  readonly run_id?: string
}

/** How a run ended: the CLI's exit as the harness saw it (killed: writ's deadline ended it), or a spawn failure. */
export type End =
  | { readonly _tag: "exited"; readonly code: number | null; readonly signal: string | null; readonly killed: boolean }
  | { readonly _tag: "spawn_failed"; readonly detail: string }

/** An open governed run: its operation, its blocking callback's decider, and its one end. */
export interface GovernedRun {
  readonly operation: OperationContext
  /** Decide one delegated call and commit its `gate_evaluated` before answering; a record that fails to commit denies. */
  readonly decide: (call: ToolCall) => Effect.Effect<CallbackDecision>
  /** Commit the run's one terminal record; a second end is refused. */
  readonly end: (end: End) => Effect.Effect<AppendReceipt, GovernanceEvidenceError>
  /** Every decision committed so far, in commit order. */
  readonly decisions: () => ReadonlyArray<{ readonly call: ToolCall; readonly decision: CallbackDecision }>
}

const gateOf = (gates: ReadonlyArray<GateOutcome> | undefined, allowed: boolean, code: string): GateOutcome => {
  const deciding = gates?.find((gate) => gate.decision === (allowed ? "allow" : "deny")) ?? gates?.[0]
  return {
    gate_id: deciding?.gate_id ?? "writ.harness",
    level: deciding?.level ?? "hard",
    decision: allowed ? "allow" : "deny",
    reason_code: code,
    matched_rules: [...new Set((gates ?? []).flatMap((gate) => gate.matched_rules))]
  }
}

/** The callback's verdict on one call: guards then policy, as `PolicyGate.explain`; only an allow allows. */
const verdictOf = (pinned: PolicyGate.Pinned, call: ToolCall, principal: string, now: number) => {
  const input = inputOf(call, principal, now)
  const guard = PolicyGate.reduce(pinned, "guard", input)
  const [stage, verdict] = guard.disposition !== "allow"
    ? ["guard" as const, guard]
    : ["policy" as const, PolicyGate.reduce(pinned, "policy", input)]
  const allowed = verdict.disposition === "allow"
  return {
    stage,
    action: input.action,
    gate: gateOf(verdict.gates, allowed, verdict.code),
    decision: allowed
      ? { decision: "allow" as const }
      : {
        decision: "deny" as const,
        reason: `${verdict.code}${verdict.detail === undefined ? "" : `: ${verdict.detail}`}`
      }
  }
}

const terminalOf = (operation: OperationContext, end: End): Evidence.Draft => {
  const base = {
    record_type: "callable_failed" as Evidence.RecordType,
    operation_id: operation.operation_id,
    policy_id: operation.policy.policy_id,
    policy_version: operation.policy.version
  }
  const common = { stage: "invoke", attempt_id: operation.attempt_id, arguments_digest: operation.arguments_digest }
  if (end._tag === "spawn_failed") {
    return { ...base, payload: { ...common, failure_code: "harness.spawn_failed" } }
  }
  const exit = { exit_code: end.code, signal: end.signal }
  if (end.killed) {
    return {
      ...base,
      record_type: "operation_timed_out",
      payload: { ...common, call_executed: true, teardown: "harness.deadline", ...exit }
    }
  }
  return end.code === 0
    ? {
      ...base,
      record_type: "callable_completed",
      payload: { ...common, result_digest: null, replay_of: null, ...exit }
    }
    : { ...base, payload: { ...common, failure_code: `harness.exit_${end.code ?? end.signal ?? "unknown"}`, ...exit } }
}

/** The run's frozen operation context: the plan as its action, the CLI and its report as its backend. */
const operationOf = (input: Start) =>
  Effect.gen(function*() {
    const { boundary, plan, plan_digest, report_digest, snapshot } = input
    const ids = yield* IdGenerator
    const operation_id = yield* ids.uuid
    const prompt_digest = yield* Digest.sha256Text(input.prompt)
    return new OperationContext({
      operation_id,
      task_boundary_id: boundary.task_boundary_id,
      chain_id: boundary.chain_id,
      attempt_id: yield* ids.uuid,
      request_id: `harness-${operation_id}`,
      request_digest: yield* Effect.orDie(Digest.canonical({ plan_digest, report_digest, prompt_digest })),
      actor: input.principal,
      tenant: null,
      session_id: null,
      scope: input.run_id === undefined
        ? { kind: "ephemeral_operation", run_id: null, owner_attempt_id: null }
        : { kind: "durable_run", run_id: input.run_id, owner_attempt_id: null },
      action: { name: `harness.${plan.provider}`, version: "1", digest: plan_digest },
      policy: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
      backend: { id: plan.provider, version: plan.provider_version, capability_digest: report_digest },
      preflight: {
        report_id: yield* ids.uuid,
        digest: report_digest,
        admission_leases: [],
        verified_at: yield* Time.now,
        expires_at: null
      },
      arguments_digest: prompt_digest
    })
  })

/** `operation_started` with the plan's and the report's digests, and which controls the report enforced. */
const startedDraft = (operation: OperationContext, input: Start): Evidence.Draft => {
  const started = ledger.operationStarted(operation, new Set(), {})
  const { plan, report } = input
  const harness = {
    provider: plan.provider,
    provider_version: plan.provider_version,
    executable_digest: plan.executable.digest,
    plan_digest: input.plan_digest,
    report_digest: input.report_digest,
    enforced: report.controls.filter((c) => c.level === "enforced").map((c) => c.control),
    degraded: report.controls.filter((c) => c.level === "degraded").map((c) => c.control)
  }
  return { ...started, payload: { ...started.payload, harness } }
}

type Append = (
  drafts: ReadonlyArray<Evidence.Draft>,
  executed: boolean,
  ifCommitted?: () => ReadonlyArray<Evidence.Draft>
) => Effect.Effect<ReadonlyArray<AppendReceipt>, GovernanceEvidenceError>

/** One decision: evaluated, its `gate_evaluated` committed, then answered; a record that fails to commit denies. */
const decision = (
  operation: OperationContext,
  pinned: PolicyGate.Pinned,
  principal: string,
  append: Append,
  call: ToolCall
) =>
  Effect.gen(function*() {
    const ids = yield* IdGenerator
    const now = yield* Time.nowMicros
    const verdict = verdictOf(pinned, call, principal, now)
    const argumentsDigest = yield* Effect.either(Digest.canonical(call.input ?? null))
    const [gate, answer]: [GateOutcome, CallbackDecision] = Either.isLeft(argumentsDigest)
      ? [
        gateOf(undefined, false, "harness.arguments_not_canonical"),
        { decision: "deny", reason: "harness.arguments_not_canonical" }
      ]
      : [verdict.gate, verdict.decision]
    const draft = ledger.gateEvaluated(operation, gate, {
      result_id: yield* ids.uuid,
      evaluator: "writ.harness.callback",
      stage: verdict.stage,
      arguments_digest: Either.getOrElse(argumentsDigest, () => operation.arguments_digest),
      evaluated_at: Time.fromMicros(now)
    })
    const payload = { ...draft.payload, tool_call: { tool: call.tool, call_id: call.call_id, action: verdict.action } }
    const committed = yield* Effect.either(append([{ ...draft, payload }], false))
    return Either.isLeft(committed)
      ? { decision: "deny", reason: `writ could not record the decision: ${committed.left.detail}` } as const
      : answer
  })

/**
 * Open the run's operation on `boundary` (which must be under `snapshot`) with `policy_bound` and `operation_started`;
 * run it inside the writer's `track` so a close of the boundary waits for its end.
 */
export const start = (input: Start) =>
  Effect.gen(function*() {
    const { boundary, snapshot } = input
    if (boundary.policy.digest !== snapshot.digest) {
      return yield* new GovernedRunError({
        reason: "policy_mismatch",
        detail: `the boundary is under ${boundary.policy.policy_id}@${boundary.policy.version}, not the spec's snapshot`
      })
    }
    const writer = yield* EvidenceWriter
    const services = yield* Effect.context<IdGenerator | Digest.Digest>()
    const operation = yield* operationOf(input)
    const append: Append = (drafts, executed, ifCommitted) =>
      Effect.mapError(
        appendOperation(writer, boundary.chain_id, drafts, ifCommitted),
        (error) =>
          new GovernanceEvidenceError({
            call_executed: executed,
            record_type: drafts[0]!.record_type,
            operation_id: operation.operation_id,
            detail: failureDetail(error)
          })
      )
    yield* append(
      [ledger.policyBound(operation, snapshot), startedDraft(operation, input)],
      false,
      () => [terminalOf(operation, { _tag: "spawn_failed", detail: "the start's answer was lost" })]
    )
    const pinned = PolicyGate.pinned(snapshot)
    const decided: Array<{ readonly call: ToolCall; readonly decision: CallbackDecision }> = []
    let ended = false
    const decide = (call: ToolCall): Effect.Effect<CallbackDecision> =>
      ended
        ? Effect.succeed({ decision: "deny", reason: "the run has ended" })
        : decision(operation, pinned, input.principal, append, call).pipe(
          Effect.tap((answer) => Effect.sync(() => decided.push({ call, decision: answer }))),
          Effect.provide(services),
          Effect.withSpan("GovernedRun.decide")
        )
    const end = (how: End) =>
      Effect.suspend(() => {
        if (ended) {
          return Effect.fail(
            new GovernanceEvidenceError({
              call_executed: true,
              record_type: "callable_failed",
              operation_id: operation.operation_id,
              detail: "the run has already ended"
            })
          )
        }
        ended = true
        return Effect.map(append([terminalOf(operation, how)], true), (receipts) => receipts[0]!).pipe(
          Effect.ensuring(writer.release(boundary.chain_id, operation.operation_id))
        )
      })
    return { operation, decide, end, decisions: () => [...decided] } satisfies GovernedRun
  })
