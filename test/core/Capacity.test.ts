import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as Action from "../../core/action/Action.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import { executor, run } from "../fixtures/layers.ts"

const admission = (name: string, principal = "alice") =>
  ({
    request: { action: { name } },
    context: { authenticated_principal: { id: principal } },
    descriptor: { name }
  }) as unknown as Capacity.Admission

describe("Capacity.bounded", () => {
  it.effect("leases up to its permits per key, defers past them, and a lease released twice frees one permit", () =>
    Effect.gen(function*() {
      const capacity = Capacity.bounded({
        id: "per-principal",
        permits: 2,
        key: (a) => a.context.authenticated_principal.id,
        applies: (a) => a.descriptor.name !== "free.read"
      })
      const first = yield* capacity.admit(admission("notes.write"))
      const second = yield* capacity.admit(admission("notes.write"))
      const third = yield* capacity.admit(admission("notes.write"))
      assert.isTrue(Either.isRight(first) && Either.isRight(second))
      assert.deepStrictEqual(Either.isLeft(third) ? third.left.code : "", "capacity.unavailable")
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("notes.write", "bob"))), "another key")
      assert.isFalse(capacity.applies?.(admission("free.read")) ?? true, "an action it does not bound")
      if (Either.isRight(first)) {
        yield* first.right.release
        yield* first.right.release
      }
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("notes.write"))))
      assert.isTrue(Either.isLeft(yield* capacity.admit(admission("notes.write"))), "released twice frees one")
    }))
})

describe("capacity admission in the executor", () => {
  const actions = [
    Action.make({ name: "notes.write", input: Schema.Struct({}), output: Schema.String, handler: () => "ok" })
  ]
  it.effect("a capacity whose admission dies denies the call and releases the leases taken before it", () =>
    Effect.gen(function*() {
      const first = yield* run("notes.write", {}, { request_id: "boom" })
      assert.strictEqual(
        first._tag === "denied" && first.reason.code,
        "control.capacity_error",
        "the second capacity's key throws for this request"
      )
      assert.strictEqual((yield* run("notes.write", {}, { request_id: "fine" }))._tag, "succeeded")
    }).pipe(Effect.provide(executor(actions, {
      capacity: [
        Capacity.bounded({ id: "one", permits: 1 }),
        Capacity.bounded({
          id: "keyed",
          permits: 5,
          key: (a) => {
            if (a.request.request_id === "boom") throw new Error("bad key")
            return "k"
          }
        })
      ]
    }))))
})

describe("a capacity's applies in the executor", () => {
  const admitted: Array<string> = []
  const counting = (id: string, applies: (admission: Capacity.Admission) => boolean): Capacity.Capacity => ({
    id,
    applies,
    admit: () => Effect.sync(() => (admitted.push(id), Either.right({ release: Effect.void })))
  })
  const actions = ["notes.write", "notes.read"].map((name) =>
    Action.make({ name, input: Schema.Struct({}), output: Schema.String, handler: () => "ok" })
  )

  it.effect("a call it does not bound never reaches its admit; one whose applies throws is denied before it runs", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* run("notes.read", {}))._tag, "succeeded")
      assert.deepStrictEqual(admitted, [], "no capacity bounds notes.read")
      assert.strictEqual((yield* run("notes.write", {}))._tag, "succeeded")
      assert.deepStrictEqual(admitted, ["writes"])
      const thrown = yield* run("notes.write", {}, { request_id: "boom" })
      assert.strictEqual(thrown._tag === "denied" && thrown.reason.code, "control.capacity_error")
      assert.include(thrown._tag === "denied" ? thrown.reason.detail : "", "picky")
      assert.deepStrictEqual(admitted, ["writes"], "nothing admitted for the refused call")
    }).pipe(Effect.provide(executor(actions, {
      capacity: [
        counting("writes", (a) => a.descriptor.name === "notes.write"),
        counting("picky", (a) => {
          if (a.request.request_id === "boom") throw new Error("bad predicate")
          return false
        })
      ]
    }))))
})
