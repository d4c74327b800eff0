/**
 * `writ outbox pending|deliver`: list the outbox intents awaiting delivery, and deliver them as JSON lines on standard
 * output (an intent is marked delivered once its line is written; a closed output stops the pass and leaves the rest
 * pending, charged nothing). Exit codes: 0 ok, 1 an intent not delivered or a store failure, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Either, Option } from "effect"
import type { OutboxIntent } from "../../../core/state/Attempt.ts"
import { AttemptStore } from "../../../core/state/AttemptStore.ts"
import * as Outbox from "../../../core/state/Outbox.ts"
import { CliInputError, exitOneOnFailure, json, setExitCode } from "./internal/input.ts"
import { short, table } from "./internal/render.ts"
import { db, withReadStores, withStores } from "./internal/stores.ts"

const limit = Options.integer("limit").pipe(
  Options.optional,
  Options.withDescription("the most intents to take (default 100)")
)

/** An intent as a line a consumer reads: its identity, topic, payload (as JSON, not text) and delivery count. */
const intentLine = (intent: OutboxIntent) =>
  JSON.stringify({
    intent_id: intent.intent_id,
    run_id: intent.run_id,
    attempt_id: intent.attempt_id,
    topic: intent.topic,
    payload: JSON.parse(intent.payload_json),
    created_at: intent.created_at,
    delivery_attempts: intent.delivery_attempts
  })

/** Standard output as a sink: an intent is delivered once its line has been handed to the output; a closed output stops the pass. */
const stdoutSink = Outbox.OutboxSink.of({
  deliver: (intent) =>
    Effect.async<void, Outbox.SinkUnavailableError>((resume) => {
      process.stdout.write(`${intentLine(intent)}\n`, (error) =>
        resume(
          error === null || error === undefined
            ? Effect.void
            : Effect.fail(new Outbox.SinkUnavailableError({ reason_code: "outbox.output_closed" }))
        ))
    })
})

const pending = Command.make(
  "pending",
  { db, limit, json },
  ({ db, json, limit }) =>
    Effect.gen(function*() {
      const taken = Option.getOrElse(limit, () => 100)
      if (taken < 1) return yield* new CliInputError({ message: `--limit must be a positive integer, got ${taken}` })
      const intents = yield* withReadStores(db, Effect.flatMap(AttemptStore, (store) => store.pendingIntents(taken)))
      yield* Console.log(
        json ? `[${intents.map(intentLine).join(",")}]` : intents.length === 0
          ? "no intent awaits delivery"
          : table(
            ["intent", "topic", "run", "attempt", "created", "attempts", "last reason"],
            intents.map((intent) => [
              intent.intent_id,
              intent.topic,
              short(intent.run_id),
              short(intent.attempt_id),
              intent.created_at,
              String(intent.delivery_attempts),
              intent.last_reason_code ?? "-"
            ])
          )
      )
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription("List the outbox intents awaiting delivery, oldest first"))

const deliver = Command.make(
  "deliver",
  {
    db,
    limit,
    maxAttempts: Options.integer("max-attempts").pipe(
      Options.optional,
      Options.withDescription("delivery attempts before an intent fails for good (default 5)")
    )
  },
  ({ db, limit, maxAttempts }) =>
    Effect.gen(function*() {
      const options = { limit: Option.getOrUndefined(limit), maxAttempts: Option.getOrUndefined(maxAttempts) }
      // Bad options are refused before the database is opened (or migrated).
      yield* Either.mapLeft(Outbox.checkOptions(options), (error) => new CliInputError({ message: error.message }))
      // A closed output is the write's error, answered to its callback; unheard, the stream's event would end the process.
      process.stdout.on("error", () => {})
      const report = yield* withStores(db, Outbox.deliverPending(options)).pipe(
        Effect.provideService(Outbox.OutboxSink, stdoutSink),
        Effect.catchTag("DeliverOptionsError", (error) => new CliInputError({ message: error.message }))
      )
      yield* Console.error(
        `delivered ${report.delivered.length}, kept pending for a retry ${report.retrying.length}, failed for good ${report.failed.length}${
          report.halted === null ? "" : `; stopped (${report.halted}): the rest stay pending, charged no attempt`
        }`
      )
      if (report.retrying.length + report.failed.length > 0 || report.halted !== null) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Deliver pending outbox intents, oldest first, as JSON lines on standard output (a summary on standard error)"
))

/** `writ outbox`. */
export const command = Command.make("outbox").pipe(
  Command.withSubcommands([pending, deliver]),
  Command.withDescription("The durable outbox: intents committed with their attempts, and their delivery")
)
