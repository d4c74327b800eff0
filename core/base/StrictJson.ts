/**
 * JSON as writ accepts it from outside: bounded in depth and size, with no duplicate key and no `__proto__` key. One
 * parser for every parse site writ owns, and the same bounds checked on a value already in memory. Neither recurses
 * nor throws: a refusal is a typed error naming what was wrong and where.
 */
import { Either, Schema } from "effect"
import * as Canonical from "./Canonical.ts"

// A string as a JSON literal, for messages (one canonical JSON refuses, such as a lone surrogate, shown as `"?"`).
const quote = (text: string) => Either.getOrElse(Canonical.stringify(text), () => "\"?\"")

/** How deep and how large a JSON value may be. */
export interface Limits {
  /** The most levels of arrays and objects nested in one another; the outermost is level 1. */
  readonly maxDepth: number
  /** The largest size: one per value plus the length of every string and key, never more than its JSON text's length. */
  readonly maxSize: number
}

/** The default limits: 128 levels and a size of 1 MiB (1,048,576). */
export const defaultLimits: Limits = Object.freeze({ maxDepth: 128, maxSize: 1_048_576 })

/** Why a JSON text or value is refused. */
export const Refusal = Schema.Literal("syntax", "duplicate_key", "proto_key", "too_deep", "too_large", "unreadable")

/** Why a JSON text or value is refused. */
export type Refusal = typeof Refusal.Type

