import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { Unset } from "../../core/base/Absence.ts"
import * as Canonical from "../../core/base/Canonical.ts"

const text = (value: unknown) => Either.getOrThrow(Canonical.stringify(value))
const rejection = (value: unknown) => {
  const result = Canonical.stringify(value)
  assert.isTrue(Either.isLeft(result), "expected a rejection")
  return Either.isLeft(result) ? { reason: result.left.reason, path: result.left.path } : undefined
}

describe("Canonical JSON", () => {
  it("sorts keys by code point, not by UTF-16 unit", () => {
    assert.strictEqual(
      text({ "\u{10000}": 1, "\uffff": 2, b: 3, a: 4 }),
      "{\"a\":4,\"b\":3,\"\uffff\":2,\"\u{10000}\":1}"
    )
  })

  it("writes no whitespace, keeps non-ASCII raw, escapes control characters", () => {
    assert.strictEqual(
      text({ k: ["é", "\u0000\u001f\n\t", "\u007f", "\u2028"] }),
      "{\"k\":[\"é\",\"\\u0000\\u001f\\n\\t\",\"\u007f\",\"\u2028\"]}"
    )
  })

  it("omits Undefined and Unset object members and keeps null", () => {
    assert.strictEqual(text({ a: undefined, b: Unset, c: null }), "{\"c\":null}")
  })

  it("writes safe integers, and -0 as 0", () => {
    assert.strictEqual(text([0, -0, 9007199254740991, -9007199254740991]), "[0,0,9007199254740991,-9007199254740991]")
  })

  it("rejects each value outside the approved domain with its path", () => {
    assert.deepStrictEqual(rejection({ a: [1, 1.5] }), { reason: "float", path: "$.a[1]" })
    assert.deepStrictEqual(rejection({ a: Number.NaN }), { reason: "non_finite", path: "$.a" })
    assert.deepStrictEqual(rejection({ a: Infinity }), { reason: "non_finite", path: "$.a" })
    assert.deepStrictEqual(rejection({ "x y": 2 ** 53 }), { reason: "unsafe_integer", path: "$[\"x y\"]" })
    assert.deepStrictEqual(rejection({ b: new Uint8Array(2) }), { reason: "bytes", path: "$.b" })
    assert.deepStrictEqual(rejection([1, undefined]), { reason: "undefined_in_array", path: "$[1]" })
    assert.deepStrictEqual(rejection({ d: new Date(0) }), { reason: "unsupported_type", path: "$.d" })
    assert.deepStrictEqual(rejection({ n: 1n }), { reason: "unsafe_integer", path: "$.n" })
    assert.deepStrictEqual(rejection({ s: "\ud800" }), { reason: "lone_surrogate", path: "$.s" })
    assert.deepStrictEqual(rejection({ ["\udc00"]: 1 }), { reason: "lone_surrogate", path: "$[\"\\udc00\"]" })
    assert.deepStrictEqual(rejection(undefined), { reason: "unsupported_type", path: "$" })
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    assert.deepStrictEqual(rejection(cyclic), { reason: "cycle", path: "$.self" })
  })

  it("accepts a shared (non-cyclic) reference twice", () => {
    const shared = { x: 1 }
    assert.strictEqual(text([shared, shared]), "[{\"x\":1},{\"x\":1}]")
  })

  it("refuses a value nested deeper than its limit with a typed error, at 100000 levels too, and never throws", () => {
    const nest = (levels: number, wrap: (inner: unknown) => unknown) => {
      let value: unknown = 1
      for (let i = 0; i < levels; i++) value = wrap(value)
      return value
    }
    for (const wrap of [(inner: unknown) => [inner], (inner: unknown) => ({ k: inner })]) {
      const deep = rejection(nest(100_000, wrap))
      assert.strictEqual(deep?.reason, "too_deep")
    }
    assert.strictEqual(text(nest(Canonical.maxDepth, (inner) => [inner])).length, 2 * Canonical.maxDepth + 1)
    assert.strictEqual(rejection(nest(Canonical.maxDepth + 1, (inner) => [inner]))?.reason, "too_deep")
    const hostile = new Proxy({}, {
      getPrototypeOf: () => {
        throw new Error("trap")
      }
    })
    assert.deepStrictEqual(rejection({ a: [hostile] }), { reason: "unsupported_type", path: "$.a[0]" })
  })
})
