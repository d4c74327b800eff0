import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema, TestClock } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor, layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base } from "../fixtures/layers.ts"

let shellCalls = 0
const actions = [
  Action.make({
    name: "shell.exec",
    aliases: ["run"],
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => {
      shellCalls++
      return `ran ${command}`
    }
  }),
  Action.make({ name: "notes.read", input: Schema.Struct({}), output: Schema.String, handler: () => "note" })
]

const layer = layerPolicyGated().pipe(
  Layer.provideMerge(
    Layer.merge(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer).pipe(Layer.provideMerge(base(actions)))
  )
)

const install = (declaration: Record<string, unknown>, activate = true) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const policy = Either.getOrThrow(PermissionPolicy.decode({ policy_id: "p", version: "1", ...declaration }))
    const snapshot = yield* Effect.orDie(PolicySnapshot.compile(policy))
    yield* store.put(snapshot)
    if (activate) yield* store.activate("p", "1", "ops", Time.fromMicros(0))
    return { policy_id: "p", version: "1", digest: snapshot.digest } satisfies PolicySnapshotRef
  })

const exec = (
  action: string,
  args: Record<string, unknown>,
  policy_snapshot?: PolicySnapshotRef,
  approval_id?: string
) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: "alice" },
      effect_backend: InProcessBackend.make.ref,
      ...(policy_snapshot === undefined ? {} : { policy_snapshot })
    })
    const request = ExecutionRequest.make({
      request_id: yield* IdGenerator.uuid,
      action: { name: action },
      arguments: args,
      execution_scope: scope,
      ...(approval_id === undefined ? {} : { approval_id: Uuid.make(approval_id) })
    })
    return yield* executor.execute(request, { context })
  })

const summary = (outcome: { readonly _tag: string; readonly stage: string } & object) =>
  `${outcome._tag} ${"reason" in outcome ? (outcome.reason as { code: string }).code : ""} @${outcome.stage}`.replace(
    "  ",
    " "
  )

