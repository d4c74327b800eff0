import { ActionBackendError } from "../ActionExecutionBackend.ts"

const issued = new WeakSet<ActionBackendError>()

// Effect fails with a proxy of the error inside a span; the proxy answers this symbol with the error it wraps.
const original = Symbol.for("effect/OriginalAnnotation")

/** A backend's own failure (not its handler's): the only way to make one the executor concludes by. */
export const issue = (fields: ConstructorParameters<typeof ActionBackendError>[0]): ActionBackendError => {
  const error = new ActionBackendError(fields)
  issued.add(error)
  return error
}

/** Whether an error is a backend failure issued here (a handler failing with the same class is only a failure). */
export const isIssued = (error: unknown): error is ActionBackendError => {
  if (!(error instanceof ActionBackendError)) return false
  const unwrapped = (error as unknown as { readonly [original]?: unknown })[original] ?? error
  return unwrapped instanceof ActionBackendError && issued.has(unwrapped)
}
