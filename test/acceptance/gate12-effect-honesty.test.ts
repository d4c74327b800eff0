/**
 * Gate 12, effect honesty: the in-process backend reports containment unsupported, and required
 * containment it cannot prove denies before the callable.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import { toolSet } from "../fixtures/actions.ts"
import { executor, run } from "../fixtures/layers.ts"

const tools = toolSet()

describe("gate 12: effect honesty", () => {
  it.effect("the in-process backend reports every kind of containment unsupported", () =>
    Effect.gen(function*() {
      const report = yield* InProcessBackend.make.probe
      assert.deepStrictEqual(new Set(Object.values(report.containment)), new Set(["unsupported"]))
      assert.strictEqual(report.backend.id, "in-process")
    }))

  it.effect("required containment the in-process backend cannot prove is denied before the call", () =>
    Effect.gen(function*() {
      const outcome = yield* run("write_file", { path: "/tmp/x" })
      assert.strictEqual(outcome._tag === "denied" && outcome.reason.code, "containment.unsupported")
      assert.strictEqual(tools.counter.count("write_file"), 0)
    }).pipe(Effect.provide(executor(tools.actions))))
})
