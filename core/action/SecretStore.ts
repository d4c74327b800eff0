/**
 * The SecretStore port: secrets by name, the names the policy's `secret_exposure` rules and an action's declared
 * `secrets` use. A value leaves a store only as a `Redacted`, to the backend that injects it into the action's
 * process; plans, argv, evidence, outcomes and errors name a secret and never hold its value.
 */
import { Context, Effect, Schema } from "effect"
import type { Redacted } from "effect"

/** Why a secret could not be resolved: no such name, or the store could not be read; it names the secret, never a value. */
export class SecretStoreError extends Schema.TaggedError<SecretStoreError>()("SecretStoreError", {
  reason: Schema.Literal("not_found", "unavailable"),
  name: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `secret ${this.name} ${this.reason}: ${this.detail}`
  }
}

/** Where secrets come from. */
export class SecretStore extends Context.Tag("writ/SecretStore")<SecretStore, SecretStore.Service>() {}

/** The SecretStore service. */
export declare namespace SecretStore {
  /** A store: one secret's value by its name. */
  export interface Service {
    readonly resolve: (name: string) => Effect.Effect<Redacted.Redacted<string>, SecretStoreError>
  }
}

/** The values of `names`, by name, from `store`: every one, or the first that could not be resolved. */
export const resolveAll = (
  store: SecretStore.Service,
  names: ReadonlyArray<string>
): Effect.Effect<ReadonlyMap<string, Redacted.Redacted<string>>, SecretStoreError> =>
  Effect.map(
    Effect.forEach(names, (name) => Effect.map(store.resolve(name), (value) => [name, value] as const)),
    (entries) => new Map(entries)
  )
