import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as Capacity from "../../core/Capacity.ts"

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
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("free.read"))), "an action it does not bound")
      if (Either.isRight(first)) {
        yield* first.right.release
        yield* first.right.release
      }
      assert.isTrue(Either.isRight(yield* capacity.admit(admission("notes.write"))))
      assert.isTrue(Either.isLeft(yield* capacity.admit(admission("notes.write"))), "released twice frees one")
    }))
})
