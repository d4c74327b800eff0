/**
 * The in-memory SecretStore: the values given at construction, copied, so later changes to the caller's record do not
 * reach it. For tests and for programs that already hold their secrets. Runtimes: every one.
 */
import { Effect, Layer, Redacted } from "effect"
import { SecretStore, SecretStoreError } from "../../core/action/SecretStore.ts"

/** A store over `secrets` (name to value). */
export const make = (
  secrets: Readonly<Record<string, string | Redacted.Redacted<string>>>
): SecretStore.Service => {
  const values = new Map(
    Object.entries(secrets).map(([name, value]) => [name, typeof value === "string" ? Redacted.make(value) : value])
  )
  return {
    resolve: (name) => {
      const value = values.get(name)
      return value === undefined
        ? Effect.fail(
          new SecretStoreError({ reason: "not_found", name, detail: "the memory store holds no such secret" })
        )
        : Effect.succeed(value)
    }
  }
}

/** The in-memory SecretStore as a Layer. */
export const layer = (
  secrets: Readonly<Record<string, string | Redacted.Redacted<string>>>
): Layer.Layer<SecretStore> => Layer.sync(SecretStore, () => make(secrets))

/** The in-memory SecretStore's layer, under the name a store selection uses. */
export const layerMemory = layer
