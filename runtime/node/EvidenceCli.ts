/**
 * `writ evidence verify|log` and `writ recover`: check a SQLite file's evidence chains against
 * trusted heads, read them as a timeline, and close operations a crash left open. Exit codes:
 * 0 ok, 1 a chain that does not verify (or an operation recovery could not close), 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Chunk, Console, Effect, Either, Option, Schema, Stream } from "effect"
import { Uuid } from "../../core/base/IdGenerator.ts"
import type { StoredRecord, VerificationResult } from "../../core/evidence/Evidence.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { ExecutorRegistry } from "../../core/evidence/ExecutorRegistry.ts"
import * as Embedded from "../Embedded.ts"
import { checkDatabase, CliInputError, exitOneOnFailure, json, parseSha256, setExitCode } from "./CliInput.ts"
import { factsLine, recordFacts, short, table } from "./Render.ts"

/** `--db FILE`: an existing writ SQLite database. */
export const db = Options.file("db", { exists: "yes" }).pipe(
  Options.withDescription("the writ SQLite database to read")
)

const chainOption = Options.text("chain").pipe(
  Options.optional,
  Options.withDescription("one chain id (default: every chain)")
)

/** Run a command's body on the embedded stores of an existing database, checked and migrated first. */
export const withStores = <A, E, R>(filename: string, body: Effect.Effect<A, E, R>) =>
  Effect.zipRight(checkDatabase(filename, "existing"), Effect.provide(body, Embedded.layerStores({ filename })))

/** Run a reading command's body on the read-only stores of an existing database, checked first and never changed. */
export const withReadStores = <A, E, R>(filename: string, body: Effect.Effect<A, E, R>) =>
  Effect.zipRight(checkDatabase(filename, "read"), Effect.provide(body, Embedded.layerReadStores(filename)))

const isUuid = Schema.is(Uuid)

/**
 * A chain id the input names (`named`: where, `--chain` by default) checked against the database: a malformed or
 * unknown id is bad input, not a broken chain.
 */
export const knownChain = (chain_id: string, named = `--chain ${chain_id}`) =>
  Effect.gen(function*() {
    if (!isUuid(chain_id)) {
      return yield* new CliInputError({ message: `${named} is not a chain id (a UUID)` })
    }
    if (Option.isNone(yield* (yield* EvidenceStore).head(chain_id))) {
      return yield* new CliInputError({ message: `${named}: the database holds no chain with this id` })
    }
    return chain_id
  })

const readChain = (chain_id: string) =>
  Effect.flatMap(
    EvidenceStore,
    (store) => Effect.map(Stream.runCollect(store.read(chain_id)), (records) => Chunk.toReadonlyArray(records))
  )

const renderVerification = (results: ReadonlyArray<VerificationResult>) =>
  results.length === 0 ? "no evidence chains in this database" : table(
    ["chain", "valid", "records", "verified head", "failure", "failed record"],
    results.map((result) => [
      result.chain_id,
      result.valid ? "yes" : "NO",
      String(result.checked_records),
      result.verified_head ?? "-",
      result.failure_code ?? "-",
      result.failed_record_id ?? "-"
    ])
  )

const verify = Command.make(
  "verify",
  {
    db,
    json,
    chain: chainOption,
    expectedHead: Options.text("expected-head").pipe(
      Options.optional,
      Options.withDescription("the trusted head hash of --chain; without it only the chain's own links are checked")
    )
  },
  ({ chain, db, expectedHead, json }) =>
    Effect.gen(function*() {
      if (Option.isSome(expectedHead) && Option.isNone(chain)) {
        return yield* new CliInputError({
          message: "--expected-head needs --chain: a trusted head belongs to one chain"
        })
      }
      const expected = Option.isSome(expectedHead)
        ? yield* parseSha256(expectedHead.value, "--expected-head")
        : undefined
      const results = yield* withReadStores(
        db,
        Effect.gen(function*() {
          const store = yield* EvidenceStore
          const chains = Option.isSome(chain) ? [yield* knownChain(chain.value)] : yield* store.chains
          return yield* Effect.forEach(chains, (chain_id) => store.verify(chain_id, expected))
        })
      )
      const valid = results.every((result) => result.valid)
      yield* Console.log(
        json ? JSON.stringify({ valid, chains: results }, null, 2) : renderVerification(results)
      )
      if (!valid) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Verify evidence chains: per chain valid, records checked, verified head, failure code and failed record (exit 1 when any fails)"
))

/** Whether a chain's operation_started records name the Run `run_id` as their scope. */
const namesRun = (records: ReadonlyArray<StoredRecord>, run_id: string) =>
  records.some((record) => record.record_type === "operation_started" && recordFacts(record).run_id === run_id)

const log = Command.make(
  "log",
  {
    db,
    json,
    chain: chainOption,
    run: Options.text("run").pipe(
      Options.optional,
      Options.withDescription("only the chains whose operations ran in this Run (operation_started scope.run_id)")
    )
  },
  ({ chain, db, json, run }) =>
    Effect.gen(function*() {
      if (Option.isSome(run) && Option.isSome(chain)) {
        return yield* new CliInputError({ message: "--run and --chain are exclusive: give one or neither" })
      }
      // A Run id is a UUID: a malformed one would name no chain and read as "no chain names this Run".
      if (Option.isSome(run) && !isUuid(run.value)) {
        return yield* new CliInputError({ message: `--run ${JSON.stringify(run.value)} is not a run id (a UUID)` })
      }
      const chains = yield* withReadStores(
        db,
        Effect.gen(function*() {
          const ids = Option.isSome(chain) ? [yield* knownChain(chain.value)] : yield* (yield* EvidenceStore).chains
          const all = yield* Effect.forEach(ids, (chain_id) =>
            Effect.map(readChain(chain_id), (records) => ({ chain_id, records })))
          return Option.isSome(run)
            ? all.filter(({ records }) =>
              namesRun(records, run.value)
            )
            : all
        })
      )
      const timeline = chains.map(({ chain_id, records }) => ({
        chain_id,
        records: records.map((record) => ({
          sequence: record.sequence,
          created_at: record.created_at,
          record_type: record.record_type,
          record_id: record.record_id,
          operation_id: record.operation_id,
          chain_hash: record.chain_hash,
          facts: recordFacts(record)
        }))
      }))
      if (json) return yield* Console.log(JSON.stringify(timeline, null, 2))
      if (timeline.length === 0) {
        return yield* Console.log(
          Option.isSome(run) ? `no evidence chain names run ${run.value}` : "no evidence chains in this database"
        )
      }
      for (const [i, entry] of timeline.entries()) {
        yield* Console.log(`${i === 0 ? "" : "\n"}chain ${entry.chain_id} (${entry.records.length} records)`)
        yield* Console.log(table(
          ["seq", "time", "record", "operation", "facts"],
          entry.records.map((record) => [
            String(record.sequence),
            record.created_at,
            record.record_type,
            short(record.operation_id),
            factsLine(record.facts)
          ])
        ))
      }
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Print evidence chains as a timeline: sequence, time, record type, operation, key facts (gate, decision, reason)"
))

/** `writ evidence` and its subcommands. */
export const command = Command.make("evidence").pipe(
  Command.withDescription("Verify and read the evidence chains in a writ SQLite database"),
  Command.withSubcommands([verify, log])
)

const force = Options.boolean("force").pipe(
  Options.withDescription("close open operations even while an executor has the database open (it may be running them)")
)

const forget = Options.text("forget").pipe(
  Options.repeated,
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
export const recover = Command.make(
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
