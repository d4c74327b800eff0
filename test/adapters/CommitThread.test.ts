import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, Layer, Logger, Scope } from "effect"
import { spawnSync } from "node:child_process"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as CommitDispatch from "../../adapters/node/internal/commitDispatch.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqliteEvidenceStore from "../../adapters/node/SqliteEvidenceStore.ts"
import type * as CommitQueue from "../../adapters/sql/internal/commitQueue.ts"
import * as EvidenceCommit from "../../adapters/sql/internal/evidenceCommit.ts"
import * as SqlEvidenceStore from "../../adapters/sql/SqlEvidenceStore.ts"
import type { Digest, Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { EvidenceRecord } from "../../core/evidence/Evidence.ts"
import type { AppendError, AppendReceipt } from "../../core/evidence/EvidenceStore.ts"
import { BudgetSpentError } from "../../core/policy/BudgetLedger.ts"
import { root } from "../fixtures/child.ts"
import { sealAt } from "../fixtures/evidence.ts"
import { tempDir } from "../fixtures/sqlite.ts"

// better-sqlite3 has no bundled types; a foreign connection to the file is all this test needs of it.
const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => {
  readonly exec: (sql: string) => unknown
  readonly close: () => unknown
}

const FIBERS = 32
const PER_FIBER = 8

/** A migrated file, its SqlClient, and the main-connection commit wrapped to count the records it commits. */
const setup = Effect.gen(function*() {
  const filename = path.join(yield* tempDir, "writ.db")
  const context = yield* Layer.build(Sqlite.layer({ filename }))
  const inline = yield* Effect.provide(EvidenceCommit.make, context)
  const storeFile = yield* Effect.provide(Sqlite.databaseFile, context)
  const onMain: Array<number> = []
  const counted: EvidenceCommit.Commit = (batch) =>
    Effect.suspend(() => {
      onMain.push(batch.reduce((sum, append) => sum + append.records.length, 0))
      return inline(batch)
    })
  return { filename, storeFile, context, counted, onMain }
})

/** `fibers` chains, each appended `perFiber` records one at a time, all chains at once; the receipts' heads. */
const appendChains = (submit: CommitQueue.Submit, fibers: number, perFiber: number) =>
  Effect.forEach(Array.from({ length: fibers }), () =>
    Effect.gen(function*() {
      const chain = yield* IdGenerator.uuid
      let head: { sequence: number; hash: Sha256Hex } | undefined
      for (let i = 0; i < perFiber; i++) {
        const record = yield* sealAt(chain, i, head?.hash ?? null)
        const [receipt] = yield* submit([record])
        head = { sequence: receipt!.sequence, hash: receipt!.head_hash }
      }
      return { chain, head: head! }
    }), { concurrency: "unbounded" })

const rowCount = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => Effect.map(sql<{ n: number }>`SELECT COUNT(*) AS n FROM evidence_records`, (rows) => rows[0]!.n)
)

const sum = (numbers: ReadonlyArray<number>) => numbers.reduce((total, n) => total + n, 0)

const provided = <A, E>(effect: Effect.Effect<A, E, IdGenerator.IdGenerator | Digest | Scope.Scope>) =>
  Effect.scoped(Effect.provide(effect, Layer.merge(IdGenerator.layerSeeded("commit-thread"), NodeDigest.layer)))

