/**
 * User code the executor calls (an interceptor's verdict, a capacity, a backend) that throws, fails or answers
 * malformed values: each call concludes as a typed outcome, and a governed operation closes with one terminal record.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Either, Exit, Layer, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import type * as Capacity from "../../core/execution/Capacity.ts"
import * as IdempotencyStore from "../../core/execution/IdempotencyStore.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { base, chainRecords, executor, governedInMemory, run } from "../fixtures/layers.ts"
import { bound, installPolicy, unconfigured } from "../fixtures/policy.ts"

const ran = { count: 0 }
const actions = [
  Action.make({
    name: "notes.read",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: () => `note ${++ran.count}`
  })
]

const malformed: ReadonlyArray<readonly [string, () => unknown]> = [
  ["undefined", () => undefined],
  ["a string", () => "allow"],
  ["no code", () => ({ disposition: "allow" })],
  ["a code that is not a reason code", () => ({ disposition: "allow", code: "Allowed!" })],
  ["a prototype key as disposition", () => ({ disposition: "toString", code: "x.allowed" })],
  ["a detail that is not a string", () => ({ disposition: "allow", code: "x.allowed", detail: 7 })],
  ["a malformed gate", () => ({ disposition: "allow", code: "x.allowed", gates: [{ gate_id: 1 }] })],
  ["gates that are not an array", () => ({ disposition: "deny", code: "x.denied", gates: "all" })],
  ["a malformed exception", () => ({ disposition: "allow", code: "x.allowed", exception: { approval_id: 1 } })],
  ["a retry time that is not a timestamp", () => ({ disposition: "defer", code: "x.later", retry_at: "tomorrow" })],
  ["a forged approval", () => ({ disposition: "escalate", code: "x.ask", approval: { approval_id: "a" } })],
  ["a getter that throws", () => ({
    disposition: "allow",
    get code(): string {
      throw new Error("verdict getter")
    }
  })],
  ["a proxy that throws", () =>
    new Proxy({}, {
      get: () => {
        throw new Error("verdict proxy")
      }
    })],
  ["a synchronous throw", () => {
    throw new Error("evaluator bug")
  }]
]

/** An interceptor answering whatever `answer.current` gives, as an Effect. */
const answer: { current: () => unknown } = { current: () => Interceptor.allow() }
const answering: Interceptor.Interceptor = {
  id: "hostile",
  identity: unconfigured,
  stage: "policy",
  evaluate: () => Effect.sync(() => answer.current() as Interceptor.Verdict)
}

const admitting: { current: Capacity.Capacity["admit"] } = { current: () => Effect.succeed(Either.right(lease)) }
const lease: Capacity.Lease = { release: Effect.void }
const capacity: Capacity.Capacity = { id: "hostile-capacity", admit: (admission) => admitting.current(admission) }

const hostileCapacities: ReadonlyArray<readonly [string, Capacity.Capacity["admit"]]> = [
  ["a key function that throws", () =>
    Effect.sync(() => {
      throw new Error("key bug")
    })],
  ["an admit that throws synchronously", () => {
    throw new Error("admit bug")
  }],
  ["an admit that fails", () => Effect.fail("no") as never],
  ["an answer that is not an Either", () => Effect.succeed("yes" as never)],
  ["a malformed deferral", () => Effect.succeed(Either.left({ code: 7 } as never))]
]

const throwingBackend = Layer.succeed(ActionExecutionBackend, {
  ...InProcessBackend.make,
  invoke: () => {
    throw new Error("backend bug")
  }
})

const governedLayer = (
  config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance">,
  backend?: Layer.Layer<ActionExecutionBackend>
) => governedInMemory(actions, config, backend)

const records = chainRecords

/** Run one governed call in a fresh boundary: its outcome, the types of its operation's records, and whether they verify. */
const governedCall = Effect.gen(function*() {
  const ref = yield* installPolicy({
    policy_id: "open",
    version: "1",
    mode: "allow_all",
    interceptors: bound("hostile")
  })
  const boundary = yield* Governance.openBoundary(ref)
  const outcome = yield* run("notes.read", {}, {}, { policy_snapshot: ref }, { boundary })
  const chain = yield* records(boundary.chain_id)
  const verified = yield* Effect.flatMap(EvidenceStore, (store) => store.verify(boundary.chain_id))
  return { outcome, types: chain.map((record) => record.record_type), valid: verified.valid }
})

const codeOf = (outcome: { readonly _tag: string }) =>
  "reason" in outcome ? `${outcome._tag} ${(outcome.reason as { code: string }).code}` : outcome._tag

