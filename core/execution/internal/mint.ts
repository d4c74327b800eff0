import { ExecutionContext } from "../ExecutionContext.ts"

// The contexts an ingress minted. Neither `ExecutionContext.make`, nor a decode, nor a copy of a minted one is in it.
const minted = new WeakSet<object>()

// Own fields stay readable but can no longer be reassigned; the object stays extensible, so Effect can cache its hash.
const lock = <A extends object>(value: A): A => {
  for (const key of Object.keys(value)) {
    Object.defineProperty(value, key, { writable: false, configurable: false })
  }
  return value
}

const frozen = <A>(value: A): A => value === undefined ? value : Object.freeze(value)

/** A context an ingress built: validated, its fields fixed, and recorded as minted. */
export const mintContext = (fields: ConstructorParameters<typeof ExecutionContext>[0]): ExecutionContext => {
  const context = ExecutionContext.make(fields)
  lock(context.execution_scope)
  frozen(context.authenticated_principal)
  frozen(context.tenant)
  frozen(context.policy_snapshot)
  frozen(context.effect_backend)
  frozen(context.authentication_evidence)
  minted.add(lock(context))
  return context
}

/** Whether an ingress minted this context (a WeakSet lookup). */
export const isMinted = (context: unknown): boolean =>
  typeof context === "object" && context !== null && minted.has(context)
