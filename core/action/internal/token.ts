import { Either } from "effect"
import type { ActionDefinition, Handler } from "../Action.ts"
import { InvocationTokenError } from "../InvocationTokenError.ts"
import { unseal } from "./callable.ts"

const minting: unique symbol = Symbol("writ/InvocationToken.mint")
const refusals = new WeakSet<InvocationTokenError>()

// Effect fails with a proxy of the error inside a span (to attach the span's stack); the proxy answers this symbol with
// the error it wraps, which is the one this module issued.
const original = Symbol.for("effect/OriginalAnnotation")

/** Whether an error is a refusal this module issued (a handler cannot forge one by failing with the same class). */
export const isRefusal = (error: unknown): error is InvocationTokenError => {
  if (!(error instanceof InvocationTokenError)) return false
  const issued = (error as unknown as { readonly [original]?: unknown })[original] ?? error
  return issued instanceof InvocationTokenError && refusals.has(issued)
}

/** An opaque, one-use capability to invoke one action's handler once; its state is private to this module. */
export class InvocationToken {
  readonly #definition: ActionDefinition
  #spent = false

  constructor(key: typeof minting, definition: ActionDefinition) {
    if (key !== minting) throw new TypeError("invocation tokens are minted by the executor only")
    this.#definition = definition
  }

  /** Spend a token: the handler when the token is fresh and bound to this definition. */
  static redeem(
    token: InvocationToken | undefined,
    definition: ActionDefinition
  ): Either.Either<Handler, InvocationTokenError> {
    const refuse = (reason: InvocationTokenError["reason"]) => {
      const refusal = new InvocationTokenError({ reason, action: definition.name })
      refusals.add(refusal)
      return Either.left(refusal)
    }
    if (token === undefined) return refuse("missing")
    if (!(token instanceof InvocationToken) || token.#spent) return refuse("spent")
    token.#spent = true
    if (token.#definition !== definition) return refuse("mismatched")
    const handler = unseal<Handler>(definition)
    return handler === undefined ? refuse("unsealed") : Either.right(handler)
  }
}

/** Mint a fresh token (the executor's stage 12 only). */
export const mint = (definition: ActionDefinition): InvocationToken => new InvocationToken(minting, definition)

/** Spend a token (backends only). */
export const redeem = InvocationToken.redeem
