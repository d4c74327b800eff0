/**
 * The handlers sealed behind their definitions: a registry that knows no action type, so nothing it holds can be
 * reached except by the one module that redeems invocation tokens.
 */
const handlers = new WeakMap<object, unknown>()

/** Seal a handler behind its definition; only a redeemed invocation token unseals it. */
export const seal = <H>(definition: object, handler: H): void => {
  handlers.set(definition, handler)
}

/** The handler sealed behind a definition, as the type it was sealed with. */
export const unseal = <H>(definition: object): H | undefined => handlers.get(definition) as H | undefined
