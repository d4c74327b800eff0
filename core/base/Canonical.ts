/**
 * Canonical JSON (`sha256-v1` bytes): keys sorted by code point, no whitespace, UTF-8, and the
 * bytes Python's `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` gives.
 */
import { Either, Schema } from "effect"
import { isUnset } from "./Absence.ts"

/** A value of the approved canonical domain. */
export type JsonValue = null | boolean | number | string | ReadonlyArray<JsonValue> | {
  readonly [key: string]: JsonValue
}

/** Why a value falls outside the approved domain. */
export type CanonicalViolation =
  | "float"
  | "non_finite"
  | "unsafe_integer"
  | "bytes"
  | "undefined_in_array"
  | "unsupported_type"
  | "lone_surrogate"
  | "cycle"
  | "too_deep"

/** The most levels of arrays and objects a canonical value nests; a deeper one is refused (`too_deep`), never overflows. */
export const maxDepth = 512

/** A value that cannot be canonicalised, with the path of the offending part. */
export class CanonicalJsonError extends Schema.TaggedError<CanonicalJsonError>()("CanonicalJsonError", {
  reason: Schema.Literal(
    "float",
    "non_finite",
    "unsafe_integer",
    "bytes",
    "undefined_in_array",
    "unsupported_type",
    "lone_surrogate",
    "cycle",
    "too_deep"
  ),
  path: Schema.String
}) {
  override get message() {
    return `value at ${this.path} is not canonical JSON: ${this.reason}`
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Order strings by Unicode code point (UTF-16 order differs between surrogates and U+E000..U+FFFF). */
export const compareCodePoints = (a: string, b: string): number => {
  const length = Math.min(a.length, b.length)
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x !== y) {
      // Surrogates (D800-DFFF) encode code points above every BMP unit in E000-FFFF.
      const surrogateX = x >= 0xd800 && x <= 0xdfff
      const surrogateY = y >= 0xd800 && y <= 0xdfff
      if (surrogateX !== surrogateY) return surrogateX ? 1 : -1
      return x - y
    }
  }
  return a.length - b.length
}

// Keys in code-point order; a few are sorted by insertion, several times faster there than Array's sort.
const sortKeys = (keys: Array<string>): Array<string> => {
  if (keys.length > 16) return keys.sort(compareCodePoints)
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i]!
    let j = i - 1
    for (; j >= 0 && compareCodePoints(keys[j]!, key) > 0; j--) keys[j + 1] = keys[j]!
    keys[j + 1] = key
  }
  return keys
}

type Segment = string | number

const renderPath = (segments: ReadonlyArray<Segment>) =>
  segments.reduce<string>(
    (path, key) =>
      typeof key === "number"
        ? `${path}[${key}]`
        : /^[A-Za-z_][A-Za-z0-9_]*$/.test(key)
        ? `${path}.${key}`
        : `${path}[${JSON.stringify(key)}]`,
    "$"
  )

// The path is kept as a stack of segments and rendered only when a value is refused.
class Violation {
  constructor(readonly reason: CanonicalViolation, readonly segments: ReadonlyArray<Segment>) {}
}

// What a string's literal does not hold verbatim between its quotes: a control character, quote, backslash or surrogate.
const ESCAPED = /[\u0000-\u001f"\\\ud800-\udfff]/

/** A string's canonical JSON literal, or undefined when it holds a lone surrogate (UTF-8 cannot carry it). */
export const quote = (value: string): string | undefined => {
  if (!ESCAPED.test(value)) return "\"" + value + "\""
  // JSON.stringify writes a lone surrogate as a `\udXXX` escape, so only a text containing one needs the full test.
  const quoted = JSON.stringify(value)
  return quoted.includes("\\ud") && LONE_SURROGATE.test(value) ? undefined : quoted
}

const encodeString = (value: string, path: Array<Segment>): string => {
  const quoted = quote(value)
  if (quoted === undefined) throw new Violation("lone_surrogate", [...path])
  return quoted
}

const encode = (value: unknown, path: Array<Segment>, seen: Set<object>): string | undefined => {
  switch (typeof value) {
    case "string":
      return encodeString(value, path)
    case "boolean":
      return value ? "true" : "false"
    case "number":
      if (Number.isSafeInteger(value)) return value === 0 ? "0" : String(value)
      throw new Violation(
        !Number.isFinite(value) ? "non_finite" : !Number.isInteger(value) ? "float" : "unsafe_integer",
        [...path]
      )
    case "undefined":
      return undefined
    case "object": {
      if (value === null) return "null"
      if (isUnset(value)) return undefined
      if (seen.has(value)) throw new Violation("cycle", [...path])
      if (path.length >= maxDepth) throw new Violation("too_deep", [...path])
      if (Array.isArray(value)) {
        seen.add(value)
        let out = "["
        for (let i = 0; i < value.length; i++) {
          path.push(i)
          const item = encode(value[i], path, seen)
          if (item === undefined) throw new Violation("undefined_in_array", [...path])
          path.pop()
          out += i === 0 ? item : "," + item
        }
        seen.delete(value)
        return out + "]"
      }
      if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) throw new Violation("bytes", [...path])
      const proto = Object.getPrototypeOf(value)
      if (proto !== Object.prototype && proto !== null) throw new Violation("unsupported_type", [...path])
      seen.add(value)
      const keys = sortKeys(Object.keys(value))
      let out = "{"
      for (const key of keys) {
        path.push(key)
        const item = encode((value as Record<string, unknown>)[key], path, seen)
        if (item !== undefined) out += (out.length === 1 ? "" : ",") + encodeString(key, path) + ":" + item
        path.pop()
      }
      seen.delete(value)
      return out + "}"
    }
    default:
      throw new Violation(typeof value === "bigint" ? "unsafe_integer" : "unsupported_type", [...path])
  }
}

/**
 * Canonical JSON text of a value; Undefined and Unset object members are omitted. It never throws: a value nested
 * deeper than `maxDepth` is `too_deep`, and one whose inspection throws (a getter, a proxy) is `unsupported_type`.
 */
export const stringify = (value: unknown): Either.Either<string, CanonicalJsonError> => {
  const path: Array<Segment> = []
  try {
    const text = encode(value, path, new Set())
    return text === undefined
      ? Either.left(new CanonicalJsonError({ reason: "unsupported_type", path: "$" }))
      : Either.right(text)
  } catch (error) {
    const violation = error instanceof Violation ? error : new Violation("unsupported_type", path)
    return Either.left(new CanonicalJsonError({ reason: violation.reason, path: renderPath(violation.segments) }))
  }
}

const encoder = new TextEncoder()

/** Canonical UTF-8 bytes of a value. */
export const bytes = (value: unknown): Either.Either<Uint8Array, CanonicalJsonError> =>
  Either.map(stringify(value), (text) => encoder.encode(text))