describe("a malformed verdict is an evaluator error", () => {
  it.effect("minimal: each malformed answer denies with control.evaluator_error and the handler never runs", () =>
    Effect.gen(function*() {
      for (const [name, malformedAnswer] of malformed) {
        answer.current = malformedAnswer
        const before = ran.count
        const outcome = yield* run("notes.read", {})
        assert.strictEqual(codeOf(outcome), "denied control.evaluator_error", name)
        assert.strictEqual(ran.count, before, name)
      }
      answer.current = () => Interceptor.allow()
      assert.strictEqual((yield* run("notes.read", {}))._tag, "succeeded")
    }).pipe(Effect.provide(executor(actions, { interceptors: [answering] }))))

  it.effect("governed: the started operation closes with one operation_denied and nothing else; the chain verifies", () =>
    Effect.gen(function*() {
      for (const [name, malformedAnswer] of malformed) {
        answer.current = malformedAnswer
        const before = ran.count
        const { outcome, types, valid } = yield* governedCall
        assert.strictEqual(codeOf(outcome), "denied control.evaluator_error", name)
        assert.strictEqual(ran.count, before, name)
        assert.deepStrictEqual(types.filter((type) => terminalTypes.has(type)), ["operation_denied"], name)
        assert.strictEqual(types.at(-1), "operation_denied", name)
        assert.isTrue(valid, name)
      }
    }).pipe(Effect.provide(governedLayer({ interceptors: [answering] }))))
})

/** Each hostile capacity denies `call` before anything runs; a release that dies cannot undo a call's outcome. */
const capacityCases = <E, R>(call: Effect.Effect<{ readonly _tag: string }, E, R>) =>
  Effect.gen(function*() {
    for (const [name, admit] of hostileCapacities) {
      admitting.current = admit
      const before = ran.count
      assert.strictEqual(codeOf(yield* call), "denied control.capacity_error", name)
      assert.strictEqual(ran.count, before, name)
    }
    admitting.current = () =>
      Effect.succeed(Either.right({ release: Effect.dieMessage("release bug") } satisfies Capacity.Lease))
    assert.strictEqual((yield* call)._tag, "succeeded", "a release that dies cannot undo the call's outcome")
  })

describe("a capacity that throws, fails or answers malformed values", () => {
  it.effect("minimal: denies with control.capacity_error before anything runs", () =>
    capacityCases(run("notes.read", {})).pipe(Effect.provide(executor(actions, { capacity: [capacity] }))))

  it.effect("governed: denies with control.capacity_error before anything runs", () =>
    capacityCases(Effect.map(governedCall, ({ outcome }) => outcome)).pipe(
      Effect.provide(governedLayer({ capacity: [capacity] }))
    ))
})

describe("a backend that throws synchronously", () => {
  it.effect("minimal: the call fails as a defect inside the backend would", () =>
    Effect.gen(function*() {
      const outcome = yield* run("notes.read", {})
      assert.strictEqual(outcome._tag, "failed")
      if (outcome._tag === "failed") assert.strictEqual(outcome.failure.code, "handler.defect")
    }).pipe(Effect.provide(
      ActionExecutor.layerMinimal().pipe(Layer.provide(throwingBackend), Layer.provideMerge(base(actions)))
    )))

  it.effect("governed: the operation closes with one callable_failed and nothing else", () =>
    Effect.gen(function*() {
      const { outcome, types, valid } = yield* governedCall
      assert.strictEqual(outcome._tag, "failed")
      assert.deepStrictEqual(types.filter((type) => terminalTypes.has(type)), ["callable_failed"])
      assert.strictEqual(types.at(-1), "callable_failed")
      assert.isTrue(valid)
    }).pipe(Effect.provide(governedLayer({}, throwingBackend))))
})

describe("a defect after the call", () => {
  const dyingPut = Layer.succeed(IdempotencyStore.IdempotencyStore, {
    get: () => Effect.succeedNone,
    put: () => Effect.die("idempotency store bug")
  })

  it.effect("governed: escapes as the defect it is, and closes the operation external_result_ambiguous", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy({ policy_id: "open", version: "1", mode: "allow_all" })
      const boundary = yield* Governance.openBoundary(ref)
      const before = ran.count
      const exit = yield* Effect.exit(
        run("notes.read", {}, { idempotency_key: "k" }, { policy_snapshot: ref }, { boundary })
      )
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      assert.strictEqual(ran.count, before + 1)
      const chain = yield* records(boundary.chain_id)
      const terminals = chain.filter((record) => terminalTypes.has(record.record_type))
      assert.deepStrictEqual(terminals.map((record) => record.record_type), ["external_result_ambiguous"])
      assert.strictEqual(JSON.parse(terminals[0]!.payload_json).reason_code, "executor.defect")
      assert.strictEqual(chain.at(-1)!.record_type, "external_result_ambiguous")
    }).pipe(Effect.provide(governedLayer({}).pipe(Layer.provideMerge(dyingPut)))))
})
