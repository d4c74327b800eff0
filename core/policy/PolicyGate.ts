/**
 * The policy as executor interceptors: pin the exact snapshot the context names (stage 5), run
 * each gate's intrinsic guards (stage 6) and action policy with budgets (stage 7), and reduce
 * hard, soft and advisory gate results the seed's way. A budget counts per snapshot, rule,
 * principal and window: calls are charged at stage 7; wall time, tokens and cost are charged
 * after the call (see ActionUsage), to the window in which it concluded, so stage 7 denies once
 * the window's consumed amount has reached the limit and a call in flight may overrun it once.
 */
import { Effect, Either, Option } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import type { Usage } from "../action/ActionUsage.ts"
import * as Approval from "../approval/Approval.ts"
import { Digest } from "../base/Digest.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import type { ExecutionContext } from "../execution/ExecutionContext.ts"
import type { Allowed, Evaluation, GateOutcome, Referred, Refused, Verdict } from "../execution/Interceptor.ts"
import * as Interceptor from "../execution/Interceptor.ts"
import { glob } from "./internal/glob.ts"
import type { AgentSubject } from "./InvocationContext.ts"
import { currentInvocation } from "./InvocationContext.ts"
import { defaultApprovalLifetime } from "./PermissionPolicy.ts"
import type { CompiledGate, Part, PolicyDecision, PolicyInput } from "./PolicyEvaluator.ts"
import * as PolicyEvaluator from "./PolicyEvaluator.ts"
import { normalise, PathResolver } from "./PolicyPath.ts"
import type { BudgetRule } from "./PolicyRule.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"
import { immutable, recomputeDigest } from "./PolicySnapshot.ts"
import { PolicySnapshotStore } from "./PolicySnapshotStore.ts"

/** How the gate is bound to its host. */
export interface Options {
  /** The real executing agent this executor acts as; origin rules require the invocation's agent to be it. */
  readonly boundAgent?: AgentSubject
}

/** A snapshot compiled for evaluation, with the approver its soft gates escalate to. */
export interface Pinned {
  readonly snapshot: PolicySnapshot
  readonly gates: ReadonlyArray<CompiledGate>
  readonly approver: string | undefined
  /** Whether a gate's guard deny can let the call go on to the policy stage: an advisory one, or a soft one an approval resolves. */
  readonly guardsPass: boolean
}

/** The MCP tool, secrets and environment variables an action declares: what its guards check. */
const declaredNeeds = ({ environment, mcp, secrets }: ActionDescriptor) => ({
  ...(mcp === undefined ? {} : { mcp }),
  ...(secrets === undefined ? {} : { secrets }),
  ...(environment === undefined ? {} : { environment })
})

// The approver class the snapshot's soft gates escalate to: its first approval rule's.
const approverOf = (snapshot: PolicySnapshot) =>
  snapshot.compiled_rules.flatMap((rule) =>
    rule.kind === "approval" && rule.approver_class !== null ? [rule.approver_class] : []
  )[0]

/** Compile a snapshot for evaluation. */
export const pinned = (snapshot: PolicySnapshot): Pinned => {
  const approver = approverOf(snapshot)
  return {
    snapshot,
    gates: PolicyEvaluator.compile(snapshot),
    approver,
    guardsPass: snapshot.gate_bindings.some((gate) =>
      gate.level === "advisory" || (gate.level === "soft" && approver !== undefined)
    )
  }
}

const describe = (gate: CompiledGate, decision: PolicyDecision) =>
  [
    `gate ${gate.gate.gate_id} (${gate.gate.level})`,
    decision.matched_rules.length > 0 ? `rules ${decision.matched_rules.join(",")}` : undefined,
    decision.detail
  ]
    .filter((part) => part !== undefined)
    .join("; ")

