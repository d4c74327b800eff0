import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryStateStore from "../../adapters/memory/MemoryStateStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { DurableRun, EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import type { ExecutionScopeRef } from "../../core/execution/ExecutionScope.ts"
import * as IdempotencyStore from "../../core/execution/IdempotencyStore.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import type { Concluded, Interceptor } from "../../core/execution/Interceptor.ts"
import {
  AttemptStore,
  type Run,
  RunStore,
  type StateStores,
  StateStoreUnavailableError
} from "../../core/state/StateStore.ts"
import { base, durableInMemory, half, runningRun } from "../fixtures/layers.ts"
import { hash, patched, stateStores } from "../fixtures/state.ts"

const SECRET = "durable-canary-91c2"
const calls = { write: 0 }
// A call that holds until released, telling its attempt id first: an enclosing attempt still running.
const held = {
  attempt: undefined as Deferred.Deferred<string> | undefined,
  release: undefined as Deferred.Deferred<void> | undefined
}
const actions = [
  half,
  Action.make({
    name: "notes.hold",
    input: Schema.Struct({}),
    output: Schema.String,
    handler: (_, { attempt_id }) =>
      Effect.zipRight(
        Effect.zipRight(Deferred.succeed(held.attempt!, attempt_id), Deferred.await(held.release!)),
        Effect.succeed("held")
      )
  }),
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: ({ text }) => {
      calls.write++
      return text
    }
  })
]

const failingCommits = patched(AttemptStore, () => ({
  commitAttempt: () => Effect.fail(new StateStoreUnavailableError({ detail: "injected" }))
}))

// Each attempt's commit lands, and then an interruption arrives, before the executor returns.
const interruptedAfterCommit = patched(AttemptStore, (store) => ({
  commitAttempt: (input) => Effect.zipRight(store.commitAttempt(input), Effect.interrupt)
}))

const layer = (
  state: Layer.Layer<StateStores, never, IdGenerator.IdGenerator> = durableInMemory,
  config: ActionExecutor.Config = {}
) => ActionExecutor.layerDurable(config).pipe(Layer.provideMerge(state), Layer.provideMerge(base(actions)))

const exec = (scope: ExecutionScopeRef, text: unknown, deadline?: Time.Timestamp, idempotency_key?: string) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: "alice" },
      effect_backend: InProcessBackend.make.ref
    })
    const request = ExecutionRequest.make({
      request_id: yield* IdGenerator.uuid,
      action: { name: "notes.write" },
      arguments: { text },
      execution_scope: scope,
      ...(deadline === undefined ? {} : { deadline }),
      ...(idempotency_key === undefined ? {} : { idempotency_key })
    })
    return yield* executor.execute(request, { context })
  })

const running = runningRun

