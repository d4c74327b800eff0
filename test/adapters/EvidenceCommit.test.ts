/**
 * The SQL evidence commit, through both of its drivers (a SqlClient connection; better-sqlite3 synchronously, as the
 * commit thread runs it), on chains something other than writ has written to.
 */
import { Statement } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import type { Scope } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as EvidenceCommit from "../../adapters/sql/internal/evidenceCommit.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { EvidenceRecord } from "../../core/evidence/Evidence.ts"
import { evidenceColumns, sealAt } from "../fixtures/evidence.ts"
import { tempDir } from "../fixtures/sqlite.ts"

// better-sqlite3 directly: the synchronous driver's connection, and a foreign writer.
interface Database extends EvidenceCommit.SyncDatabase {
  readonly close: () => unknown
}
const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

/** Write a row as a foreign writer would, with no check at all (`sequence` as given, even if not a number). */
const writeForeign = (database: Database, record: EvidenceRecord, sequence: unknown = record.sequence) =>
  database.prepare(
    `INSERT INTO evidence_records (${evidenceColumns.join(", ")}) VALUES (${evidenceColumns.map(() => "?").join(", ")})`
  )
    .run(...evidenceColumns.map((column) => column === "sequence" ? sequence : record[column]))

/** A migrated file, a foreign connection to it, and the commit through the named driver. */
const setup = (driver: "sqlclient" | "sync") =>
  Effect.gen(function*() {
    const filename = path.join(yield* tempDir, "writ.db")
    const context = yield* Layer.build(Sqlite.layer({ filename }))
    const foreign = new Database(filename)
    const connection = new Database(filename)
    yield* Effect.addFinalizer(() => Effect.sync(() => [foreign, connection].forEach((database) => database.close())))
    const compiler = Statement.make(Effect.dieMessage("compile only"), Statement.makeCompilerSqlite(), [], undefined)
    const sync = EvidenceCommit.makeSync(connection, yield* EvidenceCommit.compile(compiler))
    const commit: EvidenceCommit.Commit = driver === "sync"
      ? (batch) =>
        Effect.suspend(() => {
          const placed = sync(batch)
          return placed === undefined ? Effect.dieMessage("the database stayed locked") : Effect.succeed(placed)
        })
      : yield* Effect.provide(EvidenceCommit.make, context)
    const stored = (record: EvidenceRecord) =>
      foreign.prepare("SELECT record_id FROM evidence_records WHERE record_id = ?").all(record.record_id).length === 1
    return { commit, connection, foreign, stored }
  })

const failureOf = (placed: EvidenceCommit.Placed) =>
  Exit.isFailure(placed) && placed.cause._tag === "Fail" ? placed.cause.error : undefined

const provided = <A, E>(effect: Effect.Effect<A, E, IdGenerator.IdGenerator | Digest | Scope.Scope>) =>
  Effect.provide(effect, Layer.merge(IdGenerator.layerSeeded("evidence-commit"), NodeDigest.layer))