/** A reduced verdict (the policy never defers); an escalation names the approver class, how long its approval may live, and whether it resolves a soft deny. */
export type Reduced = (Allowed | Refused | Referred) & {
  readonly approver_class?: string
  readonly expires_after?: number
  readonly soft_deny?: boolean
  /** The gates whose own rules required the approval; a presented approval satisfies them. */
  readonly approval_gates?: ReadonlyArray<string>
}

const withDetail = (detail: string | undefined) => detail === undefined ? {} : { detail }

const refusal = (gate_id: string, code: string): GateOutcome => ({
  gate_id,
  level: "hard",
  decision: "deny",
  reason_code: code,
  matched_rules: []
})

/** Reduce gate results in gate order: hard deny denies; soft deny escalates when an approver is named; advisory deny is recorded. */
export const reduce = (pinned: Pinned, part: Part, input: PolicyInput): Reduced => {
  const refused = part === "guard"
    ? PolicyEvaluator.intrinsicRefusal(input)
    : PolicyEvaluator.scopeRefusal(pinned.gates[0]!, input) ?? PolicyEvaluator.invocationRefusal(input)
  if (refused !== undefined) {
    const gate_id = part === "guard" ? "writ.intrinsic" : "writ.scope"
    return { ...Interceptor.deny(refused.code, refused.detail), gates: [refusal(gate_id, refused.code)] }
  }
  const advisories: Array<string> = []
  const gates: Array<GateOutcome> = []
  const approvalGates: Array<string> = []
  let softDenied = false
  let escalation: Reduced | undefined
  const applicable = pinned.gates.filter((gate) => gate.tools.some((tool) => tool.test(input.action)))
  if (applicable.length === 0) {
    return {
      ...Interceptor.deny("policy.no_gate_binding", `no gate binds ${input.action}`),
      gates: [refusal("writ.binding", "policy.no_gate_binding")]
    }
  }
  for (const gate of applicable) {
    const decision = PolicyEvaluator.evaluate(gate, part, input)
    gates.push({
      gate_id: gate.gate.gate_id,
      level: gate.gate.level,
      decision: decision.disposition === "allow" ? "allow" : "deny",
      reason_code: decision.code,
      matched_rules: decision.matched_rules
    })
    if (decision.disposition === "allow") continue
    if (decision.disposition === "escalate") approvalGates.push(gate.gate.gate_id)
    const why = describe(gate, decision)
    if (gate.gate.level === "advisory") {
      advisories.push(`${decision.code} (${why})`)
      continue
    }
    // Hard gates deny outright (as do writ's intrinsic guards, above); a hard deny in any gate outranks an escalation
    // from another.
    if (decision.disposition === "deny" && !(gate.gate.level === "soft" && pinned.approver !== undefined)) {
      return { ...Interceptor.deny(decision.code, why), gates }
    }
    if (decision.disposition === "deny") softDenied = true
    escalation ??= decision.disposition === "escalate"
      ? {
        ...Interceptor.escalate(decision.code, { detail: why }),
        approver_class: decision.approver_class!,
        expires_after: decision.approval_expires_after_microseconds ?? defaultApprovalLifetime
      }
      : {
        ...Interceptor.escalate("approval.required", { detail: `${decision.code}: ${why}` }),
        approver_class: pinned.approver!,
        expires_after: defaultApprovalLifetime
      }
  }
  if (escalation !== undefined) return { ...escalation, soft_deny: softDenied, approval_gates: approvalGates, gates }
  return {
    ...Interceptor.allow(
      part === "guard" ? "guard.passed" : "policy.allowed",
      advisories.length > 0 ? `advisory: ${advisories.join(", ")}` : undefined
    ),
    gates
  }
}

/** Stage by stage: the guards, then the action policy; the first refusal stands. */
export const explain = (snapshot: Pinned, input: PolicyInput): Reduced & { readonly stage: Part } => {
  const guards = reduce(snapshot, "guard", input)
  return guards.disposition !== "allow"
    ? { ...guards, stage: "guard" }
    : { ...reduce(snapshot, "policy", input), stage: "policy" }
}

