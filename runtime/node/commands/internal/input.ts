/**
 * Command-line input handling shared by the `writ` commands: typed bad-input errors (exit 2),
 * JSON argument parsing, the `--db` check, and the exit code for negative verdicts.
 */
import { HelpDoc, Options, ValidationError } from "@effect/cli"
import type { SqlClient } from "@effect/sql"
import { Cause, Console, Effect, Either, Exit, Layer, Option, Predicate, Schema } from "effect"
import * as fs from "node:fs"
import * as Sqlite from "../../../../adapters/node/Sqlite.ts"
import { Identifier } from "../../../../core/base/Refs.ts"
import * as StrictJson from "../../../../core/base/StrictJson.ts"

/** `--json`: print JSON. */
export const json = Options.boolean("json").pipe(Options.withDescription("print JSON"))

/** `--json` on a command that prints JSON anyway: accepted, as every command accepts it, and changes nothing. */
export const jsonAlways = Options.boolean("json").pipe(
  Options.withDescription("accepted like every command's --json; this command always prints JSON")
)

/** Bad input on the command line: exit code 2. */
export class CliInputError extends Schema.TaggedError<CliInputError>()("CliInputError", { message: Schema.String }) {}

/** The `--db` file is held by another connection (locked or busy past the timeout): a store failure, exit code 1. */
export class DatabaseBusyError extends Schema.TaggedError<DatabaseBusyError>()("DatabaseBusyError", {
  message: Schema.String
}) {}

/**
 * An option `--name` that takes one of `choices`. `Options.choice` refuses any other value without naming the option
 * ("Expected one of the following cases: ..."); this one names it, the value and the choices (exit 2, nothing runs).
 */
export const choice = <const C extends readonly [string, ...Array<string>]>(name: string, choices: C) => {
  const isChoice = Schema.is(Schema.Literal(...choices))
  return Options.text(name).pipe(
    Options.withPseudoName(choices.join(" | ")),
    Options.mapEffect((value) =>
      isChoice(value) ? Effect.succeed(value) : Effect.fail(ValidationError.invalidValue(HelpDoc.p(
        `--${name} ${JSON.stringify(value)} is not one of ${choices.join(", ")}`
      )))
    )
  )
}

/**
 * Parse a JSON object given on the command line, strictly (`StrictJson`): a duplicate or `__proto__` key, or a text
 * deeper or larger than the default limits, is bad input naming the key or the limit, like a text that is not JSON.
 */
export const parseJsonObject = (text: string, option: string) =>
  StrictJson.parse(text).pipe(
    Either.mapLeft((error) =>
      error.reason === "syntax" ? `is not JSON (${error.message})` : `is refused: ${error.message}`
    ),
    Either.flatMap((value) =>
      typeof value === "object" && value !== null && !Array.isArray(value)
        ? Either.right(value as Record<string, unknown>)
        : Either.left("is not a JSON object")
    ),
    Either.mapLeft((why) => new CliInputError({ message: `${option} ${why}` }))
  )

const isIdentifier = Schema.is(Identifier)

/** A value from the command line as a message quotes it: a JSON string, cut after 64 characters (`…`). */
export const quoted = (value: string) => JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value)

/** Check an id given on the command line as the stores check one (`Identifier`); bad input names where it was given. */
export const parseIdentifier = (value: string, named: string) =>
  isIdentifier(value) ? Either.right(value) : Either.left(
    new CliInputError({
      message: `${named} ${quoted(value)} is not an id: non-empty, at most 200 characters, no leading or trailing space`
    })
  )

/** Check a lowercase hex SHA-256 given on the command line (a chain head). */
export const parseSha256 = (text: string, option: string) =>
  /^[0-9a-f]{64}$/.test(text)
    ? Either.right(text)
    : Either.left(new CliInputError({ message: `${option} is not a lowercase hex SHA-256 (64 characters 0-9a-f)` }))

/** Set the process exit code for a negative verdict (1). */
export const setExitCode = (code: number) =>
  Effect.sync(() => {
    process.exitCode = code
  })

const innermost = (cause: Cause.Cause<unknown>): unknown => {
  const error = Cause.squash(cause)
  return error instanceof Error && error.cause instanceof Error ? error.cause : error
}

const describeDefect = (cause: Cause.Cause<unknown>): string => {
  const inner = innermost(cause)
  return inner instanceof Error ? inner.message : String(inner)
}

// SQLite's answer when another connection holds the file: not a fault of the input.
const isBusy = (cause: Cause.Cause<unknown>): boolean => {
  const code = (innermost(cause) as { readonly code?: unknown } | undefined)?.code
  return typeof code === "string" && /^SQLITE_(BUSY|LOCKED)/.test(code)
}

const busy = (filename: string, detail: string) =>
  new DatabaseBusyError({
    message: `--db ${JSON.stringify(filename)} is held by another connection (${detail}); try again once it is released`
  })

// A store's typed unavailability keeps only SQLite's words: "database is locked" (BUSY), "database table is locked".
const busyDetail = (error: unknown): Option.Option<string> =>
  (Predicate.isTagged(error, "StateStoreUnavailableError") || Predicate.isTagged(error, "EvidenceUnavailableError")) &&
    Predicate.hasProperty(error, "message") && typeof error.message === "string" &&
    /database (?:table |schema )?is locked/.test(error.message)
    ? Option.some(error.message)
    : Option.none()

/**
 * Run a command's work on the database `filename`: SQLite's busy or locked answer, a defect of most stores and the
 * detail of a state or evidence store's unavailability, becomes a DatabaseBusyError naming the file (a store failure,
 * exit 1) instead of an internal error.
 */