describe("SqlEvidenceStore commit thread", () => {
  it.effect("overlapping appends are committed by the thread, and every chain verifies on the main connection", () =>
    provided(Effect.gen(function*() {
      const { context, counted, filename, onMain, storeFile } = yield* setup
      const submit = yield* CommitDispatch.threaded(counted, 1024, { filename, start: "now" }, storeFile)
      const chains = yield* appendChains(submit, FIBERS, PER_FIBER)
      assert.strictEqual(yield* Effect.provide(rowCount, context), FIBERS * PER_FIBER)
      assert.isBelow(sum(onMain), FIBERS * PER_FIBER, "some batches went to the thread")
      const store = yield* Effect.provide(
        SqlEvidenceStore.make(),
        Layer.merge(Layer.succeedContext(context), NodeDigest.layer)
      )
      for (const { chain, head } of chains) {
        const verified = yield* store.verify(chain, head.hash)
        assert.deepStrictEqual([verified.valid, verified.checked_records], [true, PER_FIBER])
      }
    })))

  it.effect("a budget place lost on the thread comes back as the BudgetSpentError it is, and takes nothing", () =>
    provided(Effect.gen(function*() {
      const { context, counted, filename, onMain, storeFile } = yield* setup
      const submit = yield* CommitDispatch.threaded(counted, 1024, { filename, start: "now" }, storeFile)
      const window = { snapshot_digest: "d".repeat(64), rule_id: "calls", principal: "alice", window: 0 }
      const LIMIT = 5
      const placed = yield* Effect.forEach(Array.from({ length: FIBERS }), (_, index) =>
        Effect.gen(function*() {
          const record = yield* sealAt(yield* IdGenerator.uuid, 0, null)
          return yield* Effect.either(submit([record], [{ window, attempt_id: `attempt-${index}`, limit: LIMIT }]))
        }), { concurrency: "unbounded" })
      const refused = placed.filter(Either.isLeft).map((either) => either.left)
      assert.isBelow(sum(onMain), refused.length, "some refusals came back from the thread")
      assert.strictEqual(placed.filter(Either.isRight).length, LIMIT)
      assert.strictEqual(refused.length, FIBERS - LIMIT)
      for (const error of refused) {
        assert.instanceOf(error, BudgetSpentError)
        assert.deepStrictEqual([error._tag, (error as BudgetSpentError).index, (error as BudgetSpentError).count], [
          "BudgetSpentError",
          0,
          LIMIT
        ])
      }
      assert.strictEqual(yield* Effect.provide(rowCount, context), LIMIT, "a refused append stored nothing")
      const places = yield* Effect.provide(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM budget_admissions`),
        context
      )
      assert.strictEqual(places[0]!.n, LIMIT)
    })))

  it.effect("appends made one at a time are each committed on the main connection", () =>
    provided(Effect.gen(function*() {
      const { counted, filename, onMain, storeFile } = yield* setup
      const submit = yield* CommitDispatch.threaded(counted, 1024, { filename }, storeFile)
      yield* appendChains(submit, 1, 12)
      assert.deepStrictEqual(onMain, Array.from({ length: 12 }, () => 1))
    })))

  it.effect("an append made alone commits in the calling step on the direct connection, none while one is in flight", () =>
    provided(Effect.gen(function*() {
      const { context, counted, filename, onMain, storeFile } = yield* setup
      const submit = yield* CommitDispatch.threaded(counted, 1024, { filename }, storeFile)
      const now = submit.now!
      const chain = yield* IdGenerator.uuid
      const first = yield* sealAt(chain, 0, null)
      const placed = now([first])!
      assert.isTrue(Exit.isSuccess(placed))
      assert.strictEqual(yield* Effect.provide(rowCount, context), 1, "committed before now returned")
      // While an append waits for its commit on the effect path, `now` declines and writes nothing.
      const second = yield* sealAt(chain, 1, first.chain_hash)
      const pending = yield* Effect.fork(submit([second]))
      yield* Effect.yieldNow()
      const third = yield* sealAt(yield* IdGenerator.uuid, 0, null)
      assert.isUndefined(now([third]))
      yield* Fiber.join(pending)
      assert.strictEqual(yield* Effect.provide(rowCount, context), 2)
      assert.deepStrictEqual(onMain, [1], "only the effect-path append went through the store's connection")
    })))

  it.effect("another connection holding the write lock: `now` declines and writes nothing, then commits once it is free", () =>
    provided(Effect.gen(function*() {
      const { context, counted, filename, onMain, storeFile } = yield* setup
      const submit = yield* CommitDispatch.threaded(counted, 1024, { filename }, storeFile)
      const foreign = new Database(filename)
      yield* Effect.addFinalizer(() => Effect.sync(() => foreign.close()))
      const chain = yield* IdGenerator.uuid
      const first = yield* sealAt(chain, 0, null)
      const second = yield* sealAt(chain, 1, first.chain_hash)
      foreign.exec("BEGIN IMMEDIATE")
      assert.isUndefined(submit.now!([first]), "a lone insert")
      assert.isUndefined(submit.now!([first, second]), "a transaction")
      foreign.exec("ROLLBACK")
      assert.strictEqual(yield* Effect.provide(rowCount, context), 0)
      const placed = submit.now!([first, second])!
      assert.deepStrictEqual(
        Exit.map(placed, (receipts) => receipts.map((receipt) => receipt.sequence)),
        Exit.succeed([0, 1])
      )
      assert.strictEqual(yield* Effect.provide(rowCount, context), 2)
      assert.deepStrictEqual(onMain, [])
    })))

  it.effect("a thread that cannot open its file leaves every commit on the main connection, and says so", () =>
    provided(Effect.gen(function*() {
      const { counted, onMain, storeFile } = yield* setup
      const warnings: Array<string> = []
      const logger = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ logLevel, message }) => {
          if (logLevel._tag === "Warning") warnings.push(String(message))
        })
      )
      const nowhere = path.join(yield* tempDir, "missing", "writ.db")
      const submit = yield* Effect.provide(
        CommitDispatch.threaded(counted, 1024, { filename: nowhere, start: "now" }, storeFile),
        logger
      )
      yield* appendChains(submit, FIBERS, 2)
      assert.strictEqual(sum(onMain), FIBERS * 2)
      assert.strictEqual(warnings.length, 2)
      assert.match(warnings[0]!, /^evidence appends made alone wait for the effect runtime: /)
      assert.match(
        warnings[1]!,
        /evidence commits stay on the main thread: the evidence commit thread (failed|stopped)/
      )
    })))

  it.live("closing the store answers every append: committed with its receipt, or refused and not stored", () =>
    provided(Effect.gen(function*() {
      const { context, counted, filename, storeFile } = yield* setup
      const scope = yield* Scope.make()
      const submit = yield* Scope.extend(
        CommitDispatch.threaded(counted, 1024, { filename, start: "now" }, storeFile),
        scope
      )
      const appending = yield* Effect.fork(Effect.forEach(Array.from({ length: FIBERS }), () =>
        Effect.gen(function*() {
          const outcomes: Array<boolean> = []
          let head: Sha256Hex | null = null
          const chain = yield* IdGenerator.uuid
          for (let i = 0; i < PER_FIBER; i++) {
            const record: EvidenceRecord = yield* sealAt(chain, i, head)
            const result: Either.Either<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError> = yield* Effect
              .either(
                submit([record])
              )
            if (Either.isLeft(result)) {
              assert.strictEqual(result.left._tag, "EvidenceUnavailableError")
              break
            }
            head = result.right[0]!.head_hash
            outcomes.push(true)
          }
          return outcomes.length
        }), { concurrency: "unbounded" }))
      yield* Effect.sleep("20 millis")
      yield* Scope.close(scope, Exit.void)
      const committed = yield* Fiber.join(appending)
      assert.strictEqual(yield* Effect.provide(rowCount, context), sum(committed))
    })))

  it.effect("a thread that opened another file than the store's is stopped, and every commit stays on the main connection", () =>
    provided(Effect.gen(function*() {
      const { counted, onMain, storeFile } = yield* setup
      const other = yield* setup
      const warnings: Array<string> = []
      const logger = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ logLevel, message }) => {
          if (logLevel._tag === "Warning") warnings.push(String(message))
        })
      )
      const submit = yield* Effect.provide(
        CommitDispatch.threaded(counted, 1024, { filename: other.filename, start: "now" }, storeFile),
        logger
      )
      yield* appendChains(submit, FIBERS, 2)
      assert.strictEqual(sum(onMain), FIBERS * 2)
      assert.strictEqual(yield* Effect.provide(rowCount, other.context), 0)
      assert.deepStrictEqual(warnings, [
        `evidence appends made alone wait for the effect runtime: the direct connection opened ${other.storeFile}, not the store's ${storeFile}`,
        `evidence commits stay on the main thread: the evidence commit thread opened ${other.storeFile}, not the store's ${storeFile}`
      ])
    })))

  it.effect("an in-memory store starts no thread: overlapping appends all commit on its connection", () =>
    provided(Effect.gen(function*() {
      const context = yield* Layer.build(Sqlite.layer({ filename: ":memory:" }))
      const store = yield* Effect.provide(
        SqlEvidenceStore.make({
          dispatch: SqliteEvidenceStore.dispatchCommitThread({ filename: ":memory:", start: "now" })
        }),
        context
      )
      const chains = yield* appendChains((records) => store.appendAll(records), FIBERS, 2)
      assert.strictEqual(yield* Effect.provide(rowCount, context), FIBERS * 2)
      for (const { chain, head } of chains) assert.isTrue((yield* store.verify(chain, head.hash)).valid)
    })))

  it.live(
    "a thread that exits with a batch in flight: the batch is answered unavailable, later appends commit",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const child = spawnSync(process.execPath, [
          "--import",
          path.join(root, "test/fixtures/typescript-hooks.mjs"),
          "--import",
          path.join(root, "test/fixtures/commit-thread-exit.mjs"),
          path.join(root, "test/fixtures/thread-exit-child.ts"),
          path.join(dir, "writ.db")
        ], { encoding: "utf8" })
        assert.strictEqual(child.status, 0, child.stderr)
        const [first, second] = child.stdout.trim().split("\n").map((line) => JSON.parse(line))
        assert.deepStrictEqual(first, Array.from({ length: 8 }, () => "EvidenceUnavailableError"))
        assert.deepStrictEqual(second, Array.from({ length: 8 }, () => "ok"))
        assert.match(
          child.stderr,
          /evidence commits stay on the main thread: the evidence commit thread (exited|closed)/
        )
      }).pipe(Effect.scoped),
    60_000
  )

  it.scoped("a lone append made inside a caller's transaction on another database commits to the store's own file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* Layer.build(Sqlite.layer({ filename: path.join(dir, "store.db") }))
      const caller = yield* Layer.build(Sqlite.layer({ filename: path.join(dir, "caller.db") }))
      const commit = yield* Effect.provide(EvidenceCommit.make, store)
      const storeFile = yield* Effect.provide(Sqlite.databaseFile, store)
      const submit = yield* CommitDispatch.threaded(commit, 64, { filename: storeFile }, storeFile)
      const record = yield* sealAt(yield* IdGenerator.uuid, 0, null)
      const rows = Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM evidence_records`
      )
      // The caller's transaction is rolled back after the receipt: the record must already be in the store's file.
      const inside = yield* Effect.provide(
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => Effect.exit(sql.withTransaction(Effect.zipRight(submit([record]), Effect.fail("rolled back"))))
        ),
        caller
      )
      assert.isTrue(Exit.isFailure(inside))
      assert.strictEqual((yield* Effect.provide(rows, store))[0]!.n, 1)
      assert.strictEqual((yield* Effect.provide(rows, caller))[0]!.n, 0)
    }).pipe(Effect.provide(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto))))
})
