/**
 * The durable ApprovalQueue over `@effect/sql`, with the in-memory queue's semantics: requests are listed in filing
 * order, a request filed again under a known id changes nothing, and every decision or use is a compare-and-set
 * (one conditional UPDATE, then a read of why it missed, in one transaction), so two deciders or two consumers, in
 * one process or in two, never both succeed. A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient that has UPDATE ... RETURNING (tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer, Option, ParseResult, Schema } from "effect"
import type { Approver } from "../../core/approval/Approval.ts"
import {
  ApprovalError,
  ApprovalQueue,
  ApprovalRecord,
  ApprovalRequest,
  ApprovalState,
  checkedApprover
} from "../../core/approval/Approval.ts"
import * as Canonical from "../../core/base/Canonical.ts"
import { Identifier } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import { writeTransaction } from "./internal/transaction.ts"

const RecordRow = Schema.Struct({
  request_json: Schema.parseJson(ApprovalRequest),
  state: ApprovalState,
  decided_by: Schema.NullOr(Identifier)
})

const StatusRow = Schema.Struct({
  state: ApprovalState,
  approver_class: Schema.String,
  binding_digest: Schema.String,
  expires_at_micros: Schema.Number,
  request_id: Schema.NullOr(Schema.String),
  consumed_by: Schema.NullOr(Schema.String)
})

const RequestRow = Schema.Struct({ request_json: Schema.parseJson(ApprovalRequest) })

const toRecord = (row: typeof RecordRow.Type) =>
  ApprovalRecord.make({
    request: row.request_json,
    state: row.state,
    ...(row.decided_by === null ? {} : { decided_by: row.decided_by })
  })

/** A broken database (or a row that no longer decodes) is a defect: the port has no error for it. */
const orDie = <A, E, R>(effect: Effect.Effect<A, E | SqlError | ParseResult.ParseError, R>): Effect.Effect<A, E, R> =>
  Effect.catchIf(
    effect,
    (error): error is SqlError | ParseResult.ParseError => error instanceof SqlError || ParseResult.isParseError(error),
    Effect.die
  )