/** Pin the snapshot a context names: the compiled snapshot, or the refusal. */
export type Pin = (context: ExecutionContext, attempt_id?: string) => Effect.Effect<Either.Either<Pinned, Verdict>>

/** Read the exact snapshot a context names from the store in context, check it is active and recomputes to its digest, and compile it once. */
export const makePin = Effect.gen(function*() {
  const store = yield* PolicySnapshotStore
  const digest = yield* Digest
  const compiled = new Map<string, Pinned>()
  // One read per attempt: every stage of one invocation sees the snapshot its stage 3 (or 5) read.
  const recent = new Map<string, Either.Either<Pinned, Verdict>>()
  const pin: Pin = (context, attempt_id) => {
    const seen = attempt_id === undefined ? undefined : recent.get(attempt_id)
    if (seen !== undefined) return Effect.succeed(seen)
    return Effect.tap(read(context), (result) =>
      Effect.sync(() => {
        if (attempt_id === undefined) return
        recent.set(attempt_id, result)
        if (recent.size > 4096) recent.delete(recent.keys().next().value!)
      }))
  }
  const read = (context: ExecutionContext): Effect.Effect<Either.Either<Pinned, Verdict>> =>
    Effect.gen(function*() {
      const ref = context.policy_snapshot
      if (ref === undefined) {
        return Either.left(Interceptor.deny("policy.unbound", "the context names no policy snapshot"))
      }
      const cached = compiled.get(ref.digest)
      const stored = yield* Effect.either(store.get(ref.policy_id, ref.version))
      if (Either.isLeft(stored)) return Either.left(Interceptor.deny("policy.not_found", stored.left.message))
      const snapshot = stored.right
      if (snapshot.digest !== ref.digest) {
        return Either.left(
          Interceptor.deny("policy.digest_mismatch", `${ref.policy_id}@${ref.version} is not the pinned snapshot`)
        )
      }
      if (snapshot.release_state !== "active") {
        return Either.left(Interceptor.deny("policy.not_active", `${ref.policy_id}@${ref.version} is staged`))
      }
      // The compiled snapshot was verified against this digest when it was cached; decisions use it, not the store's copy.
      if (cached !== undefined) return Either.right(cached)
      // Its own immutable copy (the same snapshot when the store's is one), so no holder of the store's can change it.
      const own = immutable(snapshot)
      const recomputed = yield* Effect.either(Effect.provideService(recomputeDigest(own), Digest, digest))
      if (Either.isLeft(recomputed) || recomputed.right !== ref.digest) {
        return Either.left(
          Interceptor.deny("policy.digest_mismatch", "the stored snapshot's content does not recompute to its digest")
        )
      }
      const compiledSnapshot = pinned(own)
      compiled.set(ref.digest, compiledSnapshot)
      return Either.right(compiledSnapshot)
    })

  return pin
})

