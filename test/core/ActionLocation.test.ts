/**
 * Where an action is defined: the module and export a subprocess backend imports, declared together, validated, and
 * pinned by the descriptor's digest without changing the digest of an action that declares none.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"

const define = (extra: Partial<Action.Spec<{ readonly x: number }, { readonly x: number }, number, number>>) =>
  Action.make({
    name: "calc.double",
    input: Schema.Struct({ x: Schema.Number }),
    output: Schema.Number,
    handler: ({ x }) => x * 2,
    ...extra
  })

const refusal = (extra: Parameters<typeof define>[0]) => {
  try {
    define(extra)
  } catch (error) {
    return error instanceof Action.ActionDefinitionError ? `${error.field}: ${error.detail}` : String(error)
  }
  return "accepted"
}

describe("Action location", () => {
  it.effect("a declared module and export are kept, described and pinned by the digest", () =>
    Effect.gen(function*() {
      const plain = define({})
      const located = define({ module: import.meta.url, export: "double" })
      assert.strictEqual(located.module, import.meta.url)
      assert.strictEqual(located.export, "double")
      assert.isFalse("module" in plain || "export" in plain)
      const [a, b] = yield* Effect.forEach([plain, located], ActionDescriptor.describe)
      assert.isFalse("module" in a! || "export" in a!)
      assert.strictEqual(b!.module, import.meta.url)
      assert.strictEqual(b!.export, "double")
      assert.notStrictEqual(a!.digest, b!.digest)
      const moved = yield* ActionDescriptor.describe(define({ module: "file:///elsewhere/calc.js", export: "double" }))
      assert.notStrictEqual(moved.digest, b!.digest)
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it.effect("the digest of an action that declares no module is the one it had before modules existed", () =>
    Effect.map(ActionDescriptor.describe(define({})), (descriptor) =>
      // Computed by the descriptor before `module` and `export` were added.
      assert.strictEqual(descriptor.digest, PINNED)).pipe(Effect.provide(WebCryptoDigest.layer)))

  it("module and export are declared together and validated", () => {
    assert.match(refusal({ module: import.meta.url }), /^export: an action that declares where/)
    assert.match(refusal({ export: "double" }), /^module: an action that declares where/)
    assert.match(refusal({ module: "./calc.ts", export: "double" }), /^module: /)
    assert.match(refusal({ module: "file:///a/calc.js?v=1", export: "double" }), /^module: /)
    assert.match(refusal({ module: "https://u:p@example.com/calc.js", export: "double" }), /^module: /)
    assert.match(refusal({ module: import.meta.url, export: "not-an-identifier" }), /^export: /)
    assert.strictEqual(refusal({ module: import.meta.url, export: "default" }), "accepted")
  })
})

const PINNED = "103a6c1850e2b206892e6b8fe3b2cc40692b67d082521ac7448c6439c10ac222"
