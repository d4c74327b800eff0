import { Schema } from "effect"
import type { Uuid } from "../../base/IdGenerator.ts"
import { trustedMake } from "../../base/internal/trusted.ts"
import { ExecutionContext } from "../ExecutionContext.ts"
import type { Binding } from "../ExecutionContext.ts"

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

// The context's validation, compiled once: Effect 3's class constructor derives its type-side AST afresh on every call
// when a field has a default (`authentication_evidence`), so it recompiles its validator each time (11 KB a context,
// measured against 5 KB). The same checks, with the default supplied after them.
const { authentication_evidence, context_id: _, ...bound } = ExecutionContext.fields
const validBinding = Schema.validateSync(Schema.Struct(bound))
const validId = Schema.validateSync(ExecutionContext.fields.context_id)
const validEvidence = Schema.validateSync(authentication_evidence.from)

/**
 * A context an ingress built for a binding (validated; its other keys dropped) under a fresh id: its fields fixed, and
 * recorded as minted.
 */
export const mintContext = (binding: Binding, context_id: Uuid): ExecutionContext => {
  const evidence = binding.authentication_evidence
  const context = trustedMake(
    ExecutionContext,
    Object.assign({ context_id: validId(context_id) }, validBinding(binding), {
      authentication_evidence: evidence === undefined ? [] : validEvidence(evidence)
    })
  )
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
