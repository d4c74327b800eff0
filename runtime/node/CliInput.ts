/**
 * Command-line input handling shared by the `writ` commands: typed bad-input errors (exit 2),
 * JSON argument parsing, and the exit code for negative verdicts.
 */
import { Effect, Either, Schema } from "effect"

/** Bad input on the command line: exit code 2. */
export class CliInputError extends Schema.TaggedError<CliInputError>()("CliInputError", { message: Schema.String }) {}

/** Parse a JSON object given on the command line. */
export const parseJsonObject = (text: string, option: string) =>
  Either.try({ try: () => JSON.parse(text) as unknown, catch: () => "is not JSON" }).pipe(
    Either.flatMap((value) =>
      typeof value === "object" && value !== null && !Array.isArray(value)
        ? Either.right(value as Record<string, unknown>)
        : Either.left("is not a JSON object")
    ),
    Either.mapLeft((why) => new CliInputError({ message: `${option} ${why}` }))
  )

/** Set the process exit code for a negative verdict (1). */
export const setExitCode = (code: number) =>
  Effect.sync(() => {
    process.exitCode = code
  })