/** An ApprovalQueue over the SqlClient in context. */
export const make: Effect.Effect<ApprovalQueue.Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const transaction = writeTransaction(sql)

  const Id = Schema.Struct({ approval_id: Schema.String })
  const findStatus = SqlSchema.findOne({
    Request: Id,
    Result: StatusRow,
    execute: ({ approval_id }) =>
      sql`SELECT state, approver_class, binding_digest, expires_at_micros,
          json_extract(request_json, '$.request_id') AS request_id, consumed_by FROM approvals WHERE approval_id = ${approval_id}`
  })
  const findRecords = SqlSchema.findAll({
    Request: Schema.Struct({ approver_class: Schema.optional(Schema.String), state: Schema.optional(ApprovalState) }),
    Result: RecordRow,
    execute: ({ approver_class, state }) =>
      sql`SELECT request_json, state, decided_by FROM approvals WHERE ${
        sql.and([
          ...(approver_class === undefined ? [] : [sql`approver_class = ${approver_class}`]),
          ...(state === undefined ? [] : [sql`state = ${state}`])
        ])
      } ORDER BY position`
  })
  const findRequest = SqlSchema.findOne({
    Request: Id,
    Result: RequestRow,
    execute: ({ approval_id }) => sql`SELECT request_json FROM approvals WHERE approval_id = ${approval_id}`
  })
  const decideOne = SqlSchema.findAll({
    Request: Schema.Struct({
      approval_id: Schema.String,
      state: Schema.Literal("approved", "rejected"),
      approver_id: Schema.String,
      approver_class: Schema.String
    }),
    Result: RecordRow,
    execute: ({ approval_id, approver_class, approver_id, state }) =>
      sql`UPDATE approvals SET state = ${state}, decided_by = ${approver_id}
        WHERE approval_id = ${approval_id} AND state = 'pending' AND approver_class = ${approver_class}
        RETURNING request_json, state, decided_by`
  })
  const consumeOne = SqlSchema.findAll({
    Request: Schema.Struct({
      approval_id: Schema.String,
      binding_digest: Schema.String,
      now: Schema.Number,
      request_id: Schema.NullOr(Schema.String),
      attempt_id: Schema.NullOr(Schema.String)
    }),
    Result: RequestRow,
    execute: ({ approval_id, attempt_id, binding_digest, now, request_id }) =>
      sql`UPDATE approvals SET state = 'consumed', consumed_by = ${attempt_id}
        WHERE approval_id = ${approval_id} AND state = 'approved' AND binding_digest = ${binding_digest}
          AND expires_at_micros > ${now} AND (${request_id} IS NULL OR json_extract(request_json, '$.request_id') IS NOT ${request_id})
        RETURNING request_json`
  })

  const submit = Effect.fn("SqlApprovalQueue.submit")(
    function*(request: ApprovalRequest) {
      const json = yield* Schema.encode(ApprovalRequest)(request).pipe(Effect.flatMap(Canonical.stringify))
      // The first filing under an id stands: filing it again must not reset a decided or used approval.
      yield* sql`INSERT INTO approvals (approval_id, approver_class, binding_digest, expires_at_micros, request_json, state)
        VALUES (${request.approval_id}, ${request.approver_class}, ${request.binding_digest},
          ${Time.toMicros(request.expires_at)}, ${json}, 'pending')
        ON CONFLICT (approval_id) DO NOTHING`
    },
    Effect.orDie
  )

  const list = Effect.fn("SqlApprovalQueue.list")(
    function*(filter: { readonly approver_class?: string; readonly state?: typeof ApprovalState.Type } = {}) {
      return (yield* findRecords(filter)).map(toRecord)
    },
    Effect.orDie
  )

  const decide = (state: "approved" | "rejected") =>
    Effect.fn(`SqlApprovalQueue.${state === "approved" ? "approve" : "reject"}`)(
      function*(approval_id: string, offered: Approver) {
        const approver = yield* checkedApprover(approval_id, offered)
        return yield* transaction(() =>
          Effect.gen(function*() {
            const [decided] = yield* decideOne({
              approval_id,
              state,
              approver_id: approver.id,
              approver_class: approver.approver_class
            })
            if (decided !== undefined) return toRecord(decided)
            const status = yield* findStatus({ approval_id })
            const fail = (reason: ApprovalError["reason"]) => new ApprovalError({ reason, approval_id })
            if (Option.isNone(status)) return yield* fail("forged")
            if (status.value.state !== "pending") return yield* fail("decided")
            return yield* fail("wrong_approver")
          })
        )
      },
      orDie
    )

  const consume = Effect.fn("SqlApprovalQueue.consume")(
    function*(
      approval_id: string,
      binding_digest: string,
      now: Time.Timestamp,
      request_id?: string,
      attempt_id?: string
    ) {
      return yield* transaction(() =>
        Effect.gen(function*() {
          const [used] = yield* consumeOne({
            approval_id,
            binding_digest,
            now: Time.toMicros(now),
            request_id: request_id ?? null,
            attempt_id: attempt_id ?? null
          })
          if (used !== undefined) return used.request_json
          const status = yield* findStatus({ approval_id })
          const fail = (reason: ApprovalError["reason"]) => new ApprovalError({ reason, approval_id })
          if (Option.isNone(status)) return yield* fail("forged")
          const found = status.value
          if (found.state === "consumed" && attempt_id !== undefined && found.consumed_by === attempt_id) {
            if (found.binding_digest !== binding_digest) return yield* fail("mismatched")
            return Option.getOrThrow(yield* findRequest({ approval_id })).request_json
          }
          if (found.state === "consumed") return yield* fail("reused")
          if (found.state === "rejected") return yield* fail("rejected")
          if (found.state === "pending") return yield* fail("pending")
          if (found.binding_digest !== binding_digest) return yield* fail("mismatched")
          if (Time.toMicros(now) >= found.expires_at_micros) return yield* fail("expired")
          if (request_id !== undefined && found.request_id === request_id) return yield* fail("same_request")
          return yield* Effect.dieMessage(`approval ${approval_id} is usable but the compare-and-set missed it`)
        })
      )
    },
    orDie
  )

  return { submit, list, approve: decide("approved"), reject: decide("rejected"), consume }
})

/** The ApprovalQueue over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`). */
export const layer: Layer.Layer<ApprovalQueue, never, SqlClient.SqlClient> = Layer.effect(ApprovalQueue, make)
