import { Effect, Either } from "effect"
import type { IntentDraft } from "../ActionOutbox.ts"
import { ActionOutbox, ActionOutboxError, draftOf } from "../ActionOutbox.ts"

/** One durable invocation's outbox: the service its callable stages to, closed with the intents staged. */
export const stager = () => {
  const staged: Array<IntentDraft> = []
  let open = true
  const service = ActionOutbox.of({
    stage: (topic, payload) =>
      Effect.suspend(() => {
        const draft = draftOf(topic, payload)
        if (Either.isLeft(draft)) return Effect.fail(draft.left)
        if (!open) {
          return Effect.fail(new ActionOutboxError({ reason: "concluded", detail: "its invocation has concluded" }))
        }
        staged.push(draft.right)
        return Effect.void
      })
  })
  /** No more staging: the intents staged so far, in order. */
  const close = (): ReadonlyArray<IntentDraft> => {
    open = false
    return staged
  }
  return { service, close }
}

/** One invocation's outbox. */
export type Stager = ReturnType<typeof stager>

/** The outbox of a profile that commits no intents: staging is refused (after the intent's own checks). */
export const refusing = ActionOutbox.of({
  stage: (topic, payload) =>
    Effect.suspend(() => {
      const draft = draftOf(topic, payload)
      return Either.isLeft(draft) ? Effect.fail(draft.left) : Effect.fail(
        new ActionOutboxError({ reason: "not_durable", detail: "only the durable profile commits an action's intents" })
      )
    })
})
