/**
 * The write transaction every SQL store uses instead of `sql.withTransaction`.
 */
import { SqlClient } from "@effect/sql"
import type { SqlConnection } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Exit, Option } from "effect"

const begin = (sql: SqlClient.SqlClient) =>
  sql.onDialectOrElse({ sqlite: () => "BEGIN IMMEDIATE", orElse: () => "BEGIN" })

// The body in a transaction of its own on a reserved connection: committed when it succeeds, rolled back otherwise.
const transact = Effect.fnUntraced(function*<A, E>(
  sql: SqlClient.SqlClient,
  body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>,
  restore: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>
) {
  const connection = yield* restore(sql.reserve)
  const rollback = connection.execute("ROLLBACK", [], undefined).pipe(Effect.orElse(() => Effect.void))
  // A BEGIN refused because a transaction is somehow still open: undo that one too, so none outlives its body.
  yield* Effect.tapError(connection.execute(begin(sql), [], undefined), () => rollback)
  const done = yield* Effect.exit(
    restore(Effect.provideService(body(connection), SqlClient.TransactionConnection, [connection, 0]))
  )
  const committed = Exit.isSuccess(done)
    ? yield* Effect.exit(connection.execute("COMMIT", [], undefined))
    : undefined
  if (committed === undefined || Exit.isFailure(committed)) {
    // SQLite may have rolled back already (an I/O error, a full disk): nothing more to undo then.
    yield* rollback
    if (committed !== undefined) yield* committed
  }
  return yield* done
})

/**
 * One write transaction on a reserved connection, the body's statements on it. Under SQLite it begins IMMEDIATE:
 * the write lock is taken (or waited for, up to the busy timeout) before the body reads, so no other process can
 * write between its reads and its writes; a deferred BEGIN would fail with SQLITE_BUSY there instead of waiting.
 * Unlike `sql.withTransaction`, a refused COMMIT is a failure, rolled back, not a defect left open; an interrupted
 * body is rolled back before the interruption goes on, so no transaction outlives its fiber. Inside another
 * transaction the body joins it.
 */
export const writeTransaction = (sql: SqlClient.SqlClient) =>
<A, E>(
  body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>
): Effect.Effect<A, E | SqlError> =>
  Effect.flatMap(
    Effect.serviceOption(SqlClient.TransactionConnection),
    (outer) =>
      Option.isSome(outer) ?
        body(outer.value[0]) :
        Effect.scoped(Effect.uninterruptibleMask((restore) => transact(sql, body, restore)))
  )
