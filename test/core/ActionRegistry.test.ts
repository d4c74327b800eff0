import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"

type Extra = Partial<
  Pick<Action.Spec<object, object, void, void>, "aliases" | "version" | "description" | "effects" | "source">
>

const define = (name: string, extra: Extra = {}) =>
  Action.make({ name, input: Schema.Struct({}), output: Schema.Void, handler: () => undefined, ...extra })

const withRegistry = <A, E>(body: (registry: ActionRegistry.ActionRegistry.Service) => Effect.Effect<A, E>) =>
  Effect.flatMap(ActionRegistry.ActionRegistry, body).pipe(
    Effect.provide(ActionRegistry.layer),
    Effect.provide(WebCryptoDigest.layer)
  )

describe("ActionRegistry", () => {
  it.effect("a duplicate name or alias fails at registration, naming both actions", () =>
    withRegistry((registry) =>
      Effect.gen(function*() {
        yield* registry.register(define("files.read", { aliases: ["read"] }))
        const sameName = yield* Effect.flip(registry.register(define("files.read")))
        assert.strictEqual(
          sameName.message,
          "cannot register files.read@1: \"files.read@1\" already names files.read@1"
        )
        const aliasTaken = yield* Effect.flip(registry.register(define("web.read", { aliases: ["read"] })))
        assert.strictEqual(aliasTaken.message, "cannot register web.read@1: \"read\" already names files.read")
        const nameIsAlias = yield* Effect.flip(registry.register(define("read")))
        assert.isTrue(nameIsAlias._tag === "ActionCollisionError" && nameIsAlias.existing === "files.read")
        assert.strictEqual((yield* registry.list).length, 1)
      })
    ))

  it.effect("versions coexist; an unpinned reference resolves the latest registered", () =>
    withRegistry((registry) =>
      Effect.gen(function*() {
        const v1 = yield* registry.register(define("report", { version: "1" }))
        const v2 = yield* registry.register(define("report", { version: "2", description: "faster" }))
        assert.strictEqual((yield* registry.resolve({ name: "report" })).descriptor.version, "2")
        assert.strictEqual((yield* registry.resolve({ name: "report", version: "1" })).descriptor, v1)
        assert.notStrictEqual(v1.digest, v2.digest)
        const missing = registry.resolve({ name: "report", version: "3" })
        assert.isTrue(Either.isLeft(missing) && missing.left.message === "no action report@3 is registered")
      })
    ))

  it.effect("a descriptor is immutable and its digest is stable across registries", () =>
    Effect.gen(function*() {
      const definition = define("notes.read", { description: "read a note", effects: ["memory.read"] })
      const first = yield* withRegistry((registry) => registry.register(definition))
      const second = yield* withRegistry((registry) => registry.register(definition))
      assert.strictEqual(first.digest, second.digest)
      assert.isTrue(Object.isFrozen(first))
      assert.throws(() => {
        ;(first as { name: string }).name = "other"
      })
      const changed = yield* withRegistry((registry) =>
        registry.register(define("notes.read", { description: "other" }))
      )
      assert.notStrictEqual(changed.digest, first.digest)
    }))

  it.effect("plugin discovery registers what the plugin yields, with its provenance", () =>
    withRegistry((registry) =>
      Effect.gen(function*() {
        const source = Action.Provenance.make({ kind: "plugin", id: "weather-plugin" })
        const found = yield* registry.discover({
          id: "weather-plugin",
          discover: Effect.succeed([define("weather.now", { source })])
        })
        assert.deepStrictEqual(found.map((d) => [d.name, d.source.kind, d.source.id]), [[
          "weather.now",
          "plugin",
          "weather-plugin"
        ]])
        assert.strictEqual((yield* registry.resolve({ name: "weather.now" })).descriptor, found[0])
      })
    ))

  it("an invalid name, alias or version fails at definition with the field", () => {
    assert.throws(() => define("Bad Name"), /name "Bad Name" is not an action name: an action name is lowercase words/)
    // The rule it broke, in the words the CLI uses for the same name (ActionName's own messages).
    assert.throws(() => define("a".repeat(200)), /an action name is at most 128 characters, not 200$/)
    assert.throws(() => define("ok", { aliases: ["also ok", "NOPE"] }), /aliases\[0\]/)
    assert.throws(() => define("ok", { version: " " }), /version/)
  })
})
