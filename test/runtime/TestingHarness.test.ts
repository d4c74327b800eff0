import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import fc from "fast-check"
import * as Action from "../../core/action/Action.ts"
import type * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import * as Testing from "../../runtime/Testing.ts"

const actions = [
  Action.make({
    name: "shell.exec",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => `ran ${command}`
  }),
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: () => "ok"
  }),
  Action.make({
    name: "files.read",
    input: Schema.Struct({ path: Schema.String }),
    output: Schema.String,
    handler: ({ path }) => path
  })
]

const policy = {
  policy_id: "repo-agent",
  version: "1",
  mode: "safe",
  approver_class: "maintainer",
  deny: { "files.read": ["/etc/*"] },
  rules: [{ kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] }]
} as const

const open = { policy_id: "open", version: "1", mode: "allow_all" } as const

const noSelfNotes = Testing.property(
  "no SELF call reaches notes.write",
  (call, outcome) =>
    !(call.action === "notes.write" && call.origin._tag === "autonomous" && outcome._tag === "succeeded")
)

/** The violation a check must fail with (any other error fails the test). */
const flip = <A>(effect: Effect.Effect<A, Testing.PropertyViolation | Testing.SetupError>) =>
  Effect.flatMap(
    Effect.flip(effect),
    (error) => error._tag === "PropertyViolation" ? Effect.succeed(error) : Effect.die(error)
  )

