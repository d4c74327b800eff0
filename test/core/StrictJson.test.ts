import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import * as StrictJson from "../../core/base/StrictJson.ts"

const refusal = (text: string, limits?: StrictJson.Limits) => {
  const parsed = StrictJson.parse(text, limits)
  assert.isTrue(Either.isLeft(parsed), `expected ${JSON.stringify(text.slice(0, 40))} to be refused`)
  return Either.isLeft(parsed) ? { reason: parsed.left.reason, message: parsed.left.message } : undefined
}

const nested = (levels: number, open = "[", close = "]") => open.repeat(levels) + close.repeat(levels)

// Texts over a small alphabet of JSON's tokens and near-tokens: mostly invalid, often valid.
const tokens = fc.constantFrom(
  "{",
  "}",
  "[",
  "]",
  ",",
  ":",
  "\"a\"",
  "\"b\"",
  "1",
  "-",
  "0",
  ".",
  "e",
  " ",
  "\n",
  "true",
  "nul",
  "null",
  "\"\\u00",
  "\"\\n\"",
  "\"",
  "\\",
  "x"
)

describe("StrictJson.parse", () => {
  it.prop(
    "gives what JSON.parse gives for every JSON text, unless it has a __proto__ key",
    [fc.jsonValue()],
    ([value]) => {
      const text = JSON.stringify(value)
      for (const written of [text, JSON.stringify(value, null, 2)]) {
        const parsed = StrictJson.parse(written)
        if (Either.isRight(parsed)) assert.deepStrictEqual(parsed.right, JSON.parse(text))
        else assert.deepStrictEqual([parsed.left.reason, text.includes("\"__proto__\":")], ["proto_key", true])
      }
    }
  )

  it.prop("accepts exactly the texts JSON.parse accepts, duplicate keys aside", [
    fc.array(tokens, { maxLength: 12 }).map((parts) => parts.join(""))
  ], ([text]) => {
    const parsed = StrictJson.parse(text)
    let expected: unknown
    let valid = true
    try {
      expected = JSON.parse(text)
    } catch {
      valid = false
    }
    if (Either.isRight(parsed)) assert.deepStrictEqual(parsed.right, expected)
    else if (parsed.left.reason === "syntax") assert.isFalse(valid, `${text} is JSON`)
    else assert.include(["duplicate_key"], parsed.left.reason)
  })

  it("refuses a duplicate key, naming it and its path; the last value never wins", () => {
    assert.deepStrictEqual(refusal("{\"a\":1,\"a\":2}"), {
      reason: "duplicate_key",
      message: "$.a: duplicate key \"a\""
    })
    assert.deepStrictEqual(refusal("{\"x\":[0,{\"b\":1,\"c\":2,\"b\":3}]}"), {
      reason: "duplicate_key",
      message: "$.x[1].b: duplicate key \"b\""
    })
    // Keys Object.prototype has are no duplicates; an escaped spelling of a key is the same key.
    assert.deepStrictEqual(Either.getOrThrow(StrictJson.parse("{\"constructor\":1,\"toString\":2}")), {
      constructor: 1,
      toString: 2
    })
    assert.strictEqual(refusal("{\"ab\":1,\"a\\u0062\":2}")?.reason, "duplicate_key")
  })

  it("refuses a __proto__ key at any depth, however it is spelled, and pollutes nothing", () => {
    assert.deepStrictEqual(refusal("{\"__proto__\":{\"a\":1},\"b\":2}"), {
      reason: "proto_key",
      message: "$.__proto__: the key \"__proto__\" is refused"
    })
    assert.deepStrictEqual(
      refusal("[{\"x\":[1,{\"__proto__\":null}]}]")?.message,
      "$[0].x[1].__proto__: the key \"__proto__\" is refused"
    )
    assert.strictEqual(refusal("{\"\\u005f_proto__\":{\"polluted\":true}}")?.reason, "proto_key")
    assert.isUndefined(({} as Record<string, unknown>).polluted)
  })

  it("refuses a text nested deeper than the limit, at 100000 levels too, without throwing", () => {
    assert.deepStrictEqual(Either.getOrThrow(StrictJson.parse(nested(128))), JSON.parse(nested(128)))
    assert.deepStrictEqual(refusal(nested(129))?.reason, "too_deep")
    for (const [open, close] of [["[", "]"], ["{\"k\":", "}"]]) {
      const deep = refusal(nested(100_000, open, close))
      assert.strictEqual(deep?.reason, "too_deep")
      assert.include(deep?.message, "nested deeper than 128 levels")
      assert.isBelow(deep!.message.length, 300)
    }
    assert.strictEqual(refusal(nested(5), { maxDepth: 4, maxSize: 100 })?.reason, "too_deep")
  })

  it("refuses a text larger than the size limit before reading it", () => {
    const huge = `{"text":"${"x".repeat(StrictJson.defaultLimits.maxSize)}"}`
    assert.deepStrictEqual(refusal(huge), {
      reason: "too_large",
      message: `$: ${huge.length} characters, more than the size limit of 1048576`
    })
    assert.strictEqual(refusal("[1,2,3]", { maxDepth: 8, maxSize: 6 })?.reason, "too_large")
  })

  it("names where a syntax error is", () => {
    assert.deepStrictEqual(refusal("{not json"), { reason: "syntax", message: "$: unexpected \"n\" at position 1" })
    assert.deepStrictEqual(refusal("{\"a\":[1,]}")?.message, "$.a[1]: unexpected \"]\" at position 8")
    assert.deepStrictEqual(refusal("")?.message, "$: unexpected end of the text")
    assert.deepStrictEqual(refusal("[1] x")?.message, "$: unexpected \"x\" at position 4")
  })
})

