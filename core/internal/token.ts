import { Either } from "effect"
import type { ActionDefinition, Handler } from "../Action.ts"
import { InvocationTokenError } from "../InvocationTokenError.ts"
import { unseal } from "./callable.ts"

/** An opaque, one-use capability to invoke one action's handler once. */
export interface InvocationToken {
  readonly _InvocationToken: unique symbol
}

const live = new WeakMap<InvocationToken, ActionDefinition>()

/** Mint a fresh token for one invocation of one definition (the executor's stage 12 only). */
export const mint = (definition: ActionDefinition): InvocationToken => {
  const token = Object.freeze(Object.create(null)) as InvocationToken
  live.set(token, definition)
  return token
}

/** Spend a token: the handler when the token is fresh and bound to this definition. */
export const redeem = (
  token: InvocationToken | undefined,
  definition: ActionDefinition
): Either.Either<Handler, InvocationTokenError> => {
  if (token === undefined) return Either.left(new InvocationTokenError({ reason: "missing", action: definition.name }))
  const bound = live.get(token)
  live.delete(token)
  if (bound === undefined) return Either.left(new InvocationTokenError({ reason: "spent", action: definition.name }))
  if (bound !== definition) {
    return Either.left(new InvocationTokenError({ reason: "mismatched", action: definition.name }))
  }
  const handler = unseal(definition)
  return handler === undefined
    ? Either.left(new InvocationTokenError({ reason: "unsealed", action: definition.name }))
    : Either.right(handler)
}