describe("Testing.check", () => {
  it.effect("the executor's laws hold for a policy on both profiles, over allowed, denied and escalated calls", () =>
    Effect.gen(function*() {
      const report = yield* Testing.checkEffect({ policy, actions, properties: Testing.laws(), runs: 60, seed: 1 })
      assert.strictEqual(report.runs, 60)
      const kinds = Object.keys(report.outcomes).map((key) => key.split(" ")[0])
      for (const kind of ["succeeded", "denied", "escalated"]) assert.include(kinds, kind)
      assert.isAbove(report.steps, 60)
    }))

  it.effect("a property the policy breaks fails with the shrunk call, its outcome and its decision trail", () =>
    Effect.gen(function*() {
      const error = yield* flip(Testing.checkEffect({ policy: open, actions, properties: [noSelfNotes], seed: 3 }))
      assert.strictEqual(error._tag, "PropertyViolation")
      assert.strictEqual(error.property, "no SELF call reaches notes.write")
      const call = error.call as Testing.Call
      assert.strictEqual(call.action, "notes.write")
      assert.strictEqual(call.origin._tag, "autonomous")
      // Shrunk: the smallest valid arguments, no replay, no tenant.
      assert.deepStrictEqual(call.arguments, { text: "" })
      assert.isUndefined(call.replay)
      assert.strictEqual(error.outcome, "succeeded ok")
      assert.include(error.message, "policy policy.rules: allow policy.allowed")
      assert.include(error.message, "const call: Testing.Call = {")
      assert.include(error.message, `Testing.replay({ policy, actions }, call, "${error.profile}")`)
    }))

  it.effect("the same property holds under the policy that refuses SELF notes", () =>
    Effect.map(
      Testing.checkEffect({ policy, actions, properties: [noSelfNotes], runs: 60, seed: 3 }),
      (report) => assert.strictEqual(report.runs, 60)
    ))

  it.effect("two actions under one name are a typed setup error, raised once before any call", () =>
    Effect.gen(function*() {
      const twice = [...actions, actions[1]!]
      const error = yield* Effect.flip(
        Testing.checkEffect({ policy, actions: twice, properties: Testing.laws(), seed: 1 })
      )
      assert.strictEqual(error._tag, "ActionCollisionError")
    }))

  it.effect("a failure replays exactly: the pasted call gives the same steps, ids included", () =>
    Effect.gen(function*() {
      const error = yield* flip(Testing.checkEffect({ policy: open, actions, properties: [noSelfNotes], seed: 3 }))
      const call = error.call as Testing.Call
      const first = yield* Testing.replayEffect({ policy: open, actions }, call, "governed")
      const again = yield* Testing.replayEffect({ policy: open, actions }, call, "governed")
      assert.deepStrictEqual(first.map((s) => s.outcome), again.map((s) => s.outcome))
      assert.strictEqual(first[0]?.outcome?._tag, "succeeded")
    }))

  it.effect("law: a child never allows what its parent denies; an uncomposed child that does is found", () =>
    Effect.gen(function*() {
      const parent = {
        ...policy,
        policy_id: "parent",
        deny: { "files.read": ["/etc/*"], "notes.write": ["*"] }
      } as const
      const child = { ...open, policy_id: "child" }
      const error = yield* flip(
        Testing.checkEffect({ policy: child, actions, properties: [Testing.childWithinParent(parent)], seed: 2 })
      )
      assert.strictEqual(error.property, "a child never allows what its parent denies")
      const call = error.call as Testing.Call
      assert.include(["notes.write", "files.read"], call.action)
      assert.strictEqual(error.outcome, "succeeded ok")
      yield* Testing.checkEffect({ policy: parent, actions, properties: [Testing.childWithinParent(parent)], runs: 40 })
    }))

  it.effect("sequence properties run as a command model over one executor: a calls budget holds across calls", () =>
    Effect.gen(function*() {
      const budgeted = {
        ...open,
        rules: [{ kind: "budget", effect: "limit", action_patterns: ["*"], budget_kind: "calls", limit: 2 }] as const
      }
      // The budget counts per principal.
      const atMost = (n: number): Testing.SequenceProperty => ({
        name: `at most ${n} calls of one principal succeed`,
        holds: (history) => {
          const counts = new Map<string, number>()
          for (const s of history) {
            if (s.outcome?._tag === "succeeded") counts.set(s.call.principal, (counts.get(s.call.principal) ?? 0) + 1)
          }
          return [...counts.values()].every((count) => count <= n)
        }
      })
      const twoInAll: Testing.SequenceProperty = {
        name: "at most two calls succeed",
        holds: (history) => history.filter((s) => s.outcome?._tag === "succeeded").length <= 2
      }
      yield* Testing.checkEffect({ policy: budgeted, actions, sequences: [atMost(2)], runs: 40, seed: 5 })
      const error = yield* flip(
        Testing.checkEffect({ policy: open, actions, sequences: [twoInAll], runs: 40, seed: 5 })
      )
      assert.strictEqual(error.property, "at most two calls succeed")
      // Shrunk to a short sequence: three successes need at most three calls.
      const calls = error.call as ReadonlyArray<Testing.Call>
      assert.isAtLeast(calls.length, 1)
      assert.isAtMost(calls.length, 3)
      assert.include(error.message, "const calls: ReadonlyArray<Testing.Call> = [")
    }))
})

