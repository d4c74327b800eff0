/**
 * Reading and writing permission-policy declarations as YAML or JSON. Runtimes: every one (the
 * `yaml` package is plain JavaScript).
 */
import { Either } from "effect"
import * as YAML from "yaml"
import * as StrictJson from "../../core/base/StrictJson.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"

/** The formats a declaration can be written in. */
export type Format = "yaml" | "json"

/** The format a file name implies: `.json` is JSON (read strictly), anything else YAML. */
export const formatOf = (fileName: string): Format => (fileName.endsWith(".json") ? "json" : "yaml")

/** Parse a YAML or JSON document within writ's JSON bounds (size, depth, no duplicate or `__proto__` key). */
export const readDocument = (
  text: string,
  format: Format
): Either.Either<unknown, PermissionPolicy.PolicyValidationError> =>
  format === "json"
    // JSON strictly, as every JSON writ reads: YAML-only syntax, a duplicate key (which JSON.parse would let the last
    // of win, silently erasing a rule) and a `__proto__` key are refused, naming the path.
    ? Either.mapLeft(StrictJson.parse(text), (error) =>
      new PermissionPolicy.PolicyValidationError({
        path: error.path,
        detail: error.reason === "syntax" ? `is not valid JSON: ${error.detail}` : error.detail
      }))
    : text.length > StrictJson.defaultLimits.maxSize
    // As a JSON text is: the parser's work grows with the text, so a huge one is refused before it is read.
    ? Either.left(
      new PermissionPolicy.PolicyValidationError({
        path: "$",
        detail: `${text.length} characters, more than the size limit of ${StrictJson.defaultLimits.maxSize}`
      })
    )
    : Either.flatMap(
      Either.try({
        try: () => YAML.parse(text, { uniqueKeys: true, prettyErrors: true }),
        catch: (error) => {
          const message = error instanceof Error ? error.message.split("\n")[0]! : "parse error"
          return new PermissionPolicy.PolicyValidationError({
            path: "$",
            // The parser recurses per level and reports running out of stack as a syntax error at some column.
            detail: /^Maximum call stack size exceeded/.test(message)
              ? `is nested deeper than ${StrictJson.defaultLimits.maxDepth} levels`
              : `is not valid YAML: ${message}`
          })
        }
      }),
      // Within the bounds a JSON declaration is held to: depth and size, before any decoding walks it.
      (value) => {
        const refused = StrictJson.violation(value)
        return refused === undefined
          ? Either.right(value)
          : Either.left(new PermissionPolicy.PolicyValidationError({ path: refused.path, detail: refused.detail }))
      }
    )

/** Parse and validate a declaration; the error names the offending field. */
export const parse = (
  text: string,
  format: Format
): Either.Either<PermissionPolicy.PermissionPolicy, PermissionPolicy.PolicyValidationError> =>
  Either.flatMap(readDocument(text, format), PermissionPolicy.decode)

// A character YAML 1.1 (PyYAML) does not read verbatim: outside its printable set, one of the line breaks it folds
// inside quotes (NEL, LS, PS), the byte-order mark, or a tab (which it refuses in a plain scalar).
const unprintable = /[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\u{10000}-\u{10ffff}]/u

// "=" is YAML 1.1's value key: the library (which has no such tag) writes it plain, and PyYAML then refuses it.
const needsEscapes = (value: string) => value === "=" || unprintable.test(value)

const hex = (code: number, width: number) => code.toString(16).padStart(width, "0")

/** A double-quoted scalar that YAML 1.1 and 1.2 parsers read back as this exact string. */
const escaped = (value: string) => {
  let out = "\""
  for (const char of value) {
    const code = char.codePointAt(0)!
    out += char === "\"" || char === "\\"
      ? `\\${char}`
      : char === "\n"
      ? "\\n"
      : char === "\t"
      ? "\\t"
      : !unprintable.test(char)
      ? char
      : code <= 0xff
      ? `\\x${hex(code, 2)}`
      : code <= 0xffff
      ? `\\u${hex(code, 4)}`
      : `\\U${hex(code, 8)}`
  }
  return out + "\""
}

/** The string tag, escaping what YAML 1.1 would not read back (see `needsEscapes`), else as the library writes it. */
const yaml11Strings = (tag: YAML.ScalarTag): YAML.ScalarTag => ({
  ...tag,
  stringify: (item, ...rest) => {
    const value = String(item.value)
    return needsEscapes(value) ? escaped(value) : tag.stringify!(item, ...rest)
  }
})

// `compat`: no plain scalar that the YAML 1.1 schema reads as something else (`no`, `on`, `1:20`, `2001-12-14`, ...).
const yaml11: YAML.ToStringOptions & YAML.SchemaOptions = {
  lineWidth: 0,
  compat: "yaml-1.1",
  customTags: (tags) =>
    tags.map((tag) =>
      typeof tag === "object" && tag.tag === "tag:yaml.org,2002:str" && tag.stringify !== undefined
        ? yaml11Strings(tag)
        : tag
    )
}

/**
 * Write a declaration in canonical form: every default explicit, keys in declaration order. The YAML reads back
 * identically in YAML 1.2 and YAML 1.1 parsers (PyYAML): no plain scalar a 1.1 parser would read as anything else.
 */
export const write = (policy: PermissionPolicy.PermissionPolicy, format: Format): string =>
  writeDocument(PermissionPolicy.encode(policy), format)

/** Write an encoded document as JSON, or as YAML that YAML 1.1 and 1.2 parsers read back identically. */
export const writeDocument = (encoded: unknown, format: Format): string =>
  format === "json" ? JSON.stringify(encoded, null, 2) + "\n" : YAML.stringify(encoded, yaml11)
