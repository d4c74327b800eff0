/**
 * Gate 11, trusted identity: request principal claims cannot override the ExecutionContext;
 * mismatched and cross-scope cases fail before any policy stage.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { PrincipalRef } from "../../core/base/Refs.ts"
import { ActionExecutor } from "../../core/execution/ActionExecutor.ts"
import { DurableRun } from "../../core/execution/ExecutionScope.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { toolSet } from "../fixtures/actions.ts"
import { call, executor, run } from "../fixtures/layers.ts"

const tools = toolSet()

describe("gate 11: trusted identity", () => {
  it.effect("a request whose scope differs from its context's fails before any policy stage", () =>
    Effect.gen(function*() {
      const { context } = yield* call("add", {})
      const { request } = yield* call("add", { a: 1, b: 2 })
      const executor = yield* ActionExecutor
      const outcome = yield* executor.execute(request, { context })
      assert.strictEqual(outcome._tag, "denied")
      if (outcome._tag === "denied") {
        assert.strictEqual(outcome.reason.code, "context.scope_mismatch")
        assert.strictEqual(outcome.stage, "bind_context")
      }
      assert.deepStrictEqual(outcome.decisions, [])
    }).pipe(Effect.provide(executor(tools.actions, {
      interceptors: [Interceptor.make("never-consulted", "authorise", () => {
        throw new Error("must not be evaluated")
      })]
    }))))

  it.effect("a principal claim other than the authenticated principal is denied", () =>
    Effect.gen(function*() {
      const outcome = yield* run("add", { a: 1, b: 2 }, { principal_claim: PrincipalRef.make({ id: "mallory" }) })
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "context.principal_mismatch")
    }).pipe(Effect.provide(executor(tools.actions))))

  it.effect("a durable Run scope cannot be served by the minimal profile", () =>
    Effect.gen(function*() {
      const scope = DurableRun.make({ run_id: "00000000-0000-4000-8000-000000000001" as never })
      const outcome = yield* run("add", { a: 1, b: 2 }, { execution_scope: scope })
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "scope.run_unavailable")
    }).pipe(Effect.provide(executor(tools.actions))))
})
