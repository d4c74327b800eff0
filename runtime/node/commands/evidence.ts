/**
 * `writ evidence verify|log`: check a SQLite file's evidence chains against trusted heads and read them as a
 * timeline. Exit codes: 0 ok, 1 a chain that does not verify, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Chunk, Console, Effect, Option, Stream } from "effect"
import type { StoredRecord, VerificationResult } from "../../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../../core/evidence/EvidenceStore.ts"
import { CliInputError, exitOneOnFailure, json, parseSha256, quoted, setExitCode } from "./internal/input.ts"
import { factsLine, recordFacts, short, table } from "./internal/render.ts"
import { db, isUuid, knownChain, withReadStores } from "./internal/stores.ts"

const chainOption = Options.text("chain").pipe(
  Options.optional,
  Options.withDescription("one chain id (default: every chain)")
)

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
        return yield* new CliInputError({ message: `--run ${quoted(run.value)} is not a run id (a UUID)` })
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
