/**
 * The action registry (the seed's ActionManager): identity, aliases, versions, provenance and
 * collision rules, resolving a reference to an immutable descriptor. It never invokes.
 */
import { Context, Effect, Either, Layer, Schema } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import { Digest } from "../base/Digest.ts"
import type { ActionRef } from "../base/Refs.ts"
import type { ActionDefinition } from "./Action.ts"
import type { ActionDescriptor } from "./ActionDescriptor.ts"
import { describe } from "./ActionDescriptor.ts"

/** A registration whose name, alias or version is already taken, naming both actions. */
export class ActionCollisionError extends Schema.TaggedError<ActionCollisionError>()("ActionCollisionError", {
  name: Schema.String,
  claimed: Schema.String,
  existing: Schema.String
}) {
  override get message() {
    return `cannot register ${this.name}: "${this.claimed}" already names ${this.existing}`
  }
}

/** No registered action answers to a reference. */
export class ActionNotFoundError extends Schema.TaggedError<ActionNotFoundError>()("ActionNotFoundError", {
  name: Schema.String,
  version: Schema.optional(Schema.String)
}) {
  override get message() {
    return `no action ${this.name}${this.version === undefined ? "" : `@${this.version}`} is registered`
  }
}

/** A source of actions discovered at run time. */
export interface Plugin {
  readonly id: string
  readonly discover: Effect.Effect<ReadonlyArray<ActionDefinition>>
}

/** A definition together with its pinned descriptor. */
export interface ResolvedAction {
  readonly definition: ActionDefinition
  readonly descriptor: ActionDescriptor
}

/** Registers and resolves actions. */
export class ActionRegistry extends Context.Tag("writ/ActionRegistry")<ActionRegistry, ActionRegistry.Service>() {}

/** The ActionRegistry service. */
export declare namespace ActionRegistry {
  /** What the registry offers: registration and resolution, and no way to call a handler. */
  export interface Service {
    readonly register: (
      definition: ActionDefinition
    ) => Effect.Effect<ActionDescriptor, ActionCollisionError | CanonicalJsonError>
    readonly discover: (
      plugin: Plugin
    ) => Effect.Effect<ReadonlyArray<ActionDescriptor>, ActionCollisionError | CanonicalJsonError>
    /** Resolve a reference; the result is an Either, itself an Effect, so hot paths can read it synchronously. */
    readonly resolve: (ref: ActionRef) => Either.Either<ResolvedAction, ActionNotFoundError>
    readonly list: Effect.Effect<ReadonlyArray<ActionDescriptor>>
  }
}

const label = (definition: { readonly name: string; readonly version: string }) =>
  `${definition.name}@${definition.version}`

/** A registry holding its actions in memory. */
export const make: Effect.Effect<ActionRegistry.Service, never, Digest> = Effect.gen(function*() {
  const digest = yield* Digest
  const owners = new Map<string, string>()
  const versions = new Map<string, Array<ResolvedAction>>()

  const register = Effect.fn("ActionRegistry.register")(function*(definition: ActionDefinition) {
    const claims = [definition.name, ...definition.aliases]
    for (const claimed of claims) {
      const owner = owners.get(claimed)
      if (owner !== undefined && owner !== definition.name) {
        return yield* new ActionCollisionError({ name: label(definition), claimed, existing: owner })
      }
    }
    const existing = versions.get(definition.name) ?? []
    const same = existing.find((entry) => entry.definition.version === definition.version)
    if (same !== undefined) {
      return yield* new ActionCollisionError({
        name: label(definition),
        claimed: label(definition),
        existing: label(same.definition)
      })
    }
    const descriptor = yield* Effect.provideService(describe(definition), Digest, digest)
    for (const claimed of claims) owners.set(claimed, definition.name)
    versions.set(definition.name, [...existing, { definition, descriptor }])
    return descriptor
  })

  const resolve = (ref: ActionRef): Either.Either<ResolvedAction, ActionNotFoundError> => {
    const name = owners.get(ref.name)
    const candidates = name === undefined ? undefined : versions.get(name)
    const found = candidates === undefined
      ? undefined
      : ref.version === undefined
      ? candidates[candidates.length - 1]
      : candidates.find((entry) => entry.definition.version === ref.version)
    return found === undefined
      ? Either.left(new ActionNotFoundError({ name: ref.name, version: ref.version }))
      : Either.right(found)
  }

  const discover = Effect.fn("ActionRegistry.discover")(function*(plugin: Plugin) {
    const found = yield* plugin.discover
    return yield* Effect.forEach(found, register)
  })

  return {
    register,
    discover,
    resolve,
    list: Effect.sync(() => [...versions.values()].flatMap((entries) => entries.map((entry) => entry.descriptor)))
  }
})

/** An empty registry. */
export const layer: Layer.Layer<ActionRegistry, never, Digest> = Layer.effect(ActionRegistry, make)

/** A registry holding the given actions. */
export const layerWith = (
  actions: ReadonlyArray<ActionDefinition>
): Layer.Layer<ActionRegistry, ActionCollisionError | CanonicalJsonError, Digest> =>
  Layer.effect(
    ActionRegistry,
    Effect.tap(make, (registry) => Effect.forEach(actions, registry.register, { discard: true }))
  )
