/**
 * `writ recover`: project committed evidence and close the operations a crash left open. Exit codes: 0 ok, 1 an
 * operation or Run recovery could not close, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Either, Option } from "effect"
import * as EvidenceProjector from "../../../core/evidence/EvidenceProjector.ts"
import { ExecutorRegistry } from "../../../core/evidence/ExecutorRegistry.ts"
import { CliInputError, exitOneOnFailure, json, setExitCode } from "./internal/input.ts"
import { db, withStores } from "./internal/stores.ts"

const force = Options.boolean("force").pipe(
  Options.withDescription("close open operations even while an executor has the database open (it may be running them)")
)

// Optional (zero or more), and so shown in brackets: a bare `repeated` reads as a required option in the usage line.
const forget = Options.text("forget").pipe(
  Options.withPseudoName("ID"),
  Options.repeated,
  Options.optional,
  Options.map(Option.getOrElse((): ReadonlyArray<string> => [])),
  Options.withDescription("first drop the registration of executor ID, whose process is gone (repeatable)")
)

/**
 * Refuse a `--forget` of `writ recover` (in the arguments after the program) that has no executor id after it: last on
 * the line, an empty or blank value, or an option in its place. @effect/cli's repeated options silently drop such an
 * occurrence (or take the next option as the value), so this runs on the raw arguments, before parsing.
 */
export const checkForget = (args: ReadonlyArray<string>): Either.Either<void, CliInputError> => {
  const command = args.indexOf("recover")
  if (command === -1) return Either.void
  for (let i = command + 1; i < args.length; i++) {
    if (args[i] !== "--forget") continue
    const value = args[i + 1]
    if (value === undefined || value.trim() === "" || value.startsWith("-")) {
      const given = value === undefined ? "nothing follows it" : `it is followed by ${JSON.stringify(value)}`
      return Either.left(new CliInputError({ message: `--forget needs an executor id: ${given}` }))
    }
    i++
  }
  return Either.void
}

/** Drop each named registration; an id that is not registered is bad input, and then none is dropped. */
const forgetAll = (executor_ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    if (executor_ids.length === 0) return
    const registry = yield* ExecutorRegistry
    const registered = new Set((yield* registry.live).map((executor) => executor.executor_id))
    const unknown = executor_ids.filter((id) => !registered.has(id))
    if (unknown.length > 0) {
      return yield* new CliInputError({
        message: `--forget ${unknown.join(", ")}: no executor with this id is registered (or its process has ended)`
      })
    }
    yield* Effect.forEach(executor_ids, registry.forget, { discard: true })
  })

/** `writ recover`: drain the projector and close each orphaned operation as external_result_ambiguous. */
export const command = Command.make(
  "recover",
  { db, force, forget, json },
  ({ db, force, forget, json }) =>
    Effect.gen(function*() {
      const report = yield* withStores(
        db,
        Effect.zipRight(forgetAll(forget), EvidenceProjector.recover({ force }))
      )
      const result = {
        drained: { inserted: report.drained.inserted, unchanged: report.drained.unchanged },
        closed: report.closed,
        unclosable: report.unclosable,
        runs: report.runs
      }
      yield* Console.log(
        json ? JSON.stringify(result, null, 2) : [
          `projected ${result.drained.inserted} new records (${result.drained.unchanged} scanned again were already projected)`,
          result.closed.length === 0
            ? "no orphaned operation"
            : `closed as external_result_ambiguous: ${result.closed.join(", ")}`,
          ...result.unclosable.map(({ operation_id, reason }) => `could not close ${operation_id}: ${reason}`),
          ...result.runs.map(({ attempts, error, run_id, won }) =>
            error !== undefined
              ? `could not end run ${run_id}, left running by a process that is gone: ${error}`
              : won
              ? `ended run ${run_id} as failed (recovery.orphaned_run, quality indeterminate, acceptance unknown): ` +
                `left running by a process that is gone, ${attempts} attempt(s) committed; a call it was making, if ` +
                `any, has an unknown result`
              : `run ${run_id}, left running, ended meanwhile`
          )
        ].join("\n")
      )
      if (result.unclosable.length > 0 || result.runs.some((run) => run.error !== undefined)) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Project committed evidence and close every operation a crash left open with external_result_ambiguous (refused while an executor has the database open: stop it, --forget a registration its process left, or --force)"
))