describe("durable-ungoverned execution", () => {
  it.effect("is refused over state stores that are not durable: it could claim no Run history", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(layer(MemoryStateStore.layer)))
      assert.deepStrictEqual([error._tag, error.message], [
        "ProfileUnavailableError",
        "the durable profile is unavailable: the state store is not durable"
      ])
    }).pipe(Effect.scoped))

  it.effect("commits the typed attempt, its outcome summary and its outbox intent, and never the raw result", () =>
    Effect.gen(function*() {
      const run = yield* running
      const outcome = yield* exec(DurableRun.make({ run_id: run.run_id }), SECRET)
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(outcome.profile, "durable")
      const store = yield* stateStores
      const [attempt] = yield* store.listAttempts(run.run_id)
      assert.strictEqual(attempt!.attempt_id, outcome.attempt_id)
      assert.strictEqual(attempt!.outcome.tag, "succeeded")
      assert.match(attempt!.outcome.result_digest!, /^[0-9a-f]{64}$/)
      assert.match(
        attempt!.arguments_digest!,
        /^[0-9a-f]{64}$/,
        "with no interceptor, the arguments still have a digest"
      )
      const intents = yield* store.pendingIntents(10)
      assert.deepStrictEqual(intents.map((intent) => [intent.attempt_id, intent.topic]), [[
        outcome.attempt_id,
        "writ.outcome"
      ]])
      assert.notInclude(JSON.stringify([attempt, intents]), SECRET)
    }).pipe(Effect.provide(layer())))

  it.effect("an idempotent replay is committed as an attempt whose call did not run, naming the replay", () =>
    Effect.gen(function*() {
      const run = yield* running
      const scope = DurableRun.make({ run_id: run.run_id })
      const before = calls.write
      const first = yield* exec(scope, "once", undefined, "order-1")
      const replay = yield* exec(scope, "once", undefined, "order-1")
      assert.isTrue(replay._tag === "succeeded" && replay.replay_of === first.attempt_id)
      assert.strictEqual(calls.write - before, 1, "the handler ran once")
      const attempts = yield* Effect.flatMap(stateStores, (store) => store.listAttempts(run.run_id))
      assert.deepStrictEqual(
        attempts.map((a) => [a.attempt_id, a.outcome.call_executed, a.outcome.reason_code]),
        [[first.attempt_id, true, "ok"], [replay.attempt_id, false, "idempotency.replayed"]]
      )
      assert.strictEqual(attempts[1]!.outcome.result_digest, attempts[0]!.outcome.result_digest)
    }).pipe(Effect.provide(layer().pipe(Layer.provideMerge(IdempotencyStore.layerMemory)))))

  it.effect("arguments with no canonical form (a float) still run and commit, with no digest", () =>
    Effect.gen(function*() {
      const run = yield* running
      const half = yield* Effect.gen(function*() {
        const executor = yield* ActionExecutor.ActionExecutor
        const scope = DurableRun.make({ run_id: run.run_id })
        const context = yield* Ingress.bind({
          execution_scope: scope,
          authenticated_principal: { id: "alice" },
          effect_backend: InProcessBackend.make.ref
        })
        return yield* executor.execute(
          ExecutionRequest.make({
            request_id: "half",
            action: { name: "calc.half" },
            arguments: { x: 0.5 },
            execution_scope: scope
          }),
          { context }
        )
      })
      assert.strictEqual(half._tag, "succeeded")
      const attempts = yield* Effect.flatMap(stateStores, (store) => store.listAttempts(run.run_id))
      assert.deepStrictEqual(
        attempts.filter((a) => a.attempt_id === half.attempt_id).map((a) => [a.outcome.tag, a.arguments_digest]),
        [["succeeded", null]]
      )
    }).pipe(Effect.provide(layer())))

  it.effect("its plan runs the persist stage and skips the governed ones", () =>
    Effect.gen(function*() {
      const plan = yield* Effect.flatMap(ActionExecutor.ActionExecutor, (executor) =>
        executor.plan({ name: "notes.write" }))
      const modes = Object.fromEntries(plan.stages.map((stage) => [stage.stage, stage.mode]))
      assert.deepStrictEqual([modes.governed_start, modes.evidence_checkpoint, modes.persist], ["skip", "skip", "run"])
      const persist = plan.stages.find((stage) =>
        stage.stage === "persist"
      )!
      assert.include(persist.detail, "AttemptStore transaction")
      assert.isTrue(plan.stages.every((stage) => !stage.detail.includes("minimal profile")))
    }).pipe(Effect.provide(layer())))

  it.effect("binds only a running Run, and refuses an ephemeral scope", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const before = calls.write
      const prepared = yield* store.createRun()
      const codes = [
        yield* exec(DurableRun.make({ run_id: prepared.run_id }), "x"),
        yield* exec(DurableRun.make({ run_id: yield* IdGenerator.uuid }), "x"),
        yield* exec(EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid }), "x")
      ].map((outcome) => outcome._tag === "denied" ? outcome.reason.code : outcome._tag)
      assert.deepStrictEqual(codes, ["scope.run_not_running", "scope.run_not_found", "scope.run_required"])
      assert.strictEqual(calls.write, before)
      assert.deepStrictEqual(yield* store.listAttempts(prepared.run_id), [])
    }).pipe(Effect.provide(layer())))

  it.effect("an owner attempt of another Run, or of none, is refused at stage 3 and nothing is written", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const mine = yield* running
      const theirs = yield* running
      const owned = yield* exec(DurableRun.make({ run_id: mine.run_id }), "ok")
      const foreign = yield* exec(DurableRun.make({ run_id: theirs.run_id }), "ok")
      assert.deepStrictEqual([owned._tag, foreign._tag], ["succeeded", "succeeded"])
      const before = calls.write
      const refused = [
        yield* exec(DurableRun.make({ run_id: mine.run_id, owner_attempt_id: foreign.attempt_id }), "x"),
        yield* exec(DurableRun.make({ run_id: mine.run_id, owner_attempt_id: yield* IdGenerator.uuid }), "x")
      ]
      assert.deepStrictEqual(
        refused.map((outcome) => outcome._tag === "denied" ? outcome.reason.code : outcome._tag),
        ["scope.owner_attempt_mismatch", "scope.owner_attempt_mismatch"]
      )
      assert.strictEqual(calls.write, before)
      assert.deepStrictEqual((yield* store.listAttempts(mine.run_id)).map((a) => a.attempt_id), [owned.attempt_id])
      assert.deepStrictEqual((yield* store.listAttempts(theirs.run_id)).map((a) => a.attempt_id), [foreign.attempt_id])
      const nested = yield* exec(DurableRun.make({ run_id: mine.run_id, owner_attempt_id: owned.attempt_id }), "ok")
      assert.strictEqual(nested._tag, "succeeded")
    }).pipe(Effect.provide(layer())))

  it.effect("an enclosing attempt still running names the Run its nested calls may own, before it is committed", () =>
    Effect.gen(function*() {
      const executor = yield* ActionExecutor.ActionExecutor
      const mine = yield* running
      const theirs = yield* running
      held.attempt = yield* Deferred.make<string>()
      held.release = yield* Deferred.make<void>()
      const scope = DurableRun.make({ run_id: mine.run_id })
      const context = yield* Ingress.bind({
        execution_scope: scope,
        authenticated_principal: { id: "alice" },
        effect_backend: InProcessBackend.make.ref
      })
      const outer = yield* Effect.fork(executor.execute(
        ExecutionRequest.make({
          request_id: "outer",
          action: { name: "notes.hold" },
          arguments: {},
          execution_scope: scope
        }),
        { context }
      ))
      const enclosing = yield* Deferred.await(held.attempt)
      const inMine = yield* exec(DurableRun.make({ run_id: mine.run_id, owner_attempt_id: Uuid.make(enclosing) }), "ok")
      const inTheirs = yield* exec(
        DurableRun.make({ run_id: theirs.run_id, owner_attempt_id: Uuid.make(enclosing) }),
        "x"
      )
      assert.deepStrictEqual(
        [inMine._tag, inTheirs._tag === "denied" ? inTheirs.reason.code : inTheirs._tag],
        ["succeeded", "scope.owner_attempt_mismatch"]
      )
      yield* Deferred.succeed(held.release, undefined)
      assert.strictEqual((yield* Fiber.join(outer))._tag, "succeeded")
      // Committed now, it is read from the store instead.
      const after = yield* exec(DurableRun.make({ run_id: mine.run_id, owner_attempt_id: Uuid.make(enclosing) }), "ok")
      assert.strictEqual(after._tag, "succeeded")
    }).pipe(Effect.provide(layer())))

  it.effect("every attempt bound to its running Run is committed, one refused at stage 3 too; none before the Run binds", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const run = yield* running
      const scope = DurableRun.make({ run_id: run.run_id })
      const past = Time.fromMicros(0)
      const outcomes = [yield* exec(scope, "ok"), yield* exec(scope, "late", past), yield* exec(scope, 7)]
      const tags = outcomes.map((outcome) => outcome._tag === "denied" ? outcome.reason.code : outcome._tag)
      assert.deepStrictEqual(tags, ["succeeded", "timed_out", "schema.invalid"])
      const attempts = yield* store.listAttempts(run.run_id)
      assert.deepStrictEqual(
        attempts.map((attempt) => [attempt.attempt_id, attempt.outcome.tag]),
        [[outcomes[0]!.attempt_id, "succeeded"], [outcomes[1]!.attempt_id, "timed_out"]]
      )
      const unknown = yield* exec(DurableRun.make({ run_id: yield* IdGenerator.uuid }), "late", past)
      assert.deepStrictEqual(unknown._tag === "denied" && unknown.reason.code, "scope.run_not_found")
    }).pipe(Effect.provide(layer())))

  it.live("an interruption after the commit tells observers the committed outcome, not a cancellation", () => {
    const seen: Array<string> = []
    const observers = [{
      id: "probe",
      observe: (event: Concluded) => Effect.sync(() => void seen.push(event.outcome._tag))
    }]
    return Effect.gen(function*() {
      const run = yield* running
      const interrupted = yield* Effect.exit(exec(DurableRun.make({ run_id: run.run_id }), "x"))
      assert.isTrue(Exit.isInterrupted(interrupted))
      const attempts = yield* Effect.flatMap(stateStores, (store) => store.listAttempts(run.run_id))
      while (seen.length === 0) yield* Effect.sleep("1 millis")
      assert.deepStrictEqual(attempts.map((attempt) => attempt.outcome.tag), ["succeeded"])
      assert.deepStrictEqual(seen, ["succeeded"])
    }).pipe(Effect.provide(layer(interruptedAfterCommit.pipe(Layer.provideMerge(durableInMemory)), { observers })))
  })

  it.effect("a commit that fails after the call is a PersistError saying the call ran; it is not retried", () =>
    Effect.gen(function*() {
      const run = yield* running
      const before = calls.write
      const error = yield* Effect.flip(exec(DurableRun.make({ run_id: run.run_id }), "x"))
      assert.strictEqual(error._tag, "PersistError")
      assert.isTrue((error as ActionExecutor.PersistError).call_executed)
      assert.strictEqual(calls.write, before + 1)
    }).pipe(Effect.provide(layer(failingCommits.pipe(Layer.provideMerge(durableInMemory))))))
})

