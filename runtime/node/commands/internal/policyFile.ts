/**
 * A policy declaration file on the command line: `FILE`, read, validated and compiled, bad input naming the field.
 */
import { Args } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { Effect, Either } from "effect"
import * as PolicyFormat from "../../../../adapters/memory/PolicyFormat.ts"
import * as PolicySnapshot from "../../../../core/policy/PolicySnapshot.ts"
import { CliInputError } from "./input.ts"

/** `FILE`: a policy declaration. */
export const file = Args.file({ name: "FILE", exists: "yes" }).pipe(
  Args.withDescription("a policy declaration (.yaml, .yml or .json)")
)

/** Read, validate and compile a declaration file; bad input is a CliInputError naming the field. */
export const load = (path: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    // A file that exists but cannot be read (no permission, a directory behind a race) is bad input naming it.
    const text = yield* Effect.mapError(
      fs.readFileString(path),
      (error) => new CliInputError({ message: `${path}: cannot be read (${error.message})` })
    )
    const format = PolicyFormat.formatOf(path)
    const policy = yield* Either.mapLeft(
      PolicyFormat.parse(text, format),
      (error) => new CliInputError({ message: `${path}: ${error.message}` })
    )
    const snapshot = yield* PolicySnapshot.compile(policy).pipe(
      Effect.mapError((error) => new CliInputError({ message: `${path}: ${error.message}` }))
    )
    return { policy, snapshot, format }
  })