describe("Testing.check: evidence faults and fresh stores", () => {
  it.effect("a call's evidence fault fails that commit once: a pre-call one ends in an evidence error, nothing ran", () =>
    Effect.gen(function*() {
      const call: Testing.Call = {
        action: "notes.write",
        arguments: { text: "hi" },
        origin: {
          _tag: "user",
          human: { kind: "human", id: "alice", roles: [] },
          agent: { kind: "agent", id: "agent-a", roles: [] },
          executorId: "alice",
          authority: {}
        },
        principal: "alice"
      }
      const [clean] = yield* Testing.replayEffect({ policy, actions }, call, "governed")
      assert.strictEqual(clean?.outcome?._tag, "succeeded")
      assert.strictEqual(clean?.observed.ran, 1)
      assert.isUndefined(clean?.observed.faulted)
      const [faulted] = yield* Testing.replayEffect({ policy, actions }, { ...call, evidence_fault: 0 }, "governed")
      assert.isUndefined(faulted?.outcome)
      assert.strictEqual(faulted?.observed.faulted, true)
      assert.strictEqual(faulted?.observed.ran, 0)
      assert.strictEqual(faulted?.observed.error?._tag, "GovernanceEvidenceError")
      // The minimal profile keeps no evidence: the fault is the governed profile's alone.
      const [minimal] = yield* Testing.replayEffect({ policy, actions }, { ...call, evidence_fault: 0 }, "minimal")
      assert.strictEqual(minimal?.outcome?._tag, "succeeded")
    }))

  it.effect("law: nothing runs after a pre-call evidence failure is exercised: injected faults fire before and after the call", () =>
    Effect.gen(function*() {
      const seen = { preCall: 0, afterCall: 0 }
      const census: Testing.Property = {
        name: "census of injected faults",
        holds: () => true,
        holdsOnError: (_call, observed) => {
          const error = observed.error
          if (observed.faulted !== true || error?._tag !== "GovernanceEvidenceError") return true
          if (!error.call_executed && observed.ran === 0) seen.preCall++
          if (error.call_executed && observed.ran === 1) seen.afterCall++
          return true
        }
      }
      const report = yield* Testing.checkEffect({
        policy: open,
        actions,
        properties: [...Testing.laws(), census],
        profiles: ["governed"],
        runs: 120,
        seed: 7
      })
      assert.isAbove(report.outcomes["evidence error"] ?? 0, 0)
      // Counted: attempts whose injected fault failed a record before the callable, and it never ran; and faults after
      // it ran, which the law leaves alone.
      assert.isAtLeast(seen.preCall, 5)
      assert.isAbove(seen.afterCall, 0)
    }))

  it.effect("each case has fresh budgets, approvals and idempotency: what one case spends, the next never sees", () =>
    Effect.gen(function*() {
      const budgeted = {
        ...policy,
        rules: [
          ...policy.rules,
          { kind: "budget", effect: "limit", action_patterns: ["notes.*"], budget_kind: "calls", limit: 1 }
        ]
      } as const
      const spent = new Set<string>()
      const keys = new Set<string>()
      const approvals = new Set<string>()
      const seen = { spentBefore: 0, keyedBefore: 0, approvalIdBefore: 0, escalatedToApprove: 0, approved: 0 }
      const fresh: Testing.Property = {
        name: "a case's first attempt meets fresh stores",
        holds: (call, outcome, { profile }) => {
          if (call.step === "approved") seen.approved++
          if (call.step !== "call") return true
          if (outcome._tag === "escalated" && outcome.approval !== undefined) {
            const id = `${profile}/${outcome.approval.approval_id}`
            if (approvals.has(id)) seen.approvalIdBefore++
            approvals.add(id)
            if (call.approve === true) seen.escalatedToApprove++
          }
          const code = outcome._tag === "denied" ? outcome.reason.code : ""
          const fresh = code !== "budget.exhausted" && code !== "idempotency.key_reused" &&
            !(outcome._tag === "succeeded" && outcome.replay_of !== undefined)
          if (outcome._tag === "succeeded") {
            const who = `${profile}/${call.principal}`
            const key = `${who}/${call.idempotency_key}`
            if (call.action === "notes.write" && spent.has(who)) seen.spentBefore++
            if (call.idempotency_key !== undefined && keys.has(key)) seen.keyedBefore++
            if (call.action === "notes.write") spent.add(who)
            if (call.idempotency_key !== undefined) keys.add(key)
          }
          return fresh
        },
        holdsOnError: (call) => {
          if (call.step === "approved") seen.approved++
          return true
        }
      }
      yield* Testing.checkEffect({ policy: budgeted, actions, properties: [fresh], runs: 150, seed: 8 })
      // Not vacuous: principals whose one call was spent in an earlier case, keys an earlier case used, and approvals
      // whose ids repeat from case to case (the ids are seeded) each met a fresh store again.
      assert.isAbove(seen.spentBefore, 0)
      assert.isAbove(seen.keyedBefore, 0)
      assert.isAbove(seen.approvalIdBefore, 0)
      assert.isAbove(seen.escalatedToApprove, 0)
      assert.strictEqual(seen.approved, seen.escalatedToApprove)
    }))
})

