/**
 * The embedded SQLite database behind writ's SQL stores: one file in WAL mode with an explicit
 * durability setting (synchronous=FULL by default: a receipt means the record is on disk), and
 * every migration applied before any store uses it.
 *
 * Runtimes: Node (better-sqlite3 through @effect/sql-sqlite-node).
 */
import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Effect, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
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

// --- Reading without writing ---
// An audit may read a file in a read-only directory, and must leave every directory as it was. SQLite opens a WAL
// database read-only only where it can create the `-shm` beside it (and then leaves it, with a `-wal`, behind), or
// with `immutable=1`, which ignores the `-wal` and so a chain's last commits; this build of better-sqlite3 takes no
// URI filenames anyway. So the file is read in place only beside a live connection's `-wal` and `-shm` (SQLite reads
// them, read-only if it must, and creates nothing), and otherwise through a private copy of it and its journal.

/** Why an existing database could not be read as it stands: it cannot be copied, or it changed during every copy. */
export class ReadViewError extends Schema.TaggedError<ReadViewError>()("ReadViewError", {
  reason: Schema.Literal("unreadable", "changing"),
  message: Schema.String
}) {}

const journals = ["-wal", "-journal"] as const
const copyAttempts = 5

/** What identifies a file's content at a moment: inode, size, modification and change times; "-" when it is absent. */
const stamp = (file: string) => {
  const stat = fs.statSync(file, { bigint: true, throwIfNoEntry: false })
  return stat === undefined ? "-" : `${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`
}

const stamps = (filename: string) => ["", ...journals].map((suffix) => stamp(filename + suffix)).join(" ")

/** Copy a database and its non-empty journals to `copy`, writable; whether none of them changed meanwhile. */
const copyOnce = (filename: string, copy: string) => {
  const before = stamps(filename)
  for (const suffix of ["", ...journals]) {
    fs.rmSync(copy + suffix, { force: true })
    if (suffix === "" || (fs.statSync(filename + suffix, { throwIfNoEntry: false })?.size ?? 0) > 0) {
      fs.copyFileSync(filename + suffix, copy + suffix)
      fs.chmodSync(copy + suffix, 0o600)
    }
  }
  return stamps(filename) === before
}

const unreadable = (cause: unknown) =>
  new ReadViewError({ reason: "unreadable", message: cause instanceof Error ? cause.message : String(cause) })

/** A private copy of a database and its journals, taken while none of them changed, removed when the scope closes. */
const privateCopy = (filename: string) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.try({ try: () => fs.mkdtempSync(path.join(os.tmpdir(), "writ-read-")), catch: unreadable }),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const copy = path.join(dir, "read.db")
    for (let attempt = 0; attempt < copyAttempts; attempt++) {
      if (yield* Effect.try({ try: () => copyOnce(filename, copy), catch: unreadable })) return copy
    }
    return yield* new ReadViewError({
      reason: "changing",
      message: `it changed during each of ${copyAttempts} copies (another connection is writing it)`
    })
  })

const readSettings = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    Effect.forEach(["busy_timeout = 5000", "query_only = ON"], (pragma) => sql.unsafe(`PRAGMA ${pragma}`), {
      discard: true
    })
)

/**
 * An existing database opened read-only and used as it is, migrations not applied and its journal mode kept (a
 * backup may be in rollback-journal mode), every committed transaction read (those only in its `-wal` included), and
 * nothing created or changed beside it: what a command that only reads needs, even in a read-only directory.
 */
export const layerReadOnly = (filename: string) =>
  Layer.unwrapScoped(
    Effect.map(
      Effect.suspend(() =>
        fs.existsSync(`${filename}-wal`) && fs.existsSync(`${filename}-shm`)
          ? Effect.succeed({ file: filename, readonly: true })
          : Effect.map(privateCopy(filename), (copy) => ({ file: copy, readonly: false }))
      ),
      // The copy is opened read-write so SQLite can replay its -wal or roll back a hot journal; query_only refuses writes.
      ({ file, readonly }) =>
        Layer.effectDiscard(readSettings).pipe(
          Layer.provideMerge(SqliteClient.layer({ filename: file, readonly, disableWAL: true })),
          Layer.orDie
        )
    )
  )

/** Whether the connection's database is a writ database (writ's migration table and its evidence table). */
export const isWrit = Effect.map(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`SELECT name FROM sqlite_master
      WHERE type = 'table' AND name IN ('effect_sql_migrations', 'evidence_records')`),
  (rows) => rows.length === 2
)

/**
 * The migrations this writ has that the connection's database lacks, by name (`0010_policy_retirements`): a database
 * an older writ wrote, which a read-only connection reads as it is, never migrated.
 */
export const unapplied = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const migrations = yield* Effect.orDie(loader)
  const rows = yield* sql<{ readonly migration_id: number }>`SELECT migration_id FROM effect_sql_migrations`
  const applied = new Set(rows.map((row) => Number(row.migration_id)))
  return migrations.filter(([id]) => !applied.has(id)).map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`)
})

/** Whether an existing file holds a writ database, read, not changed: the check before a command writes it. */
export const isWritDatabase = (filename: string) =>
  Effect.scoped(
    Effect.flatMap(
      Layer.build(SqliteClient.layer({ filename, readonly: true, disableWAL: true })),
      (context) => Effect.provide(isWrit, context)
    )
  )