/** A JSON text or value refused, with the path of the offending part. */
export class StrictJsonError extends Schema.TaggedError<StrictJsonError>()("StrictJsonError", {
  reason: Refusal,
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

type Segment = string | number

// A key longer than this is cut in a path: a path names a place, it never carries a hostile key whole.
const KEY_SHOWN = 64

// A path longer than this many segments shows its first and last halves around an ellipsis.
const SEGMENTS_SHOWN = 24

const renderPath = (segments: ReadonlyArray<Segment>): string => {
  let path = "$"
  for (let i = 0; i < segments.length; i++) {
    if (segments.length > SEGMENTS_SHOWN && i === SEGMENTS_SHOWN / 2) {
      path += "…"
      i = segments.length - SEGMENTS_SHOWN / 2
    }
    const segment = segments[i]!
    if (typeof segment === "number") path += `[${segment}]`
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(segment) && segment.length <= KEY_SHOWN) path += `.${segment}`
    else path += `[${quote(segment.length > KEY_SHOWN ? segment.slice(0, KEY_SHOWN) + "…" : segment)}]`
  }
  return path
}

const refuse = (reason: Refusal, segments: ReadonlyArray<Segment>, detail: string) =>
  new StrictJsonError({ reason, path: renderPath(segments), detail })

const deeper = (limits: Limits) => `nested deeper than ${limits.maxDepth} levels`

// --- Values in memory

// A container the walk is inside, with its keys (none for an array) and the index of the member after the one visited.
interface Frame {
  readonly container: object
  readonly keys: ReadonlyArray<string> | undefined
  readonly index: number
}

const segmentOf = (keys: ReadonlyArray<string> | undefined, index: number): Segment =>
  keys === undefined ? index - 1 : keys[index - 1]!

// The path of the member being visited: each frame's, then the current container's (none at the root).
const pathOf = (
  outer: ReadonlyArray<Frame>,
  container: object | undefined,
  keys: ReadonlyArray<string> | undefined,
  index: number
): Array<Segment> => {
  const segments = outer.map((frame) => segmentOf(frame.keys, frame.index))
  if (container !== undefined) segments.push(segmentOf(keys, index))
  return segments
}

const PROTO = "the key \"__proto__\" is refused"

// The most prototypes looked at above an object: a longer chain is taken for one built to hide data.
const PROTOTYPES_LOOKED_AT = 32

/**
 * Whether an object inherits members from a prototype that is data rather than a class's: what a `__proto__` key
 * copied by assignment leaves (`ExecutionRequest.make` copies arguments so), and property access reads through. A
 * class's prototype, a built-in's included, holds its own constructor function.
 */
const inheritsData = (object: object): boolean => {
  let proto: unknown = Object.getPrototypeOf(object)
  for (let i = 0; proto !== Object.prototype && proto !== null; i++) {
    if (i === PROTOTYPES_LOOKED_AT) return true
    if (typeof Object.getOwnPropertyDescriptor(proto, "constructor")?.value !== "function") return true
    proto = Object.getPrototypeOf(proto)
  }
  return false
}

/**
 * The first bound a value in memory breaks (too deep, too large, an own `__proto__` key or the prototype one leaves),
 * or undefined: one iterative pass that stops at the first, so its work is bounded by the limits whatever the value (a cycle is too deep). The
 * container being walked is kept in locals and only its ancestors in frames, so a flat value allocates no frame.
 */
const walk = (value: unknown, limits: Limits): StrictJsonError | undefined => {
  const { maxDepth, maxSize } = limits
  const outer: Array<Frame> = []
  let container: object | undefined
  let keys: ReadonlyArray<string> | undefined
  let index = 0
  let size = 0
  let next = value
  for (;;) {
    if (typeof next === "string") size += 1 + next.length
    else if (typeof next !== "object" || next === null) size += 1
    else if (ArrayBuffer.isView(next)) size += 1 + next.byteLength
    else {
      const depth = container === undefined ? 0 : outer.length + 1
      if (depth >= maxDepth) return refuse("too_deep", pathOf(outer, container, keys, index), deeper(limits))
      const array = Array.isArray(next)
      if (Object.hasOwn(next, "__proto__") || (!array && inheritsData(next))) {
        return refuse("proto_key", [...pathOf(outer, container, keys, index), "__proto__"], PROTO)
      }
      if (container !== undefined) outer.push({ container, keys, index })
      container = next
      keys = array ? undefined : Object.keys(next)
      index = 0
      size += 1
    }
    if (size > maxSize) {
      return refuse("too_large", pathOf(outer, container, keys, index), `larger than the size limit of ${maxSize}`)
    }
    for (;;) {
      if (container === undefined) return undefined
      if (keys === undefined) {
        const array = container as ReadonlyArray<unknown>
        if (index < array.length) {
          next = array[index++]
          break
        }
      } else if (index < keys.length) {
        const key = keys[index++]!
        size += key.length
        next = (container as Record<string, unknown>)[key]
        break
      }
      const frame = outer.pop()
      if (frame === undefined) return undefined
      ;({ container, index, keys } = frame)
    }
  }
}

// --- Text

interface Open {
  readonly container: Record<string, unknown> | Array<unknown>
  // An object's member being parsed, once its key is read.
  key: string | undefined
}

class Refused {
  constructor(readonly error: StrictJsonError) {}
}

const PLAIN = /[^"\\\u0000-\u001f]*/y
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y
const HEX4 = /^[0-9a-fA-F]{4}$/
const ESCAPES: Record<string, string> = {
  "\"": "\"",
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t"
}

/** One parse of one text: the position, the containers open around it, and the rules of each token. */
class Parser {
  at = 0
  readonly open: Array<Open> = []

  constructor(readonly text: string, readonly limits: Limits) {}

  segments(): Array<Segment> {
    const segments: Array<Segment> = []
    for (const open of this.open) {
      if (Array.isArray(open.container)) segments.push(open.container.length)
      else if (open.key !== undefined) segments.push(open.key)
    }
    return segments
  }

  fail(reason: Refusal, detail: string, segments: ReadonlyArray<Segment> = this.segments()): never {
    throw new Refused(refuse(reason, segments, detail))
  }

  unexpected(): never {
    const char = this.text[this.at]
    return this.fail(
      "syntax",
      char === undefined ? "unexpected end of the text" : `unexpected ${quote(char)} at position ${this.at}`
    )
  }

  space(): void {
    const text = this.text
    for (;;) {
      const c = text.charCodeAt(this.at)
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return
      this.at++
    }
  }

  expect(char: string): void {
    this.space()
    if (this.text[this.at] !== char) this.unexpected()
    this.at++
  }

  string(): string {
    const text = this.text
    this.at++
    let out = ""
    for (;;) {
      PLAIN.lastIndex = this.at
      PLAIN.test(text)
      out += text.slice(this.at, PLAIN.lastIndex)
      this.at = PLAIN.lastIndex
      const char = text[this.at]
      if (char === "\"") {
        this.at++
        return out
      }
      if (char !== "\\") return this.unexpected()
      const escape = text[this.at + 1]
      if (escape === "u" && HEX4.test(text.slice(this.at + 2, this.at + 6))) {
        out += String.fromCharCode(parseInt(text.slice(this.at + 2, this.at + 6), 16))
        this.at += 6
      } else if (escape !== undefined && Object.hasOwn(ESCAPES, escape)) {
        out += ESCAPES[escape]
        this.at += 2
      } else {
        this.at++
        return this.unexpected()
      }
    }
  }

  // The key of an object's next member, refused when it is `__proto__` or already there, and its colon.
  key(open: Open): void {
    this.space()
    if (this.text[this.at] !== "\"") this.unexpected()
    const key = this.string()
    if (key === "__proto__") this.fail("proto_key", PROTO, [...this.segments(), key])
    if (Object.hasOwn(open.container, key)) {
      this.fail("duplicate_key", `duplicate key ${quote(key)}`, [...this.segments(), key])
    }
    open.key = key
    this.expect(":")
  }

  // A scalar, or a container just opened (returned when it is empty, pushed otherwise, then undefined).
  value(): { readonly value: unknown } | undefined {
    this.space()
    const text = this.text
    const char = text[this.at]
    if (char === "{" || char === "[") {
      if (this.open.length >= this.limits.maxDepth) this.fail("too_deep", deeper(this.limits))
      this.at++
      this.space()
      const close = char === "{" ? "}" : "]"
      const container = char === "{" ? {} : []
      if (text[this.at] === close) {
        this.at++
        return { value: container }
      }
      const open: Open = { container, key: undefined }
      this.open.push(open)
      if (close === "}") this.key(open)
      return undefined
    }
    if (char === "\"") return { value: this.string() }
    NUMBER.lastIndex = this.at
    if (NUMBER.test(text)) {
      const number = Number(text.slice(this.at, NUMBER.lastIndex))
      this.at = NUMBER.lastIndex
      return { value: number }
    }
    for (const [word, value] of LITERALS) {
      if (text.startsWith(word, this.at)) {
        this.at += word.length
        return { value }
      }
    }
    return this.unexpected()
  }

  // The whole text: values are parsed in a loop, each attached to the innermost open container.
  run(): unknown {
    for (;;) {
      let parsed = this.value()
      while (parsed !== undefined) {
        const open = this.open[this.open.length - 1]
        if (open === undefined) {
          this.space()
          if (this.at < this.text.length) this.unexpected()
          return parsed.value
        }
        const array = Array.isArray(open.container)
        if (array) (open.container as Array<unknown>).push(parsed.value)
        else (open.container as Record<string, unknown>)[open.key!] = parsed.value
        if (!array) open.key = undefined
        this.space()
        const char = this.text[this.at]
        if (char === ",") {
          this.at++
          if (!array) this.key(open)
          parsed = undefined
        } else if (char === (array ? "]" : "}")) {
          this.at++
          this.open.pop()
          parsed = { value: open.container }
        } else {
          this.unexpected()
        }
      }
    }
  }
}

const LITERALS: ReadonlyArray<readonly [string, unknown]> = [["true", true], ["false", false], ["null", null]]

/**
 * Parse a JSON text (RFC 8259) within the limits, refusing a duplicate key and a `__proto__` key: what `JSON.parse`
 * gives for every text it accepts, with the offending part named otherwise.
 */
export const parse = (text: string, limits: Limits = defaultLimits): Either.Either<unknown, StrictJsonError> => {
  if (text.length > limits.maxSize) {
    return Either.left(
      refuse("too_large", [], `${text.length} characters, more than the size limit of ${limits.maxSize}`)
    )
  }
  try {
    return Either.right(new Parser(text, limits).run())
  } catch (error) {
    if (error instanceof Refused) return Either.left(error.error)
    throw error
  }
}

/**
 * Why a value already in memory is refused, or undefined: as `walk` does, and a value whose reading throws (a getter,
 * a proxy) is `unreadable`, never a throw.
 */
export const violation = (value: unknown, limits: Limits = defaultLimits): StrictJsonError | undefined => {
  try {
    return walk(value, limits)
  } catch {
    return new StrictJsonError({
      reason: "unreadable",
      path: "$",
      detail: "a part of the value could not be read (a getter or a proxy threw)"
    })
  }
}