describe("PolicyGate in the executor", () => {
  it.effect("allows, denies and escalates by the pinned snapshot, and the callable runs only when allowed", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      const before = shellCalls
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "succeeded @outcome")
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "rm -rf /" }, ref)),
        "denied policy.denied @policy"
      )
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref)),
        "escalated approval.required @policy"
      )
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls; rm x" }, ref)),
        "denied shell.control_operator @guard"
      )
      assert.strictEqual(shellCalls, before)
      const outcome = yield* exec("notes.read", {}, ref)
      assert.deepStrictEqual(outcome.decisions.map((d) => [d.evaluator, d.disposition, d.reason.code]), [
        ["policy.pin", "allow", "policy.pinned"],
        ["policy.guards", "allow", "guard.passed"],
        ["policy.rules", "allow", "policy.allowed"]
      ])
    }).pipe(Effect.provide(layer)))

  it.effect("a context without a snapshot, a staged snapshot, or a digest mismatch is denied before any gate", () =>
    Effect.gen(function*() {
      assert.strictEqual(summary(yield* exec("notes.read", {})), "denied policy.unbound @authorise")
      const ref = yield* install({ mode: "allow_all" }, false)
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied policy.not_active @authorise")
      const forged = { ...ref, digest: Sha256Hex.make("0".repeat(64)) }
      const outcome = yield* exec("notes.read", {}, forged)
      assert.strictEqual(summary(outcome), "denied policy.digest_mismatch @authorise")
      assert.strictEqual(outcome.decisions.length, 1)
    }).pipe(Effect.provide(layer)))

  it.effect("a version retired after a context pinned it is refused to that context, naming it retired", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "allow_all" })
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "succeeded @outcome")
      yield* (yield* PolicySnapshotStore).retire(ref.policy_id, ref.version, "auditor", Time.fromMicros(1))
      const outcome = yield* exec("notes.read", {}, ref)
      assert.strictEqual(summary(outcome), "denied policy.not_active @authorise")
      assert.strictEqual(
        (outcome as { readonly reason: { readonly detail?: string } }).reason.detail,
        `${ref.policy_id}@${ref.version} is retired`
      )
    }).pipe(Effect.provide(layer)))

  it.effect("decisions use the gate's own immutable copy: a store handing out a shared mutable snapshot cannot change them", () => {
    // A store that hands every reader one mutable object per policy version, as a careless custom store might.
    const handedOut = new Map<string, PolicySnapshot.PolicySnapshot>()
    const leaky = Layer.effect(
      PolicySnapshotStore,
      Effect.map(PolicySnapshotStore, (store) =>
        PolicySnapshotStore.of({
          ...store,
          get: (policy_id, version) =>
            Effect.map(store.get(policy_id, version), (snapshot) => {
              const key = `${policy_id}@${version}@${snapshot.release_state}`
              const shared = handedOut.get(key) ?? PolicySnapshot.PolicySnapshot.make({
                ...snapshot,
                compiled_rules: snapshot.compiled_rules.map((rule) => ({ ...rule }))
              })
              handedOut.set(key, shared)
              return shared
            })
        }))
    )
    return Effect.gen(function*() {
      const ref = yield* install({
        rules: [{ rule_id: "deny-all", kind: "action", effect: "deny", action_patterns: ["*"] }]
      })
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied policy.denied @policy")
      const shared = yield* (yield* PolicySnapshotStore).get("p", "1")
      ;(shared.compiled_rules[0] as { effect: string }).effect = "allow"
      const before = shellCalls
      assert.strictEqual(summary(yield* exec("shell.exec", { command: "ls" }, ref)), "denied policy.denied @policy")
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied policy.denied @policy")
      assert.strictEqual(shellCalls, before)
    }).pipe(Effect.provide(
      layerPolicyGated().pipe(
        Layer.provideMerge(leaky),
        Layer.provideMerge(
          Layer.merge(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer).pipe(
            Layer.provideMerge(base(actions))
          )
        )
      )
    ))
  })

  it.effect("soft gates escalate to a named approver; advisory gates record and allow", () =>
    Effect.gen(function*() {
      const ref = yield* install({
        approver_class: "lead",
        rules: [
          { rule_id: "allow-all", kind: "action", effect: "allow", action_patterns: ["*"] },
          { rule_id: "no-notes", kind: "action", effect: "deny", action_patterns: ["notes.read"] },
          { rule_id: "no-shell", kind: "action", effect: "deny", action_patterns: ["shell.exec"] },
          { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["nothing"] }
        ],
        gates: [
          { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-all", "ask"] },
          { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow-all", "no-shell"] },
          { gate_id: "lint", level: "advisory", order: 2, rule_ids: ["allow-all", "no-notes"] }
        ]
      })
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref)),
        "escalated approval.required @policy"
      )
      const notes = yield* exec("notes.read", {}, ref)
      assert.strictEqual(summary(notes), "succeeded @outcome")
      assert.include(notes.decisions.at(-1)!.reason.detail, "advisory: policy.denied (gate lint")
      // The allow references the gate result that denied it; a plain allow references none.
      assert.deepStrictEqual(notes.decisions.at(-1)!.evidence, ["gate:lint"])
      assert.isTrue(notes.decisions.every((decision, i, all) => i === all.length - 1 || decision.evidence.length === 0))
    }).pipe(Effect.provide(layer)))

  it.effect("a hard deny in a later gate outranks an escalation from an earlier soft gate", () =>
    Effect.gen(function*() {
      const ref = yield* install({
        approver_class: "lead",
        rules: [
          { rule_id: "allow-all", kind: "action", effect: "allow", action_patterns: ["*"] },
          { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["notes.read"] },
          { rule_id: "never", kind: "action", effect: "deny", action_patterns: ["notes.read"] }
        ],
        gates: [
          { gate_id: "review", level: "soft", order: 0, rule_ids: ["allow-all", "ask"] },
          { gate_id: "base", level: "hard", order: 1, rule_ids: ["allow-all", "never"] }
        ]
      })
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied policy.denied @policy")
    }).pipe(Effect.provide(layer)))

  it.effect("a deny written against an alias holds whatever name the call uses", () =>
    Effect.gen(function*() {
      const ref = yield* install({ deny: { run: ["*"] }, allow: { "*": ["*"] } })
      assert.strictEqual(summary(yield* exec("shell.exec", { command: "ls" }, ref)), "denied policy.denied @policy")
      assert.strictEqual(summary(yield* exec("run", { command: "ls" }, ref)), "denied policy.denied @policy")
    }).pipe(Effect.provide(layer)))

  it.effect("a gate applies only to the tools it names", () =>
    Effect.gen(function*() {
      const ref = yield* install({
        rules: [
          { rule_id: "all", kind: "action", effect: "allow", action_patterns: ["*"] },
          { rule_id: "no", kind: "action", effect: "deny", action_patterns: ["*"] }
        ],
        gates: [
          { gate_id: "base", level: "hard", order: 0, rule_ids: ["all"] },
          { gate_id: "notes-off", level: "hard", order: 1, tool_ids: ["notes.*"], rule_ids: ["no"] }
        ]
      })
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied policy.denied @policy")
      assert.strictEqual(summary(yield* exec("shell.exec", { command: "ls" }, ref)), "succeeded @outcome")
    }).pipe(Effect.provide(layer)))

  it.effect("a calls budget per window defers with budget.exhausted at stage 3 until the window ends, then refills", () =>
    Effect.gen(function*() {
      const ref = yield* install({
        mode: "allow_all",
        rules: [{ kind: "budget", effect: "limit", budget_kind: "calls", limit: 2, window_microseconds: 60_000_000 }]
      })
      const codes = []
      for (let i = 0; i < 3; i++) codes.push(summary(yield* exec("notes.read", {}, ref)))
      assert.deepStrictEqual(codes, [
        "succeeded @outcome",
        "succeeded @outcome",
        "deferred budget.exhausted @bind_context"
      ])
      yield* TestClock.adjust("61 seconds")
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "succeeded @outcome")
    }).pipe(Effect.provide(layer)))
})

