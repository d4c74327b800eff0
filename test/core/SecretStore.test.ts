import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option, Redacted, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemorySecretStore from "../../adapters/memory/MemorySecretStore.ts"
import * as Action from "../../core/action/Action.ts"
import * as SecretStores from "../../core/action/SecretStore.ts"
import { SecretStore, SecretStoreError } from "../../core/action/SecretStore.ts"
import { executor, run } from "../fixtures/layers.ts"

const peek = Action.make({
  name: "secret.peek",
  input: Schema.Struct({}),
  output: Schema.Boolean,
  secrets: [{ namespace: "api.key", exposure: "inject" }],
  handler: (_, context) => context.secret("api.key") !== undefined
})

describe("SecretStore", () => {
  it.effect("the memory store resolves what it was given, as Redacted, and copies it", () =>
    Effect.gen(function*() {
      const given: Record<string, string> = { "api.key": "s3cr3t-value" }
      const store = MemorySecretStore.make(given)
      given["api.key"] = "changed"
      const value = yield* store.resolve("api.key")
      assert.isTrue(Redacted.isRedacted(value))
      assert.strictEqual(Redacted.value(value), "s3cr3t-value")
      assert.notInclude(String(value), "s3cr3t-value")
      assert.notInclude(JSON.stringify({ value }), "s3cr3t-value")
    }))

  it.effect("resolveAll answers every name, or the first missing one, naming it and no value", () =>
    Effect.gen(function*() {
      const store = yield* SecretStore
      const both = yield* SecretStores.resolveAll(store, ["a", "b"])
      assert.deepStrictEqual([...both.keys()], ["a", "b"])
      const error = Option.getOrThrow(
        Either.getLeft(yield* Effect.either(SecretStores.resolveAll(store, ["a", "nope"])))
      )
      assert.instanceOf(error, SecretStoreError)
      assert.strictEqual(error.reason, "not_found")
      assert.strictEqual(error.name, "nope")
      assert.notInclude(error.message, "value-a")
    }).pipe(Effect.provide(MemorySecretStore.layer({ a: "value-a", b: "value-b" }))))

  it.effect("the in-process backend injects no secret: its handler's context answers none", () =>
    Effect.gen(function*() {
      const outcome = yield* run("secret.peek", {})
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(outcome._tag === "succeeded" && outcome.result, false)
      assert.strictEqual((yield* InProcessBackend.make.probe).containment.secrets, "unsupported")
    }).pipe(Effect.provide(executor([peek]))))
})
