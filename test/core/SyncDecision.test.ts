import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Option, Schema } from "effect"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionRegistry } from "../../core/action/ActionRegistry.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { ActionRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicyGate from "../../core/policy/PolicyGate.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { call, executor, run } from "../fixtures/layers.ts"

let evaluated = 0
const echo = Action.make({
  name: "echo",
  input: Schema.Struct({ x: Schema.Number }),
  output: Schema.Number,
  handler: ({ x }) => x
})

const interceptor = (decide: NonNullable<Interceptor.Interceptor["decide"]>): Interceptor.Interceptor => ({
  id: "decides",
  stage: "policy",
  evaluate: () =>
    Effect.sync(() => {
      evaluated++
      return Interceptor.allow("test.evaluated")
    }),
  decide
})

const decisionOf = (decide: NonNullable<Interceptor.Interceptor["decide"]>) =>
  Effect.map(
    run("echo", { x: 1 }),
    (outcome) => ({
      tag: outcome._tag,
      codes: outcome.decisions.map((decision) => decision.reason.code),
      evaluated
    })
  ).pipe(Effect.provide(executor([echo], { interceptors: [interceptor(decide)] })))

describe("synchronous decisions", () => {
  it.effect("a verdict `decide` answers is bound without running `evaluate`", () =>
    Effect.gen(function*() {
      evaluated = 0
      const denied = yield* decisionOf(() => Interceptor.deny("test.decided_no"))
      assert.deepStrictEqual(denied, { tag: "denied", codes: ["test.decided_no"], evaluated: 0 })
      const allowed = yield* decisionOf(() => Interceptor.allow("test.decided_yes"))
      assert.deepStrictEqual(allowed, { tag: "succeeded", codes: ["test.decided_yes"], evaluated: 0 })
    }))

  it.effect("`decide` answering undefined leaves the decision to `evaluate`", () =>
    Effect.gen(function*() {
      evaluated = 0
      assert.deepStrictEqual(yield* decisionOf(() => undefined), {
        tag: "succeeded",
        codes: ["test.evaluated"],
        evaluated: 1
      })
    }))

  it.effect("`decide` throwing or answering a non-verdict is an evaluator error, and nothing runs", () =>
    Effect.gen(function*() {
      evaluated = 0
      const thrown = yield* decisionOf(() => {
        throw new Error("boom")
      })
      assert.deepStrictEqual(thrown, { tag: "denied", codes: ["control.evaluator_error"], evaluated: 0 })
      const garbage = yield* decisionOf(() => ({ disposition: "maybe" }) as unknown as Interceptor.Verdict)
      assert.deepStrictEqual(garbage, { tag: "denied", codes: ["control.evaluator_error"], evaluated: 0 })
    }))

  it.effect("Interceptor.make decides synchronously with the same verdict its evaluate answers", () =>
    Effect.gen(function*() {
      const made = Interceptor.make(
        "made",
        "guard",
        ({ arguments: args }) => args.x === 1 ? Interceptor.allow() : Interceptor.deny("made.no")
      )
      const evaluation = { arguments: { x: 2 } } as unknown as Interceptor.Evaluation
      const moment: Interceptor.Moment = { micros: () => 0, invocation: Option.none() }
      assert.deepStrictEqual(made.decide?.(evaluation, moment), yield* made.evaluate(evaluation))
    }))
})

// The policy gate's synchronous decisions against its Effect ones, over a pinned snapshot, for each kind of result.
const shell = Action.make({
  name: "shell.exec",
  input: Schema.Struct({ command: Schema.String }),
  output: Schema.String,
  effects: ["shell.exec"],
  handler: ({ command }) => command
})
const notes = Action.make({ name: "notes.read", input: Schema.Struct({}), output: Schema.String, handler: () => "" })

const policies: ReadonlyArray<Record<string, unknown>> = [
  { mode: "safe", approver_class: "maintainer" },
  { mode: "allow_all" },
  {
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
  },
  {
    rules: [
      { rule_id: "all", kind: "action", effect: "allow", action_patterns: ["*"] },
      { kind: "budget", effect: "limit", budget_kind: "calls", limit: 5, action_patterns: ["notes.*"] }
    ]
  }
]

const calls: ReadonlyArray<readonly [Action.ActionDefinition, Record<string, unknown>]> = [
  [notes, {}],
  [shell, { command: "ls" }],
  [shell, { command: "rm -rf /" }],
  [shell, { command: "ls; rm x" }]
]

const gateLayer = Layer.merge(MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer).pipe(
  Layer.provideMerge(executor([shell, notes]))
)

describe("the policy gate's synchronous decisions", () => {
  it.effect("agree with its evaluation wherever it decides, and decide every allow and deny without a budget or approval", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const registry = yield* ActionRegistry
      const gate = yield* PolicyGate.make()
      const moment: Interceptor.Moment = { micros: () => 0, invocation: Option.none() }
      let decided = 0
      let deferred = 0
      for (const [i, declaration] of policies.entries()) {
        const policy = Either.getOrThrow(PermissionPolicy.decode({ policy_id: `p${i}`, version: "1", ...declaration }))
        const snapshot = yield* Effect.orDie(PolicySnapshot.compile(policy))
        yield* store.put(snapshot)
        yield* store.activate(`p${i}`, "1", "ops", Time.fromMicros(0))
        const pinned = yield* store.get(`p${i}`, "1")
        for (const [action, args] of calls) {
          const { context, request } = yield* call(action.name, args)
          const { descriptor } = Either.getOrThrow(registry.resolve(ActionRef.make({ name: action.name })))
          const evaluation: Interceptor.Evaluation = {
            attempt_id: `attempt-${i}-${action.name}`,
            request,
            context,
            descriptor,
            arguments: args,
            arguments_digest: Sha256Hex.make("0".repeat(64)),
            snapshot: pinned
          }
          for (const interceptor of gate.interceptors) {
            // Evaluated first: the snapshot is verified and compiled once by the Effect path, then decided on.
            const verdict = yield* interceptor.evaluate(evaluation)
            const now = interceptor.decide?.(evaluation, moment)
            if (now === undefined) {
              deferred++
              assert.isTrue(
                verdict.disposition === "escalate" ||
                  (i === 3 && action === notes && interceptor.id === "policy.rules"),
                `${interceptor.id} p${i} ${action.name} ${JSON.stringify(args)} left ${verdict.code} to evaluate`
              )
            } else {
              decided++
              assert.deepStrictEqual(now, verdict, `${interceptor.id} p${i} ${action.name} ${JSON.stringify(args)}`)
            }
          }
        }
      }
      assert.isAbove(decided, 30)
      assert.isAbove(deferred, 0)
    }).pipe(Effect.provide(gateLayer)))
})