describe("PolicyGate and the invocation's origin", () => {
  const agentB = InvocationContext.agent("agent-b")
  const originLayer = layerPolicyGated({}, { boundAgent: agentB }).pipe(
    Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base(actions))))
  )

  it.effect("origin comes from the host's invocation context, carried through the fiber, never from the request", () =>
    Effect.gen(function*() {
      const ref = yield* install({
        mode: "allow_all",
        rules: [{ kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] }]
      })
      const viaUser = InvocationContext.user(
        InvocationContext.human("h"),
        InvocationContext.agent("agent-a"),
        "alice",
        {}
      )
      const delegated = InvocationContext.delegateTo(viaUser, agentB, "alice", {})
      assert.strictEqual(
        summary(yield* InvocationContext.withInvocation(exec("notes.read", {}, ref), delegated)),
        "succeeded @outcome"
      )
      const own = InvocationContext.autonomous(agentB, "alice", {})
      assert.strictEqual(
        summary(yield* InvocationContext.withInvocation(exec("notes.read", {}, ref), own)),
        "denied origin.not_allowed @policy"
      )
      assert.strictEqual(
        summary(yield* exec("notes.read", { origin: "USER" }, ref)),
        "denied schema.invalid @normalise"
      )
      assert.strictEqual(summary(yield* exec("notes.read", {}, ref)), "denied origin.unknown @policy")
      assert.strictEqual(summary(yield* exec("shell.exec", { command: "ls" }, ref)), "succeeded @outcome")
    }).pipe(Effect.provide(originLayer)))
})