describe("StrictJson.violation", () => {
  it("passes a value within the limits", () => {
    assert.isUndefined(StrictJson.violation({ a: 2, b: [1, "x", { c: null }], d: new Uint8Array(4) }))
    assert.isUndefined(StrictJson.violation("a scalar"))
  })

  it("refuses a value nested deeper than the limit, a cyclic one too, without recursing", () => {
    let deep: unknown = 1
    for (let i = 0; i < 100_000; i++) deep = [deep]
    const refused = StrictJson.violation({ a: deep })
    assert.strictEqual(refused?.reason, "too_deep")
    assert.match(refused!.path, /^\$\.a\[0\]/)
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    assert.strictEqual(StrictJson.violation(cyclic)?.reason, "too_deep")
  })

  it("refuses a value larger than the size limit, a wide one of shared parts too", () => {
    const refused = StrictJson.violation({ a: 1, text: "x".repeat(StrictJson.defaultLimits.maxSize) })
    assert.deepStrictEqual([refused?.reason, refused?.path], ["too_large", "$.text"])
    let wide: unknown = 1
    for (let i = 0; i < 64; i++) wide = [wide, wide]
    assert.strictEqual(StrictJson.violation(wide)?.reason, "too_large")
  })

  it("refuses an object whose prototype is data (what a copied __proto__ key leaves), not a class instance", () => {
    const inherited = Object.setPrototypeOf({ b: 2 }, { a: 1 }) as Record<string, unknown>
    assert.strictEqual(inherited.a, 1)
    assert.deepStrictEqual(
      StrictJson.violation({ x: inherited })?.message,
      "$.x.__proto__: the key \"__proto__\" is refused"
    )
    // A parsed key copied by assignment: Node sets the prototype by it, Deno (no `__proto__` accessor) keeps it own.
    const copied = Object.assign({}, JSON.parse("{\"__proto__\":{\"a\":1},\"b\":2}"))
    assert.strictEqual(StrictJson.violation({ x: copied })?.path, "$.x.__proto__")
    assert.strictEqual(StrictJson.violation(Object.create(Object.create({ a: 1 })))?.reason, "proto_key")
    class Point {
      constructor(readonly x: number) {}
    }
    assert.isUndefined(StrictJson.violation([new Point(1), new Date(0), new Map(), Object.create(null)]))
  })

  it("refuses an own __proto__ key, naming its path", () => {
    const refused = StrictJson.violation(JSON.parse("{\"x\":[{\"__proto__\":{\"a\":1}}]}"))
    assert.deepStrictEqual([refused?.reason, refused?.message], [
      "proto_key",
      "$.x[0].__proto__: the key \"__proto__\" is refused"
    ])
  })
})