for (const driver of ["sqlclient", "sync"] as const) {
  describe(`evidence commit (${driver} driver)`, () => {
    it.scoped("a record into a gap below the head is refused, alone or in a batch: it must extend the head", () =>
      provided(Effect.gen(function*() {
        const { commit, foreign, stored } = yield* setup(driver)
        const chain = yield* IdGenerator.uuid
        const zero = yield* sealAt(chain, 0, null)
        const one = yield* sealAt(chain, 1, zero.chain_hash)
        assert.isTrue((yield* commit([{ records: [zero, one] }])).every(Exit.isSuccess))
        writeForeign(foreign, yield* sealAt(chain, 3, one.chain_hash, 33))
        const gaps = [yield* sealAt(chain, 2, one.chain_hash, 22), yield* sealAt(chain, 2, one.chain_hash, 23)]
        const other = yield* sealAt(yield* IdGenerator.uuid, 0, null)
        const [lone] = yield* commit([{ records: [gaps[0]!] }])
        const [inBatch, beside] = yield* commit([{ records: [gaps[1]!] }, { records: [other] }])
        for (const refused of [lone!, inBatch!]) assert.strictEqual(failureOf(refused)?._tag, "EvidenceConflictError")
        assert.isTrue(Exit.isSuccess(beside!), "the append beside it stands")
        assert.deepStrictEqual([stored(gaps[0]!), stored(gaps[1]!), stored(other)], [false, false, true])
      })))

    it.scoped("an append whose budget place is taken is refused whole; the rest of its batch commits", () =>
      provided(Effect.gen(function*() {
        const { commit, foreign, stored } = yield* setup(driver)
        const place = (attempt_id: string, limit: number, rule_id = "calls") => ({
          window: { snapshot_digest: "d".repeat(64), rule_id, principal: "alice", window: 0 },
          attempt_id,
          limit
        })
        const [a, b, c] = [
          yield* sealAt(yield* IdGenerator.uuid, 0, null),
          yield* sealAt(yield* IdGenerator.uuid, 0, null)
        ]
          .concat([yield* sealAt(yield* IdGenerator.uuid, 0, null)])
        // The window holds one place: `a` takes it, `b` finds it taken (its other place, free, is undone with it).
        const placed = yield* commit([
          { records: [a!], admissions: [place("a", 1)] },
          { records: [b!], admissions: [place("b", 5, "other"), place("b", 1)] },
          { records: [c!] }
        ])
        assert.isTrue(Exit.isSuccess(placed[0]!) && Exit.isSuccess(placed[2]!))
        const refused = failureOf(placed[1]!)
        assert.strictEqual(refused?._tag, "BudgetSpentError")
        assert.deepStrictEqual([(refused as { index: number }).index, (refused as { count: number }).count], [1, 1])
        assert.deepStrictEqual([stored(a!), stored(b!), stored(c!)], [true, false, true])
        const holders = foreign.prepare("SELECT rule_id, attempt_id FROM budget_admissions ORDER BY attempt_id").all()
        assert.deepStrictEqual(holders, [{ rule_id: "calls", attempt_id: "a" }])
      })))

    it.scoped("a sequence 0 on a chain that holds records is refused, even where sequence 0 is missing", () =>
      provided(Effect.gen(function*() {
        const { commit, foreign, stored } = yield* setup(driver)
        const chain = yield* IdGenerator.uuid
        const first = yield* sealAt(chain, 0, null)
        writeForeign(foreign, yield* sealAt(chain, 1, first.chain_hash))
        const [placed] = yield* commit([{ records: [first] }])
        assert.strictEqual(failureOf(placed!)?._tag, "EvidenceConflictError")
        assert.isFalse(stored(first))
      })))

    it.scoped("a head that does not decode undoes the whole batch: every append unavailable, none stored", () =>
      provided(Effect.gen(function*() {
        const { commit, connection, foreign, stored } = yield* setup(driver)
        const broken = yield* IdGenerator.uuid
        const head = yield* sealAt(broken, 0, null)
        writeForeign(foreign, head, "x")
        const fine = yield* sealAt(yield* IdGenerator.uuid, 0, null)
        const onBroken = yield* sealAt(broken, 1, head.chain_hash)
        const placed = yield* commit([{ records: [fine] }, { records: [onBroken] }])
        assert.deepStrictEqual(placed.map((result) => failureOf(result)?._tag), [
          "EvidenceUnavailableError",
          "EvidenceUnavailableError"
        ])
        assert.deepStrictEqual([stored(fine), stored(onBroken)], [false, false])
        assert.isFalse(connection.inTransaction, "no transaction is left open")
      })))
  })
}

describe("evidence commit (sync driver) on a connection left inside a transaction", () => {
  it.scoped("undoes that transaction and commits the batch, so no transaction outlives a commit", () =>
    provided(Effect.gen(function*() {
      const { commit, connection, stored } = yield* setup("sync")
      const left = yield* sealAt(yield* IdGenerator.uuid, 0, null)
      connection.exec("BEGIN")
      writeForeign(connection, left)
      const record = yield* sealAt(yield* IdGenerator.uuid, 0, null)
      const [placed] = yield* commit([{ records: [record] }])
      assert.isTrue(Exit.isSuccess(placed!))
      assert.deepStrictEqual([stored(record), stored(left)], [true, false])
      assert.isFalse(connection.inTransaction)
    })))
})