export const onDatabase = (filename: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.catchSomeDefect((defect) => {
      const cause = Cause.die(defect)
      return isBusy(cause) ? Option.some(Effect.fail(busy(filename, describeDefect(cause)))) : Option.none()
    }),
    Effect.catchSome((error) => Option.map(busyDetail(error), (detail) => Effect.fail(busy(filename, detail))))
  )

/** Where `--db` may point when a command writes it: an existing writ database, or also a file not yet written. */
export type DatabaseUse = "existing" | "new_or_existing"

/** The failures of opening the `--db` file: bad input naming it, or a store failure when another connection holds it. */
const databaseProblems = (filename: string) => {
  const refuse = (why: string) => new CliInputError({ message: `--db ${JSON.stringify(filename)}: ${why}` })
  const unopened = (cause: Cause.Cause<unknown>) =>
    isBusy(cause)
      ? busy(filename, describeDefect(cause))
      : refuse(`cannot be opened as a writ database (${describeDefect(cause)})`)
  const notWrit = refuse("is not a writ database (it has no writ evidence table); it was not changed")
  const keepsNothing = filename === "" || filename === ":memory:"
    ? Option.some(refuse("names no file, so nothing would be kept"))
    : Option.none()
  return { refuse, unopened, notWrit, keepsNothing }
}

/**
 * Check the SQLite file named by `--db` once, before anything runs, then open and migrate it (a reading command uses
 * `openForReading` instead). Bad input: a name that keeps nothing ("" or ":memory:"), a file that cannot be opened,
 * or one with content that is not a writ database (which is left exactly as it was).
 */
export const checkDatabase = (filename: string, use: DatabaseUse) =>
  Effect.gen(function*() {
    const { keepsNothing, notWrit, unopened } = databaseProblems(filename)
    if (Option.isSome(keepsNothing)) return yield* keepsNothing.value
    const written = use !== "new_or_existing" || (fs.existsSync(filename) && fs.statSync(filename).size > 0)
    if (written) {
      const writ = yield* Effect.exit(Sqlite.isWritDatabase(filename))
      if (Exit.isFailure(writ)) return yield* unopened(writ.cause)
      if (!writ.value) return yield* notWrit
    }
    const opened = yield* Effect.exit(Effect.scoped(Layer.build(Sqlite.layer({ filename }))))
    if (Exit.isFailure(opened)) return yield* unopened(opened.cause)
  })

/**
 * Open the `--db` file for reading through `stores` (built over `Sqlite.layerReadOnly`) in the current scope, once,
 * and check it is a writ database: the bad input `checkDatabase` refuses, a file that cannot be copied to be read
 * (bad input), and one that changed during every copy (a store failure, exit 1). With the stores, the migrations of
 * this writ the database lacks (for `onOlderSchema`).
 */
export const openForReading = <ROut>(
  filename: string,
  stores: Layer.Layer<ROut | SqlClient.SqlClient, Sqlite.ReadViewError>
) =>
  Effect.gen(function*() {
    const { keepsNothing, notWrit, refuse, unopened } = databaseProblems(filename)
    if (Option.isSome(keepsNothing)) return yield* keepsNothing.value
    const opened = yield* Effect.exit(Layer.build(stores))
    if (Exit.isFailure(opened)) {
      const failure = Cause.failureOption(opened.cause)
      if (Option.isNone(failure)) return yield* unopened(opened.cause)
      return yield* failure.value.reason === "changing"
        ? new DatabaseBusyError({ message: `--db ${JSON.stringify(filename)}: ${failure.value.message}` })
        : refuse(`cannot be read (${failure.value.message})`)
    }
    const writ = yield* Effect.exit(Effect.provide(Sqlite.isWrit, opened.value))
    if (Exit.isFailure(writ)) return yield* unopened(writ.cause)
    if (!writ.value) return yield* notWrit
    const missing = yield* Effect.exit(Effect.provide(Sqlite.unapplied, opened.value))
    if (Exit.isFailure(missing)) return yield* unopened(missing.cause)
    return { stores: opened.value, missing: missing.value }
  })

/**
 * Run a reading command's work on a database an older writ wrote (`missing`: the migrations it lacks): what reads only
 * tables it has runs, and a read of a table or column it lacks is bad input naming the migrations, not an internal error.
 */
export const onOlderSchema =
  (filename: string, missing: ReadonlyArray<string>) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.catchSomeDefect(
      effect,
      (defect) =>
        missing.length > 0 && /no such (?:table|column)/.test(describeDefect(Cause.die(defect)))
          ? Option.some(Effect.fail(
            new CliInputError({
              message:
                `--db ${JSON.stringify(filename)} was written by an older writ (migrations ${
                  missing.join(", ")
                } not applied) and this command reads what they add; a reading command never changes it, a writing one ` +
                "(writ exec, writ policy put|activate|retire) migrates it"
            })
          ))
          : Option.none()
    )

/** A failure that is not bad input (a store or evidence failure, or a defect): its message on stderr and exit code 1. */
export const exitOneOnFailure = <A, E extends { readonly _tag: string; readonly message: string }, R>(
  effect: Effect.Effect<A, E, R>
) =>
  Effect.catchIf(
    effect,
    (error): error is Exclude<E, CliInputError> => error._tag !== "CliInputError",
    (error) => Effect.zipRight(Console.error(`${error._tag}: ${error.message}`), setExitCode(1))
  ).pipe(
    Effect.catchAllDefect((defect) =>
      Effect.zipRight(Console.error(`internal error: ${describeDefect(Cause.die(defect))}`), setExitCode(1))
    )
  )