/**
 * A broken host in front of the executor: when the executor's answer is `when`, it quietly runs a substitute tool
 * (notes.write) in a new request under the same context and origin, then answers with the executor's answer, or with
 * the substitute's when `report` says so. The laws must catch it: the executor is not weakened, the host is broken.
 */
const fallback = (
  when: (result: Either.Either<ExecutionOutcome, ActionExecutor.ExecutionError>) => boolean,
  report: "original" | "substitute" = "original"
) =>
(executor: ActionExecutor.ActionExecutor.Service): ActionExecutor.ActionExecutor.Service => ({
  ...executor,
  execute: (request, options) =>
    Effect.flatMap(Effect.either(executor.execute(request, options)), (result) => {
      if (!when(result)) return result
      const substitute = ExecutionRequest.make({
        request_id: `${request.request_id}.fallback`,
        action: { name: "notes.write" },
        arguments: { text: "fallback" },
        execution_scope: request.execution_scope
      })
      return Effect.flatMap(Effect.either(executor.execute(substitute, options)), (other) =>
        report === "substitute" && Either.isRight(other) ? other : result)
    })
})

const outcomeIs = (tag: ExecutionOutcome["_tag"]) => (result: Either.Either<ExecutionOutcome, unknown>) =>
  Either.isRight(result) && result.right._tag === tag

describe("Testing.laws: each law fails on a broken host, with a shrunk counterexample", () => {
  it.effect("deny dominates: a host that runs a substitute tool after a denial is caught", () =>
    Effect.gen(function*() {
      const error = yield* flip(Testing.checkEffect({
        policy: open,
        actions,
        properties: [Testing.denyDominates],
        wrap: fallback(outcomeIs("denied")),
        seed: 1
      }))
      assert.strictEqual(error.property, "deny dominates")
      assert.match(error.outcome, /^denied /)
      // Shrunk: no replay, no approval, no fault: the one denied call is enough.
      const call = error.call as Testing.Call
      assert.isUndefined(call.replay)
      assert.isUndefined(call.evidence_fault)
      // The same check on writ's executor alone holds.
      yield* Testing.checkEffect({ policy: open, actions, properties: [Testing.denyDominates], runs: 40, seed: 1 })
    }))

  it.effect("an escalation never runs the callable: a host that runs a substitute while approval is pending is caught", () =>
    Effect.gen(function*() {
      const gated = {
        policy_id: "gated",
        version: "1",
        approver_class: "maintainer",
        allow: { "notes.write": ["*"], "files.read": ["*"] },
        escalate: { "shell.exec": ["*"] }
      } as const
      const error = yield* flip(Testing.checkEffect({
        policy: gated,
        actions,
        properties: [Testing.escalationNeverRuns],
        wrap: fallback(outcomeIs("escalated")),
        seed: 1
      }))
      assert.strictEqual(error.property, "an escalation never runs the callable")
      assert.match(error.outcome, /^escalated /)
      assert.strictEqual((error.call as Testing.Call).action, "shell.exec")
      yield* Testing.checkEffect({
        policy: gated,
        actions,
        properties: [Testing.escalationNeverRuns],
        runs: 40,
        seed: 1
      })
    }))

  it.effect("nothing runs after a pre-call evidence failure: a host that retries past the store's error is caught", () =>
    Effect.gen(function*() {
      const preCallFailure = (result: Either.Either<ExecutionOutcome, ActionExecutor.ExecutionError>) =>
        Either.isLeft(result) && result.left._tag === "GovernanceEvidenceError" && !result.left.call_executed
      const error = yield* flip(Testing.checkEffect({
        policy: open,
        actions,
        properties: [Testing.nothingAfterEvidenceFailure],
        profiles: ["governed"],
        wrap: fallback(preCallFailure),
        seed: 1
      }))
      assert.strictEqual(error.property, "nothing runs after a pre-call evidence failure")
      assert.strictEqual(error.profile, "governed")
      // Only an injected fault gives the error: the counterexample keeps it, shrunk to the first commit.
      assert.strictEqual((error.call as Testing.Call).evidence_fault, 0)
      assert.include(error.message, "evidence_fault: 0")
    }))

  it.effect("a child never allows what its parent denies: a host that answers with a substitute's success is caught", () =>
    Effect.gen(function*() {
      const parent = { ...policy, policy_id: "parent", deny: { "files.read": ["/etc/*"] } } as const
      const error = yield* flip(Testing.checkEffect({
        policy: parent,
        actions,
        properties: [Testing.childWithinParent(parent)],
        wrap: fallback(outcomeIs("denied"), "substitute"),
        seed: 1
      }))
      assert.strictEqual(error.property, "a child never allows what its parent denies")
      assert.strictEqual(error.outcome, "succeeded ok")
      // The parent is judged by writ's own executor, unwrapped: it denied this call explicitly.
      const profile = error.profile === "governed" ? "governed" : "minimal"
      const [byParent] = yield* Testing.replayEffect({ policy: parent, actions }, error.call as Testing.Call, profile)
      const denial = byParent?.outcome?._tag === "denied" ? byParent.outcome.reason.code : "not denied"
      assert.isTrue(Testing.explicitDenials.has(denial), denial)
    }))
})