/** The policy interceptors, reading snapshots from the PolicySnapshotStore in context. */
export const make = (options: Options = {}, pin?: Pin) =>
  Effect.gen(function*() {
    const digest = yield* Digest
    const ids = yield* IdGenerator
    const pinContext = pin ?? (yield* makePin)
    const queue = yield* Effect.serviceOption(Approval.ApprovalQueue)
    const paths = yield* Effect.serviceOption(PathResolver)
    // One entry per snapshot, rule and principal, for its current window only: the attempts a calls budget admitted
    // (at most its limit), or the amount consumed under any other kind.
    const budgets = new Map<string, { readonly window: number; readonly attempts: Set<string>; consumed: number }>()
    // The approval each recent attempt consumed, and for which binding: a recheck (stage 10) must not consume it again.
    const consumed = new Map<string, { readonly binding: string; readonly request: Approval.ApprovalRequest }>()

    const inputOf = (evaluation: Evaluation) =>
      Effect.gen(function*() {
        const invocation = yield* currentInvocation
        const path = typeof evaluation.arguments.path === "string" ? normalise(evaluation.arguments.path) : undefined
        const resolved_path = path === undefined || Option.isNone(paths) ? undefined : yield* paths.value.resolve(path)
        const input: PolicyInput = {
          action: evaluation.descriptor.name,
          aliases: evaluation.descriptor.aliases,
          effects: evaluation.descriptor.effects,
          arguments: evaluation.arguments,
          principal: evaluation.context.authenticated_principal.id,
          now: yield* Time.nowMicros,
          ...(evaluation.context.tenant === undefined ? {} : { tenant: evaluation.context.tenant.id }),
          ...(invocation._tag === "None" ? {} : { invocation: invocation.value }),
          ...(resolved_path === undefined ? {} : { resolved_path }),
          ...(options.boundAgent === undefined ? {} : { bound_agent: options.boundAgent }),
          ...declaredNeeds(evaluation.descriptor)
        }
        return input
      })

    // A budget written against an alias binds the action whatever name the call used, as a deny does.
    const budgetsOf = (pinned: Pinned, names: ReadonlyArray<string>): ReadonlyArray<typeof BudgetRule.Type> =>
      pinned.snapshot.compiled_rules.filter((rule): rule is typeof BudgetRule.Type =>
        rule.kind === "budget" &&
        rule.action_patterns.some((pattern) => names.some((name) => glob(pattern).test(name)))
      )

    const windowOf = (pinned: Pinned, rule: typeof BudgetRule.Type, principal: string, now: number) => {
      const key = `${pinned.snapshot.digest}:${rule.rule_id}:${principal}`
      const window = Math.floor(now / rule.window_microseconds)
      const entry = budgets.get(key)
      if (entry !== undefined && entry.window === window) return entry
      const current = { window, attempts: new Set<string>(), consumed: 0 }
      budgets.set(key, current)
      return current
    }

    const exhausted = (rule: typeof BudgetRule.Type, consumed: number) =>
      Interceptor.deny(
        "budget.exhausted",
        `rule ${rule.rule_id}: ${consumed} of ${rule.limit} ${rule.budget_kind} per ${rule.window_microseconds} µs`
      )

    /** Stage 7: deny when a matching window is spent; otherwise admit, charging each calls budget once per attempt. */
    const charge = (
      pinned: Pinned,
      rules: ReadonlyArray<typeof BudgetRule.Type>,
      input: PolicyInput,
      attempt_id: string
    ): Refused | undefined => {
      for (const rule of rules) {
        if (rule.budget_kind === "calls") continue
        const spent = windowOf(pinned, rule, input.principal, input.now)
        if (spent.consumed >= rule.limit) return exhausted(rule, spent.consumed)
      }
      for (const rule of rules) {
        if (rule.budget_kind !== "calls") continue
        const spent = windowOf(pinned, rule, input.principal, input.now)
        if (spent.attempts.has(attempt_id)) continue
        if (spent.attempts.size >= rule.limit) return exhausted(rule, spent.attempts.size)
        spent.attempts.add(attempt_id)
      }
      return undefined
    }

    /** After the call: charge what it consumed to each matching wall-time, token and cost budget. */
    const chargeUsage = (evaluation: Evaluation, usage: Usage) =>
      Effect.gen(function*() {
        const pinned = yield* pinContext(evaluation.context, evaluation.attempt_id)
        if (Either.isLeft(pinned)) return
        const now = yield* Time.nowMicros
        for (const rule of budgetsOf(pinned.right, [evaluation.descriptor.name, ...evaluation.descriptor.aliases])) {
          if (rule.budget_kind === "calls") continue
          windowOf(pinned.right, rule, evaluation.context.authenticated_principal.id, now).consumed +=
            usage[rule.budget_kind]
        }
      })

    /** An allowed verdict, unless a budget is spent; metered when a wall-time, token or cost budget binds the action. */
    const charged = (pinned: Pinned, input: PolicyInput, evaluation: Evaluation, allowed: Allowed): Verdict => {
      const rules = budgetsOf(pinned, [input.action, ...(input.aliases ?? [])])
      if (rules.length === 0) return allowed
      const spent = charge(pinned, rules, input, evaluation.attempt_id)
      if (spent !== undefined) {
        return { ...spent, gates: [...(allowed.gates ?? []), refusal("writ.budget", spent.code)] }
      }
      return rules.some((rule) => rule.budget_kind !== "calls") ? { ...allowed, metered: true } : allowed
    }

    const bindingOf = (pinned: Pinned, evaluation: Evaluation, input: PolicyInput) =>
      Approval.bindingDigest({
        action: input.action,
        action_digest: evaluation.descriptor.digest,
        arguments_digest: evaluation.arguments_digest,
        principal: input.principal,
        tenant: input.tenant ?? null,
        origin: input.invocation === undefined || input.invocation._tag === "unknown"
          ? null
          : {
            executing_agent: input.invocation.executing_agent.id,
            human: input.invocation.human?.id ?? null,
            calling_agent: input.invocation.calling_agent?.id ?? null,
            origins: input.invocation.origins
          },
        policy: {
          policy_id: pinned.snapshot.policy_id,
          version: pinned.snapshot.version,
          digest: pinned.snapshot.digest
        }
      }).pipe(Effect.provideService(Digest, digest), Effect.orDie)

    /** Consume a presented approval once per attempt; the attempt that consumed it, rechecking other arguments, is a mismatch. */
    const consumeOnce = (
      approvals: Approval.ApprovalQueue.Service,
      attempt_id: string,
      approval_id: string,
      binding: string,
      now: number,
      request_id: string
    ): Effect.Effect<Either.Either<Approval.ApprovalRequest, Approval.ApprovalError>> => {
      const earlier = consumed.get(attempt_id)
      if (earlier !== undefined && earlier.request.approval_id === approval_id) {
        return Effect.succeed(
          earlier.binding === binding
            ? Either.right(earlier.request)
            : Either.left(new Approval.ApprovalError({ reason: "mismatched", approval_id }))
        )
      }
      return Effect.tap(
        Effect.either(approvals.consume(approval_id, binding, Time.fromMicros(now), request_id)),
        (used) =>
          Effect.sync(() => {
            if (Either.isLeft(used)) {
              return
            }
            consumed.set(attempt_id, { binding, request: used.right })
            if (consumed.size > 4096) {
              consumed.delete(consumed.keys().next().value!)
            }
          })
      )
    }

    /** Escalate without blocking: use a presented approval once, or file a new request and return at once. */
    const escalate = (pinned: Pinned, evaluation: Evaluation, input: PolicyInput, result: Reduced) =>
      Effect.gen(function*() {
        if (Option.isNone(queue)) {
          return {
            ...Interceptor.deny("approval.no_authority", "approval is required but no approval queue is configured"),
            gates: result.gates ?? []
          }
        }
        const binding = yield* bindingOf(pinned, evaluation, input)
        const presented = evaluation.request.approval_id
        if (presented !== undefined) {
          const used = yield* consumeOnce(
            queue.value,
            evaluation.attempt_id,
            presented,
            binding,
            input.now,
            evaluation.request.request_id
          )
          if (Either.isLeft(used)) {
            return { ...Interceptor.deny(`approval.${used.left.reason}`, used.left.message), gates: result.gates ?? [] }
          }
          // A required approval, presented, satisfies its gates; a soft deny stays a deny, passed by a recorded exception.
          const gates = (result.gates ?? []).map((gate) =>
            gate.decision === "deny" && result.approval_gates?.includes(gate.gate_id) === true
              ? { ...gate, decision: "allow" as const, reason_code: "approval.granted" }
              : gate
          )
          const granted = {
            ...Interceptor.allow("approval.granted", `approval ${presented} by ${used.right.approver_class}`),
            gates
          }
          return result.soft_deny === true
            ? {
              ...granted,
              exception: { approval_id: presented, approver_class: used.right.approver_class, reason_code: result.code }
            }
            : granted
        }
        const request = Approval.ApprovalRequest.make({
          approval_id: yield* ids.uuid,
          binding_digest: binding,
          action: input.action,
          principal: input.principal,
          approver_class: result.approver_class!,
          policy: {
            policy_id: pinned.snapshot.policy_id,
            version: pinned.snapshot.version,
            digest: pinned.snapshot.digest
          },
          requested_at: Time.fromMicros(input.now),
          expires_at: Time.fromMicros(input.now + result.expires_after!),
          request_id: evaluation.request.request_id
        })
        yield* queue.value.submit(request)
        return {
          ...Interceptor.escalate(result.code, withDetail(result.detail)),
          approval: request,
          gates: result.gates ?? []
        }
      })

    const run = (part: Part) => (evaluation: Evaluation) =>
      Effect.gen(function*() {
        const pinned = yield* pinContext(evaluation.context, evaluation.attempt_id)
        if (Either.isLeft(pinned)) {
          return pinned.left
        }
        const input = yield* inputOf(evaluation)
        const result = reduce(pinned.right, part, input)
        // A gate's result is recorded once: at the policy stage, unless its guard part already refused. A soft guard
        // deny escalates here, and an approval presented for it lets the call go on.
        if (part === "guard") {
          const guarded = result.disposition === "escalate"
            ? yield* escalate(pinned.right, evaluation, input, result)
            : result
          return guarded.disposition === "allow"
            ? {
              ...guarded,
              gates: (guarded.gates ?? []).filter((gate) => gate.decision === "deny")
            }
            : guarded
        }
        // A gate whose guard part denied was recorded at the guard stage: its policy part adds no second result (only
        // an advisory gate's guard deny, or a soft one an approval resolved, lets the call get here).
        const guarded = pinned.right.guardsPass ? reduce(pinned.right, "guard", input).gates ?? [] : []
        if (guarded.some((gate) => gate.decision === "deny")) {
          const recorded = new Set(guarded.flatMap((gate) => gate.decision === "deny" ? [gate.gate_id] : []))
          return yield* settled(pinned.right, input, evaluation, {
            ...result,
            gates: (result.gates ?? []).filter((gate) => !recorded.has(gate.gate_id))
          })
        }
        return yield* settled(pinned.right, input, evaluation, result)
      })

    const settled = (pinned: Pinned, input: PolicyInput, evaluation: Evaluation, result: Reduced) =>
      Effect.gen(function*() {
        if (result.disposition === "deny") return result
        if (result.disposition === "escalate") {
          const escalated = yield* escalate(pinned, evaluation, input, result)
          return escalated.disposition === "allow" ? charged(pinned, input, evaluation, escalated) : escalated
        }
        return charged(pinned, input, evaluation, result)
      })

    const interceptors: ReadonlyArray<Interceptor.Interceptor> = [
      {
        id: "policy.pin",
        stage: "authorise",
        evaluate: (evaluation) =>
          Effect.map(
            pinContext(evaluation.context, evaluation.attempt_id),
            Either.match({
              onLeft: (refused) => refused,
              onRight: ({ snapshot }) => ({
                ...Interceptor.allow("policy.pinned", `${snapshot.policy_id}@${snapshot.version}`),
                gates: []
              })
            })
          )
      },
      { id: "policy.guards", stage: "guard", evaluate: run("guard") },
      { id: "policy.rules", stage: "policy", evaluate: run("policy"), charge: chargeUsage }
    ]
    return interceptors
  })
