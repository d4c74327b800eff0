/**
 * The embedded SQLite database behind writ's SQL stores: one file in WAL mode with an explicit
 * durability setting (synchronous=FULL by default: a receipt means the record is on disk), and
 * every migration applied before any store uses it.
 *
 * Runtimes: Node (better-sqlite3 through @effect/sql-sqlite-node).
 */
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Context, Effect, Layer } from "effect"
import { loader } from "../sql/internal/migrations/index.ts"

/** SQLite's `synchronous` setting: FULL syncs every commit; NORMAL may lose the last commits on power loss (never corrupts). */
export type Synchronous = "FULL" | "NORMAL" | "EXTRA"

/** Where the database lives and how durable each commit is. */
export interface Options {
  readonly filename: string
  readonly synchronous?: Synchronous
}

const migrate = Migrator.make({})

/** The connection settings every connection to the file applies, as PRAGMA assignments (WAL is the client's). */
export const pragmas = (synchronous: Synchronous = "FULL"): ReadonlyArray<string> => [
  `synchronous = ${synchronous}`,
  "busy_timeout = 5000",
  "foreign_keys = ON"
]

/** Apply the connection settings. */
export const configure = (synchronous: Synchronous = "FULL") =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => Effect.forEach(pragmas(synchronous), (pragma) => sql.unsafe(`PRAGMA ${pragma}`), { discard: true })
  )

/** The file the connection's main database lives in, as SQLite resolved it; empty for an in-memory or temporary one. */
export const databaseFile = Effect.map(
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ name: string; file: string }>`PRAGMA database_list`),
  (rows) => rows.find((row) => row.name === "main")?.file ?? ""
)

/** Apply the connection settings and every pending migration. */
export const prepare = (synchronous: Synchronous = "FULL") =>
  Effect.zipRight(configure(synchronous), migrate({ loader }))

/** A migrated SQLite database: the SqlClient every SQL store layer needs. */
export const layer = (options: Options) =>
  Layer.effectDiscard(prepare(options.synchronous)).pipe(
    Layer.provideMerge(SqliteClient.layer({ filename: options.filename })),
    Layer.orDie
  )

/**
 * An existing database opened read-only and used as it is, migrations not applied and its journal mode kept (a
 * backup may be in rollback-journal mode): what a command that only reads needs, so that reading never changes it.
 */
export const layerReadOnly = (filename: string) =>
  Layer.effectDiscard(SqlClient.SqlClient.pipe(Effect.flatMap((sql) => sql`PRAGMA busy_timeout = 5000`))).pipe(
    Layer.provideMerge(SqliteClient.layer({ filename, readonly: true, disableWAL: true })),
    Layer.orDie
  )

/** Whether an existing file holds a writ database (writ's migration table and its evidence table), read, not changed. */
export const isWritDatabase = (filename: string) =>
  Effect.scoped(
    Effect.flatMap(Layer.build(SqliteClient.layer({ filename, readonly: true, disableWAL: true })), (context) =>
      Effect.map(
        Context.get(context, SqlClient.SqlClient)`SELECT name FROM sqlite_master
          WHERE type = 'table' AND name IN ('effect_sql_migrations', 'evidence_records')`,
        (rows) =>
          rows.length === 2
      ))
  )
