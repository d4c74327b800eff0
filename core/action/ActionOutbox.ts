/**
 * What an action stages for the outbox during its own invocation: intents (a topic and a JSON object payload) that
 * commit with its attempt, in the StateStore transaction that commits the attempt, when the call succeeds. Only the
 * durable profile commits them; elsewhere staging is refused (`not_durable`), so an action never takes a message for
 * queued that no store keeps. A handler that is an Effect stages through this service; a Promise or plain handler
 * through its context's `stage`.
 */
import { Context, Effect, Either, ParseResult, Schema } from "effect"
import * as Canonical from "../base/Canonical.ts"
import { Identifier } from "../base/Refs.ts"

const parseJson = Schema.decodeEither(Schema.parseJson())

/** A string that parses as JSON. */
export const JsonText = Schema.String.pipe(
  Schema.filter((text) => Either.isRight(parseJson(text)) || "not JSON text")
)

/** An outbox intent as staged with its attempt; the store gives it an id, its run, attempt and time. */
export class IntentDraft extends Schema.Class<IntentDraft>("IntentDraft")({
  topic: Identifier,
  payload_json: JsonText
}) {}

/** An intent that was not staged, and why: not a durable profile, a malformed intent, or a call already concluded. */
export class ActionOutboxError extends Schema.TaggedError<ActionOutboxError>()("ActionOutboxError", {
  reason: Schema.Literal("not_durable", "invalid_intent", "concluded"),
  detail: Schema.String
}) {
  override get message() {
    return `outbox intent not staged (${this.reason}): ${this.detail}`
  }
}

/** The outbox of the invocation in progress. */
export class ActionOutbox extends Context.Tag("writ/ActionOutbox")<ActionOutbox, ActionOutbox.Service>() {}

/** The ActionOutbox service. */
export declare namespace ActionOutbox {
  /** Stage an intent: committed with the attempt if the call succeeds, in the order staged. */
  export interface Service {
    readonly stage: (
      topic: string,
      payload: { readonly [key: string]: Canonical.JsonValue }
    ) => Effect.Effect<void, ActionOutboxError>
  }
}

const decodeTopic = Schema.decodeUnknownEither(IntentDraft.fields.topic)

/**
 * The draft an intent stages as, or why it is malformed: a topic that is not an identifier or is writ's own (`writ`,
 * `writ.*`: the executor's outcome intent is a fact no action may forge), a payload not a canonical JSON object.
 */
export const draftOf = (topic: unknown, payload: unknown): Either.Either<IntentDraft, ActionOutboxError> => {
  const invalid = (detail: string) => Either.left(new ActionOutboxError({ reason: "invalid_intent", detail }))
  const checkedTopic = decodeTopic(topic)
  if (Either.isLeft(checkedTopic)) {
    return invalid(`topic: ${ParseResult.TreeFormatter.formatErrorSync(checkedTopic.left)}`)
  }
  if (/^writ(\.|$)/.test(checkedTopic.right)) {
    return invalid(`topic: ${checkedTopic.right} is writ's own (writ and writ.* are reserved)`)
  }
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    return invalid("payload: not a JSON object")
  }
  const text = Canonical.stringify(payload)
  if (Either.isLeft(text)) return invalid(`payload: ${text.left.message}`)
  return Either.right(
    IntentDraft.make({ topic: checkedTopic.right, payload_json: text.right }, { disableValidation: true })
  )
}

/** Stage an intent for the invocation in progress. */
export const stage = (
  topic: string,
  payload: { readonly [key: string]: Canonical.JsonValue }
): Effect.Effect<void, ActionOutboxError, ActionOutbox> =>
  Effect.flatMap(ActionOutbox, (outbox) => outbox.stage(topic, payload))
