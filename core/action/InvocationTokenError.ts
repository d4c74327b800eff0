/**
 * The refusal a backend returns for an invoke without a fresh, matching invocation token.
 */
import { Schema } from "effect"

/** A backend refused an invoke: no token, a spent token, a token for another action, or no sealed handler. */
export class InvocationTokenError extends Schema.TaggedError<InvocationTokenError>()("InvocationTokenError", {
  reason: Schema.Literal("missing", "spent", "mismatched", "unsealed"),
  action: Schema.String
}) {
  override get message() {
    return `invoke of ${this.action} refused: invocation token ${this.reason}`
  }
}