// A policy by argument: "deny", "defer" and "escalate" get that verdict, anything else is allowed.
const byText: Interceptor = {
  id: "test.by_text",
  stage: "policy",
  evaluate: ({ arguments: args }) => {
    const text = (args as { readonly text?: unknown }).text
    return Effect.succeed(
      text === "deny" || text === "defer" || text === "escalate"
        ? { disposition: text, code: `test.${text}` }
        : { disposition: "allow", code: "test.allowed" }
    )
  }
}

const oneShotLayer = ActionExecutor.layerDurable({ interceptors: [byText] }).pipe(
  Layer.provideMerge(durableInMemory),
  Layer.provideMerge(base(actions))
)

/** The durable executor over the in-memory Run store with some of its methods replaced. */
const durableWith = (patch: Partial<RunStore.Service>) =>
  ActionExecutor.layerDurable().pipe(
    Layer.provideMerge(patched(RunStore, () => patch).pipe(Layer.provideMerge(durableInMemory))),
    Layer.provideMerge(base(actions))
  )

/** One call as a one-shot durable execution: its outcome, and the Run the executor created for it, if any. */
const oneShot = (
  action: string,
  args: { readonly [x: string]: unknown },
  scope?: ExecutionScopeRef,
  policy_snapshot?: PolicySnapshotRef
) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const execution_scope = scope ?? EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope,
      authenticated_principal: { id: "alice" },
      effect_backend: InProcessBackend.make.ref,
      ...(policy_snapshot === undefined ? {} : { policy_snapshot })
    })
    const newRun = yield* Deferred.make<Run>()
    const outcome = yield* executor.execute(
      ExecutionRequest.make({
        request_id: yield* IdGenerator.uuid,
        action: { name: action },
        arguments: args,
        execution_scope
      }),
      { context, newRun }
    )
    const run = (yield* Deferred.isDone(newRun)) ? Option.some(yield* Deferred.await(newRun)) : Option.none<Run>()
    return { outcome, run }
  })

