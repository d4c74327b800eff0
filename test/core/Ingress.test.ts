import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Either, Exit, Layer, Option, ParseResult, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { type Binding, ExecutionContext } from "../../core/execution/ExecutionContext.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import type { Run } from "../../core/state/StateStore.ts"
import { base, durableInMemory, half } from "../fixtures/layers.ts"
import { stateStores } from "../fixtures/state.ts"

const actions = [
  half,
  Action.make({
    name: "calc.crash",
    input: Schema.Struct({}),
    output: Schema.Number,
    handler: () => Effect.dieMessage("boom")
  })
]

const layer = ActionExecutor.layerDurable().pipe(Layer.provideMerge(durableInMemory), Layer.provideMerge(base(actions)))
const trust = { principal: "alice", effect_backend: InProcessBackend.make.ref }

/** One call as a new Run's one attempt through the ingress, inside the work `around` wraps around it. */
const oneShot = <A, E>(
  call: Ingress.Call,
  around: (execute: Effect.Effect<ExecutionOutcome, ActionExecutor.ExecutionError>) => Effect.Effect<A, E>
) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const { context, request } = yield* Effect.orDie(Ingress.prepare(call, trust))
    const created = yield* Deferred.make<Run>()
    const work = around(executor.execute(request, { context, newRun: created }))
    const result = yield* Effect.either(work.pipe(Ingress.endRunOnError(created, "test")))
    return { result, run: yield* Ingress.createdRun(created) }
  })

describe("Ingress: the trusted ingress every surface shares", () => {
  it.effect("prepare decodes operator input into a request and binds the host's principal, never the claim", () =>
    Effect.gen(function*() {
      const { context, request } = yield* Ingress.prepare(
        {
          action: "calc.half",
          arguments: { x: 4 },
          principal_claim: "mallory",
          deadline: "2030-01-01T00:00:00.000000Z"
        },
        trust
      )
      assert.strictEqual(request.action.name, "calc.half")
      assert.strictEqual(request.principal_claim?.id, "mallory")
      assert.strictEqual(context.authenticated_principal.id, "alice")
      assert.deepStrictEqual(context.execution_scope, request.execution_scope)
      assert.strictEqual(request.execution_scope._tag, "ephemeral_operation")
      const outcome = yield* Effect.flatMap(
        ActionExecutor.ActionExecutor,
        (executor) => executor.execute(request, { context })
      ).pipe(Effect.provide(ActionExecutor.layerMinimal().pipe(Layer.provideMerge(base(actions)))))
      assert.strictEqual(outcome._tag === "denied" ? outcome.reason.code : outcome._tag, "context.principal_mismatch")
    }).pipe(Effect.provide(base(actions))))

  it.effect("bad operator input is a ParseError naming the field, and no context is bound", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<[Ingress.Call, string]> = [
        [{ action: "Calc Half!" }, "name"],
        [{ action: "calc.half", deadline: "tomorrow" }, "deadline"],
        [{ action: "calc.half", approval_id: "not-a-uuid" }, "approval_id"],
        [{ action: "calc.half", idempotency_key: "" }, "idempotency_key"]
      ]
      for (const [call, field] of cases) {
        const result = yield* Effect.either(Ingress.prepare(call, trust))
        assert.isTrue(Either.isLeft(result) && ParseResult.isParseError(result.left), field)
        assert.include(Either.isLeft(result) ? result.left.message : "", field)
      }
    }).pipe(Effect.provide(base(actions))))

  it.effect("a Run's terminal follows its call's outcome: completed and whole, or failed and partial", () =>
    Effect.gen(function*() {
      const terminals = []
      for (const call of [{ action: "calc.half", arguments: { x: 4 } }, { action: "calc.crash" }]) {
        const { result } = yield* oneShot(call, (execute) => execute)
        const outcome = Either.getOrThrow(result)
        const terminal = Ingress.terminalOf(outcome)
        terminals.push([outcome._tag, terminal.status, terminal.quality, terminal.reason_code, terminal.cost])
      }
      assert.deepStrictEqual(terminals, [
        ["succeeded", "completed", "full", "ok", null],
        ["failed", "failed", "partial", "handler.defect", null]
      ])
    }).pipe(Effect.provide(layer)))

  it.effect("a Run admitted when the work around its call fails ends failed, named by the error", () =>
    Effect.gen(function*() {
      const state = yield* stateStores
      const { result, run } = yield* oneShot(
        { action: "calc.half", arguments: { x: 4 } },
        (execute) => Effect.zipRight(execute, Effect.fail({ _tag: "ReportError" as const }))
      )
      assert.isTrue(Either.isLeft(result))
      const ended = yield* state.getRun(Option.getOrThrow(run).run_id)
      assert.deepStrictEqual([ended.status, ended.terminal?.reason_code], ["failed", "test.ReportError"])
    }).pipe(Effect.provide(layer)))

  it.effect("a call refused before admission creates no Run, and the ingress ends none", () =>
    Effect.gen(function*() {
      const { result, run } = yield* oneShot(
        { action: "nope.nope" },
        (execute) => Effect.zipRight(execute, Effect.fail({ _tag: "ReportError" as const }))
      )
      assert.isTrue(Either.isLeft(result))
      assert.isTrue(Option.isNone(run))
    }).pipe(Effect.provide(layer)))

  it.effect("a minted context is the one ExecutionContext.make builds from its binding, and a malformed binding is refused", () =>
    Effect.gen(function*() {
      const { context } = yield* Ingress.prepare({ action: "calc.half", arguments: { n: 2 } }, {
        ...trust,
        tenant: "acme"
      })
      const made = ExecutionContext.make({
        context_id: context.context_id,
        execution_scope: context.execution_scope,
        authenticated_principal: context.authenticated_principal,
        tenant: context.tenant!,
        effect_backend: context.effect_backend
      })
      assert.deepStrictEqual(Object.entries(context), Object.entries(made))
      assert.strictEqual(Object.getPrototypeOf(context), ExecutionContext.prototype)
      assert.isTrue(Ingress.isMinted(context) && !Ingress.isMinted(made))
      const bad = (binding: Binding) => Effect.exit(Ingress.bind(binding))
      const scope = context.execution_scope
      for (
        const binding of [
          { execution_scope: scope, authenticated_principal: { id: "" }, effect_backend: context.effect_backend },
          { execution_scope: scope, authenticated_principal: { id: "a" }, effect_backend: { id: "" } as never },
          {
            execution_scope: scope,
            authenticated_principal: { id: "a" },
            effect_backend: context.effect_backend,
            authentication_evidence: [" padded "]
          }
        ]
      ) {
        const exit = yield* bad(binding)
        assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause), JSON.stringify(binding))
        assert.isTrue(ParseResult.isParseError(Cause.squash((exit as Exit.Failure<unknown, unknown>).cause)))
      }
    }).pipe(Effect.provide(layer)))
})
