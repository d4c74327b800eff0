/**
 * Gate 9, compatibility: the SDK entry points for programs that do not use Effect (the Promise
 * facade) and for shells (`writ exec`) delegate through the executor and keep its typed outcomes.
 * writ has no deprecated entry point yet, so there is nothing to give a deprecation test.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { execFileSync, spawnSync } from "node:child_process"
import { beforeAll } from "vitest"
import * as Action from "../../core/action/Action.ts"
import * as Time from "../../core/base/Time.ts"
import { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { stages } from "../../core/execution/Stage.ts"
import { createExecutor, ExecutorDisposedError } from "../../runtime/Promise.ts"
import { bin, build } from "../fixtures/cli.ts"

const echo = (counter: { calls: number }) =>
  Action.make({
    name: "echo",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: async ({ text }) => {
      counter.calls++
      return text
    }
  })

describe("gate 9: the Promise facade", () => {
  it.live("returns the executor's typed outcomes, and shows the executor's plan", () =>
    Effect.promise(async () => {
      const counter = { calls: 0 }
      const writ = await createExecutor({ principal: "alice", actions: [echo(counter)] })
      const ok = await writ.execute({ action: "echo", arguments: { text: "hi" } })
      assert.isTrue(ok._tag === "succeeded" && ok.result === "hi" && ok.profile === "minimal")
      const invalid = await writ.execute({ action: "echo", arguments: { text: 1 } })
      assert.isTrue(invalid._tag === "denied" && invalid.reason.code === "schema.invalid")
      const claim = await writ.execute({ action: "echo", arguments: { text: "x" }, principal_claim: "mallory" })
      assert.isTrue(claim._tag === "denied" && claim.reason.code === "context.principal_mismatch")
      const late = await writ.execute({ action: "echo", arguments: { text: "x" }, deadline: Time.fromMicros(1) })
      assert.isTrue(late._tag === "timed_out" && !late.call_executed)
      assert.strictEqual(counter.calls, 1)
      assert.deepStrictEqual((await writ.plan("echo")).stages.map((s) => s.stage), [...stages])
      assert.doesNotThrow(() => Schema.encodeSync(ExecutionOutcome)(ok))
      await writ.dispose()
    }))

  it.live("rejects a malformed call with a typed error, and runs nothing", () =>
    Effect.promise(async () => {
      const counter = { calls: 0 }
      const writ = await createExecutor({ principal: "alice", actions: [echo(counter)] })
      const error = await writ.execute({ action: "echo", arguments: { text: "x" }, deadline: "tomorrow" }).then(
        () => undefined,
        (error: unknown) => error
      )
      assert.include(String(error), "deadline")
      assert.strictEqual(counter.calls, 0)
      await writ.dispose()
    }))

  it.live("after dispose() every call rejects with ExecutorDisposedError, and nothing runs", () =>
    Effect.promise(async () => {
      const counter = { calls: 0 }
      const writ = await createExecutor({ principal: "alice", actions: [echo(counter)] })
      await writ.dispose()
      const rejected = await Promise.all([
        writ.execute({ action: "echo", arguments: { text: "x" } }).then(() => undefined, (error: unknown) => error),
        writ.plan("echo").then(() => undefined, (error: unknown) => error)
      ])
      for (const [error, method] of [[rejected[0], "execute"], [rejected[1], "plan"]] as const) {
        assert.instanceOf(error, ExecutorDisposedError)
        assert.deepStrictEqual([error._tag, error.method], ["ExecutorDisposedError", method])
        assert.strictEqual(error.message, `${method}: this executor was disposed, so nothing runs; create a new one`)
      }
      assert.strictEqual(counter.calls, 0)
      await writ.dispose()
    }))

  it.live("refuses to start with two actions claiming one name", () =>
    Effect.promise(async () => {
      const counter = { calls: 0 }
      const error = await createExecutor({ principal: "alice", actions: [echo(counter), echo(counter)] }).then(
        () => undefined,
        (error: unknown) => error
      )
      assert.include(String(error), "echo@1")
    }))
})

describe("gate 9: the writ binary", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("`writ exec` prints the executor's outcome and exits 0, 1 or 2", () => {
    const ok = JSON.parse(execFileSync("node", [bin, "exec", "add", "--args", "{\"a\":2,\"b\":3}", "--json"], {
      encoding: "utf-8"
    }))
    assert.deepStrictEqual([ok._tag, ok.result, ok.profile], ["succeeded", 5, "minimal"])
    const denied = spawnSync("node", [bin, "exec", "calc.add", "--args", "{\"a\":\"x\",\"b\":3}", "--json"], {
      encoding: "utf-8"
    })
    assert.strictEqual(denied.status, 1)
    assert.strictEqual(JSON.parse(denied.stdout).reason.code, "schema.invalid")
    const bad = spawnSync("node", [bin, "exec", "calc.add", "--args", "{not json"], { encoding: "utf-8" })
    assert.strictEqual(bad.status, 2)
    assert.include(bad.stderr, "--args is not JSON")
  }, 60_000)
})