describe("Testing.calls", () => {
  it.effect("generated calls carry attacks, every origin, other principals and tenants, and replays", () =>
    Effect.gen(function*() {
      const arbitrary = yield* Testing.callsFor({ policy, actions })
      const sample = fc.sample(arbitrary, { numRuns: 2000, seed: 9 })
      const strings = sample.flatMap((c) => Object.values(c.arguments).filter((v) => typeof v === "string"))
      assert.isTrue(strings.some((s) => Testing.shellAttacks.includes(s)), "shell operators and wrappers")
      assert.isTrue(strings.some((s) => Testing.pathAttacks.includes(s)), "path traversal")
      assert.isTrue(strings.some((s) => s.length > 1_000_000), "oversized")
      assert.isTrue(sample.some((c) => "deep" in c.arguments), "deeply nested")
      assert.isTrue(sample.some((c) => Object.hasOwn(c.arguments, "__proto__")), "own __proto__")
      assert.isTrue(sample.some((c) => c.action === "notes.write" && typeof c.arguments.text !== "string"))
      // Witnesses of the policy's own patterns: `/etc/*` gives `/etc/` and `/etc/x`.
      assert.isTrue(sample.some((c) => c.action === "files.read" && c.arguments.path === "/etc/x"))
      for (const tag of ["user", "autonomous", "otherAgent", "unknown", "delegated"]) {
        assert.isTrue(sample.some((c) => c.origin._tag === tag), tag)
      }
      assert.isTrue(sample.some((c) => c.tenant === "other-tenant"))
      assert.isAbove(new Set(sample.map((c) => c.principal)).size, 3)
      assert.isTrue(sample.some((c) => c.replay === "approval_id" && c.approve === true))
      assert.isTrue(sample.some((c) => c.replay === "idempotency_key" && c.idempotency_key !== undefined))
    }))

  it.effect("Schema.Unknown, Any and Object fields get values: effect's fast-check 3 arbitraries run under fast-check 4", () =>
    Effect.gen(function*() {
      const blobs = [
        Action.make({
          name: "blob.put",
          input: Schema.Struct({ data: Schema.Unknown, meta: Schema.Object, extra: Schema.Any }),
          output: Schema.String,
          handler: () => "stored"
        })
      ]
      const arbitrary = yield* Testing.callsFor({ policy: open, actions: blobs })
      const sample = fc.sample(arbitrary, { numRuns: 300, seed: 5 })
      // Schema-valid arguments with a nested object in the Unknown field: drawn from the Schema, not a `{}` fallback.
      assert.isTrue(sample.some((c) => typeof c.arguments.data === "object" && c.arguments.data !== null))
      assert.isTrue(sample.some((c) => typeof c.arguments.meta === "object" && "extra" in c.arguments))
      // Seeded: the same seed draws the same calls.
      assert.deepStrictEqual(fc.sample(arbitrary, { numRuns: 50, seed: 5 }), sample.slice(0, 50))
      // A check over them runs and shrinks: the failing call comes back small.
      const error = yield* flip(Testing.checkEffect({
        policy: open,
        actions: blobs,
        properties: [Testing.property("blob.put never succeeds", (_call, outcome) => outcome._tag !== "succeeded")],
        seed: 5
      }))
      assert.strictEqual(error.outcome, "succeeded ok")
      const call = error.call as Testing.Call
      assert.strictEqual(call.action, "blob.put")
      assert.hasAllKeys(call.arguments, ["data", "meta", "extra"])
      assert.isBelow(JSON.stringify(call.arguments).length, 60)
    }))

  it.effect("a replayed approval id is refused on its second use, and the approved resubmission runs", () =>
    Effect.gen(function*() {
      const call: Testing.Call = {
        action: "shell.exec",
        arguments: { command: "make" },
        origin: { _tag: "unknown", executorId: "alice" },
        principal: "alice",
        approve: true,
        replay: "approval_id"
      }
      const steps = yield* Testing.replayEffect({ policy, actions }, call, "minimal")
      assert.deepStrictEqual(steps.map((s) => s.call.step), ["call", "approved", "replayed"])
      assert.strictEqual(Testing.summary(steps[0]!.outcome), "escalated approval.required")
      assert.strictEqual(steps[1]!.outcome?._tag, "succeeded")
      assert.strictEqual(steps[1]!.observed.ran, 1)
      assert.strictEqual(steps[2]!.outcome?._tag, "denied")
      assert.strictEqual(steps[2]!.observed.ran, 0)
    }))
})

