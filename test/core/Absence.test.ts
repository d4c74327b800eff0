import { assert, describe, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as Absence from "../../core/base/Absence.ts"

describe("absence states", () => {
  it("resolves Unset against the parent; null and values stay", () => {
    assert.strictEqual(Absence.resolve(Absence.Unset, "parent"), "parent")
    assert.strictEqual(Absence.resolve<string | null>(null, "parent"), null)
    assert.strictEqual(Absence.resolve("child", "parent"), "child")
  })

  it("the wire form omits Unset and Undefined but keeps null", () => {
    assert.strictEqual(JSON.stringify({ a: Absence.Unset, b: undefined, c: null }), "{\"c\":null}")
  })

  it("null is never read back as Unset", () => {
    const field = Absence.settable(Schema.NullOr(Schema.String))
    assert.strictEqual(Schema.decodeUnknownSync(field)(null), null)
    assert.isFalse(Absence.isUnset(null))
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Absence.UnsetSchema)(null)))
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(Absence.UnsetSchema)("inherit")))
    assert.isTrue(Absence.isUnset(Schema.decodeUnknownSync(field)(Absence.Unset)))
  })

  it("a strict snapshot rejects a nested Unset, naming its field path", () => {
    const result = Absence.strictSnapshot({ network: { modes: ["connect", Absence.Unset] } })
    assert.isTrue(Either.isLeft(result))
    if (Either.isLeft(result)) assert.strictEqual(result.left.path, "$.network.modes[1]")
    assert.isTrue(Either.isRight(Absence.strictSnapshot({ a: null, b: [1, { c: "x" }] })))
  })
})
