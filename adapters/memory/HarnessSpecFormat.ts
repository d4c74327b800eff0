/**
 * Reading and writing harness specs as YAML or JSON, within the same bounds as policy declarations. Runtimes: every
 * one.
 */
import { Either } from "effect"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import * as PolicyFormat from "./PolicyFormat.ts"

/** Parse and validate a spec; the error names the offending field. */
export const parse = (
  text: string,
  format: PolicyFormat.Format
): Either.Either<HarnessSpec.HarnessSpec, HarnessSpec.HarnessSpecError> =>
  Either.flatMap(
    Either.mapLeft(
      PolicyFormat.readDocument(text, format),
      ({ detail, path }) => new HarnessSpec.HarnessSpecError({ path, detail })
    ),
    HarnessSpec.decode
  )

/** Write a spec with every default explicit. */
export const write = (spec: HarnessSpec.HarnessSpec, format: PolicyFormat.Format): string =>
  PolicyFormat.writeDocument(HarnessSpec.encode(spec), format)
