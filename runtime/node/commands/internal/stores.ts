/**
 * The database every command but demo and exec reads: `--db`, the stores over it, and a chain id checked against it.
 */
import { Options } from "@effect/cli"
import { Effect, Option, Schema } from "effect"
import { Uuid } from "../../../../core/base/IdGenerator.ts"
import { EvidenceStore } from "../../../../core/evidence/EvidenceStore.ts"
import * as Embedded from "../../../Embedded.ts"
import { checkDatabase, CliInputError, onDatabase, onOlderSchema, openForReading } from "./input.ts"

/** `--db FILE`: an existing writ SQLite database. */
export const db = Options.file("db", { exists: "yes" }).pipe(
  Options.withDescription("the writ SQLite database to read")
)

/** Run a command's body on the embedded stores of an existing database, checked and migrated first. */
export const withStores = <A, E, R>(filename: string, body: Effect.Effect<A, E, R>) =>
  Effect.zipRight(checkDatabase(filename, "existing"), Effect.provide(body, Embedded.layerStores({ filename }))).pipe(
    onDatabase(filename)
  )

/**
 * Run a reading command's body on the read-only stores of an existing database, checked first: never changed, nothing
 * created beside it, readable in a read-only directory, and its committed `-wal` transactions read (one an older writ
 * wrote too, as far as its tables go).
 */
export const withReadStores = <A, E, R>(filename: string, body: Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.flatMap(
      openForReading(filename, Embedded.layerReadStores(filename)),
      ({ missing, stores }) => Effect.provide(body, stores).pipe(onOlderSchema(filename, missing))
    )
  ).pipe(onDatabase(filename))

/** Whether a text is a UUID (a chain, operation or Run id). */
export const isUuid = Schema.is(Uuid)

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
