/**
 * Reading and writing permission-policy declarations as YAML or JSON. Runtimes: every one (the
 * `yaml` package is plain JavaScript).
 */
import { Either } from "effect"
import * as YAML from "yaml"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"

/** The formats a declaration can be written in. */
export type Format = "yaml" | "json"

/** The format a file name implies (`.json` is JSON, anything else YAML, which JSON also parses as). */
export const formatOf = (fileName: string): Format => (fileName.endsWith(".json") ? "json" : "yaml")

const parseText = (text: string, format: Format): Either.Either<unknown, PermissionPolicy.PolicyValidationError> =>
  Either.try({
    // JSON is parsed as YAML 1.2 (a superset) too, so duplicate keys fail there as well instead of the last one winning.
    try: () => YAML.parse(text, { uniqueKeys: true, prettyErrors: true }),
    catch: (error) =>
      new PermissionPolicy.PolicyValidationError({
        path: "$",
        detail: `is not valid ${format.toUpperCase()}: ${
          error instanceof Error ? error.message.split("\n")[0] : "parse error"
        }`
      })
  })

/** Parse and validate a declaration; the error names the offending field. */
export const parse = (
  text: string,
  format: Format
): Either.Either<PermissionPolicy.PermissionPolicy, PermissionPolicy.PolicyValidationError> =>
  Either.flatMap(parseText(text, format), PermissionPolicy.decode)

/** Write a declaration in canonical form: every default explicit, keys in declaration order. */
export const write = (policy: PermissionPolicy.PermissionPolicy, format: Format): string => {
  const encoded = PermissionPolicy.encode(policy)
  return format === "json" ? JSON.stringify(encoded, null, 2) + "\n" : YAML.stringify(encoded, { lineWidth: 0 })
}