describe("Testing.diff", () => {
  it.effect("groups the calls whose disposition changed by (action, old, new), each with its smallest example", () =>
    Effect.gen(function*() {
      const stricter = { ...policy, version: "2", deny: { "files.read": ["/etc/*"], "notes.write": ["*"] } } as const
      const report = yield* Testing.diffEffect(policy, stricter, actions, { runs: 200, seed: 1 })
      assert.isAbove(report.groups.length, 0)
      for (const group of report.groups) {
        assert.strictEqual(group.action, "notes.write")
        assert.strictEqual(group.new, "denied")
        assert.strictEqual(group.example.action, "notes.write")
      }
      const same = yield* Testing.diffEffect(policy, { ...policy, version: "3" }, actions, { runs: 100, seed: 1 })
      assert.lengthOf(same.groups, 0)
    }))

  it.effect("without actions, calls go to the names the policies mention, with witness arguments", () =>
    Effect.gen(function*() {
      const before = { policy_id: "p", version: "1", allow: { "files.read": ["/work/*"] } } as const
      const after = { policy_id: "p", version: "2", allow: { "files.read": ["/work/*", "/etc/*"] } } as const
      const report = yield* Testing.diffEffect(before, after, undefined, { runs: 300, seed: 2 })
      const widened = report.groups.find((g) => g.old === "denied" && g.new === "succeeded")
      assert.isDefined(widened)
      assert.strictEqual(widened!.action, "files.read")
      assert.match(String(widened!.example.arguments.path), /^\/etc\//)
    }))
})
