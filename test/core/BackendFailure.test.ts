/**
 * A backend failure concludes by the outcome it names only when a backend issued it: a handler that fails with the
 * same class is an ordinary failure, so no handler chooses `ambiguous` or `timed_out` for itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Action from "../../core/action/Action.ts"
import { ActionBackendError } from "../../core/action/ActionExecutionBackend.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import { executor, run } from "../fixtures/layers.ts"

const pretender = Action.make({
  name: "backend.pretender",
  input: Schema.Struct({}),
  output: Schema.Void,
  handler: () =>
    Effect.fail(new ActionBackendError({ outcome: "ambiguous", reason: "child_killed", started: true, detail: "no" }))
})

describe("backend failures", () => {
  it.effect("a handler failing with ActionBackendError is failed handler.failed, not the outcome it names", () =>
    Effect.gen(function*() {
      const outcome = yield* run("backend.pretender", {})
      assert.strictEqual(outcome._tag, "failed")
      assert.strictEqual(reasonCode(outcome), "handler.failed")
    }).pipe(Effect.provide(executor([pretender]))))
})
