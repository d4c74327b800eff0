import type { ActionDefinition, Handler } from "../Action.ts"

const handlers = new WeakMap<ActionDefinition, Handler>()

/** Seal a handler behind its definition; only a redeemed invocation token unseals it. */
export const seal = (definition: ActionDefinition, handler: Handler): void => {
  handlers.set(definition, handler)
}

/** The handler sealed behind a definition. */
export const unseal = (definition: ActionDefinition): Handler | undefined => handlers.get(definition)