describe("one-shot durable execution: a new Run only once the call is admitted (spec/runs.md)", () => {
  it.effect("the Run and its attempt record the policy snapshot the call's context was pinned to, or none", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const policy = { policy_id: "repo-agent", version: "2", digest: hash("a") }
      const pinned = yield* oneShot("notes.write", { text: "ok" }, undefined, policy)
      const plain = yield* oneShot("notes.write", { text: "ok" })
      const [run, unpinned] = [Option.getOrThrow(pinned.run), Option.getOrThrow(plain.run)]
      assert.deepStrictEqual([run.policy, (yield* store.getRun(run.run_id)).policy], [policy, policy])
      assert.deepStrictEqual((yield* store.listAttempts(run.run_id)).map((attempt) => attempt.policy), [policy])
      assert.isFalse("policy" in (yield* store.getRun(unpinned.run_id)))
      assert.isFalse("policy" in (yield* store.listAttempts(unpinned.run_id))[0]!)
    }).pipe(Effect.provide(layer())))

  it.effect("a denied, deferred or escalated invocation has no Run and no attempt, and nothing is called", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const before = calls.write
      const refused = [
        yield* oneShot("nope.nope", {}),
        yield* oneShot("notes.write", { text: 7 }),
        yield* oneShot("notes.write", { text: "deny" }),
        yield* oneShot("notes.write", { text: "defer" }),
        yield* oneShot("notes.write", { text: "escalate" })
      ]
      assert.deepStrictEqual(refused.map(({ outcome }) => [outcome._tag, outcome.stage]), [
        ["denied", "resolve"],
        ["denied", "normalise"],
        ["denied", "policy"],
        ["deferred", "policy"],
        ["escalated", "policy"]
      ])
      assert.isTrue(refused.every(({ run }) => Option.isNone(run)))
      assert.deepStrictEqual(yield* store.listRuns(), [], "no Run was created")
      assert.strictEqual(calls.write, before)
    }).pipe(Effect.provide(oneShotLayer)))

  it.effect("an admitted invocation runs in a Run created and started for it, its attempt committed there", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const before = calls.write
      const { outcome, run } = yield* oneShot("notes.write", { text: "fine" })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(calls.write, before + 1)
      assert.isTrue(Option.isSome(run))
      const stored = yield* store.getRun(Option.getOrThrow(run).run_id)
      assert.deepStrictEqual([stored.status, stored.lineage], ["running", "root"], "the caller ends it")
      assert.deepStrictEqual(Option.getOrThrow(run), stored, "the caller is told of the Run as created: running")
      assert.strictEqual(stored.started_at, stored.created_at)
      assert.deepStrictEqual(
        (yield* store.listAttempts(stored.run_id)).map((attempt) => [attempt.attempt_id, attempt.outcome.tag]),
        [[outcome.attempt_id, "succeeded"]]
      )
      assert.strictEqual((yield* store.listRuns()).length, 1)
    }).pipe(Effect.provide(oneShotLayer)))

  it.effect("a call that names its Run cannot also open one; a profile without state stores opens none", () =>
    Effect.gen(function*() {
      const store = yield* stateStores
      const run = yield* running
      const { outcome } = yield* oneShot("notes.write", { text: "x" }, DurableRun.make({ run_id: run.run_id }))
      assert.deepStrictEqual(outcome._tag === "denied" && outcome.reason.code, "scope.run_conflict")
      const minimal = yield* oneShot("notes.write", { text: "x" }).pipe(
        Effect.provide(ActionExecutor.layerMinimal().pipe(Layer.provideMerge(base(actions))))
      )
      assert.deepStrictEqual(minimal.outcome._tag === "denied" && minimal.outcome.reason.code, "scope.run_unavailable")
      assert.deepStrictEqual((yield* store.listRuns()).map((r) => r.run_id), [run.run_id])
    }).pipe(Effect.provide(oneShotLayer)))

  it.effect("the Run is created running in one write: no lifecycle step is left for a crash to interrupt", () =>
    Effect.gen(function*() {
      const { outcome, run } = yield* oneShot("notes.write", { text: "fine" })
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(Option.getOrThrow(run).status, "running")
    }).pipe(
      Effect.provide(durableWith({ transition: () => Effect.die("the one-shot Run takes no separate transition") }))
    ))

  it.effect("a Run that cannot be created is a PersistError before any call", () =>
    Effect.gen(function*() {
      const before = calls.write
      const error = yield* Effect.flip(oneShot("notes.write", { text: "x" }))
      assert.deepStrictEqual([error._tag, (error as ActionExecutor.PersistError).call_executed], [
        "PersistError",
        false
      ])
      assert.strictEqual(calls.write, before)
    }).pipe(Effect.provide(
      durableWith({ createRun: () => Effect.fail(new StateStoreUnavailableError({ detail: "injected" })) })
    )))
})