describe("an origin rule under a soft gate", () => {
  // A store written before such a gate was refused still serves it as active; the gate must not let an approval lift it.
  const earlierStore = Layer.effect(
    PolicySnapshotStore,
    Effect.map(MemoryPolicySnapshotStore.make, (store): PolicySnapshotStore.Service => ({
      ...store,
      get: (policy_id, version) =>
        Effect.map(store.get(policy_id, version), (snapshot) =>
          PolicySnapshot.immutable(
            PolicySnapshot.PolicySnapshot.make({
              ...snapshot,
              release_state: "active",
              activated_by: "earlier",
              activated_at: Time.fromMicros(0)
            })
          ))
    }))
  )
  const agent = InvocationContext.agent("agent-a")
  const earlierLayer = layerPolicyGated({}, { boundAgent: agent }).pipe(
    Layer.provideMerge(Layer.merge(earlierStore, MemoryApprovalQueue.layer).pipe(Layer.provideMerge(base(actions))))
  )

  it.effect("denies a SELF call to a USER-only action outright: it is never escalated, so no approval can allow it", () =>
    Effect.gen(function*() {
      const hard = Either.getOrThrow(PermissionPolicy.decode({
        policy_id: "p",
        version: "1",
        approver_class: "maintainer",
        rules: [
          { rule_id: "notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
          { rule_id: "users-only", kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER"] },
          // An expired window, which a soft gate escalates: the origin refusal must come first.
          { rule_id: "from-2100", kind: "expiry", effect: "allow", not_before: "2100-01-01T00:00:00.000000Z" }
        ],
        gates: [{ gate_id: "review", level: "hard", order: 0 }]
      }))
      const compiled = yield* Effect.orDie(PolicySnapshot.compile(hard))
      const gate_bindings = compiled.gate_bindings.map((gate) => ({ ...gate, level: "soft" as const }))
      const digest = yield* PolicySnapshot.recomputeDigest({ ...compiled, gate_bindings }).pipe(Effect.orDie)
      const snapshot = PolicySnapshot.PolicySnapshot.make({ ...compiled, gate_bindings, digest })
      yield* (yield* PolicySnapshotStore).put(snapshot)
      const ref = { policy_id: "p", version: "1", digest } satisfies PolicySnapshotRef
      const self = InvocationContext.autonomous(agent, "alice", {})
      const asUser = InvocationContext.user(InvocationContext.human("h"), agent, "alice", {})
      const selfCall = yield* InvocationContext.withInvocation(exec("notes.read", {}, ref), self)
      assert.strictEqual(summary(selfCall), "denied origin.not_allowed @policy")
      assert.deepStrictEqual(yield* (yield* ApprovalQueue).list({ state: "pending" }), [])
      const userCall = yield* InvocationContext.withInvocation(exec("notes.read", {}, ref), asUser)
      assert.strictEqual(summary(userCall), "escalated approval.required @policy", "a USER call meets only the expiry")
    }).pipe(Effect.provide(earlierLayer)))
})

describe("approval escalation", () => {
  const approver = { id: "maya", approver_class: "maintainer" }
  const escalate = (ref: PolicySnapshotRef, command = "ls") =>
    Effect.gen(function*() {
      const outcome = yield* exec("shell.exec", { command }, ref)
      assert.strictEqual(outcome._tag, "escalated")
      return outcome._tag === "escalated" ? outcome.approval! : undefined!
    })

  it.effect("escalation returns at once with an ApprovalRequest; the approval is a new attempt, usable once", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      const queue = yield* ApprovalQueue
      const before = shellCalls
      const approval = yield* escalate(ref)
      assert.strictEqual(approval.approver_class, "maintainer")
      assert.deepStrictEqual((yield* queue.list({ state: "pending" })).map((r) => r.request.approval_id), [
        approval.approval_id
      ])
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref, approval.approval_id)),
        "denied approval.pending @policy"
      )
      const wrong = yield* Effect.flip(queue.approve(approval.approval_id, { id: "eve", approver_class: "intern" }))
      assert.strictEqual(wrong.reason, "wrong_approver")
      yield* queue.approve(approval.approval_id, approver)
      const granted = yield* exec("shell.exec", { command: "ls" }, ref, approval.approval_id)
      assert.strictEqual(summary(granted), "succeeded @outcome")
      assert.strictEqual(granted.decisions.at(-1)!.reason.code, "approval.granted")
      assert.strictEqual(shellCalls, before + 1)
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref, approval.approval_id)),
        "denied approval.reused @policy"
      )
      assert.strictEqual(shellCalls, before + 1)
    }).pipe(Effect.provide(layer)))

  it.effect("a forged, mismatched, rejected or expired approval is denied with its own reason", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      const queue = yield* ApprovalQueue
      const forged = yield* exec("shell.exec", { command: "ls" }, ref, "00000000-0000-4000-8000-000000000000")
      assert.strictEqual(summary(forged), "denied approval.forged @policy")
      const forLs = yield* escalate(ref)
      yield* queue.approve(forLs.approval_id, approver)
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "make" }, ref, forLs.approval_id)),
        "denied approval.mismatched @policy"
      )
      const rejected = yield* escalate(ref)
      yield* queue.reject(rejected.approval_id, approver)
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref, rejected.approval_id)),
        "denied approval.rejected @policy"
      )
      const late = yield* escalate(ref)
      yield* queue.approve(late.approval_id, approver)
      yield* TestClock.adjust("2 hours")
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref, late.approval_id)),
        "denied approval.expired @policy"
      )
    }).pipe(Effect.provide(layer)))

  it.effect("an approval is bound to who asked: one filed for carol's request does not run mallory's", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      const agent = InvocationContext.agent("agent-a")
      const asking = (human: string) => InvocationContext.user(InvocationContext.human(human), agent, "alice", {})
      const run = (human: string, approval_id?: string) =>
        InvocationContext.withInvocation(exec("shell.exec", { command: "ls" }, ref, approval_id), asking(human))
      const escalated = yield* run("carol")
      assert.strictEqual(escalated._tag, "escalated")
      const approval = escalated._tag === "escalated" ? escalated.approval! : undefined!
      yield* (yield* ApprovalQueue).approve(approval.approval_id, approver)
      const before = shellCalls
      assert.strictEqual(summary(yield* run("mallory", approval.approval_id)), "denied approval.mismatched @policy")
      assert.strictEqual(summary(yield* run("carol", approval.approval_id)), "succeeded @outcome")
      assert.strictEqual(shellCalls, before + 1)
    }).pipe(Effect.provide(layer)))

  it.effect("a transformer that changes the arguments after the approval was used is a mismatch at the recheck", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      const queue = yield* ApprovalQueue
      const forLs = yield* escalate(ref)
      yield* queue.approve(forLs.approval_id, approver)
      const before = shellCalls
      const outcome = yield* exec("shell.exec", { command: "ls" }, ref, forLs.approval_id)
      assert.strictEqual(summary(outcome), "denied approval.mismatched @recheck")
      assert.deepStrictEqual(
        outcome.decisions.filter((d) => d.evaluator === "policy.rules").map((d) => d.reason.code),
        [
          "approval.granted",
          "approval.mismatched"
        ]
      )
      assert.strictEqual(shellCalls, before)
    }).pipe(Effect.provide(
      layerPolicyGated({
        transformers: [{
          id: "widen",
          transform: ({ arguments: args }) => Effect.succeed({ ...args, command: `${String(args.command)} -la` })
        }]
      }).pipe(
        Layer.provideMerge(
          Layer.merge(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer).pipe(
            Layer.provideMerge(base(actions))
          )
        )
      )
    )))

  it.effect("without an approval queue, escalation is a denial with its own reason", () =>
    Effect.gen(function*() {
      const ref = yield* install({ mode: "safe", approver_class: "maintainer" })
      assert.strictEqual(
        summary(yield* exec("shell.exec", { command: "ls" }, ref)),
        "denied approval.no_authority @policy"
      )
    }).pipe(Effect.provide(
      layerPolicyGated().pipe(
        Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base(actions))))
      )
    )))
})
