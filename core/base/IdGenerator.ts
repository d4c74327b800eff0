/**
 * The IdGenerator port: lowercase hyphenated UUIDs, random in production and seeded (so a run
 * replays exactly) in tests.
 */
import { Context, Effect, Layer, Random, Schema } from "effect"

/** A lowercase hyphenated UUID. */
export const Uuid = Schema.String.pipe(
  Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/),
  Schema.brand("Uuid")
)

/** A lowercase hyphenated UUID. */
export type Uuid = typeof Uuid.Type

/** Mints identifiers. */
export class IdGenerator extends Context.Tag("writ/IdGenerator")<IdGenerator, IdGenerator.Service>() {}

/** The IdGenerator service. */
export declare namespace IdGenerator {
  /** What an IdGenerator layer provides. */
  export interface Service {
    readonly uuid: Effect.Effect<Uuid>
    /** A fresh identifier, synchronously: only where the layer mints synchronously (the platform's crypto). */
    readonly uuidSync?: () => Uuid
  }
}

/** A fresh identifier from the IdGenerator in context. */
export const uuid: Effect.Effect<Uuid, never, IdGenerator> = Effect.flatMap(IdGenerator, (ids) => ids.uuid)

/** Random v4 UUIDs from the platform's WebCrypto (Node, Deno, edge). */
export const layerCrypto: Layer.Layer<IdGenerator> = Layer.sync(IdGenerator, () => {
  const uuidSync = () => Uuid.make(globalThis.crypto.randomUUID(), { disableValidation: true })
  return { uuid: Effect.sync(uuidSync), uuidSync }
})

/** `count` fresh identifiers from an IdGenerator service, in one step where it mints synchronously. */
export const uuidsWith = (ids: IdGenerator.Service, count: number): Effect.Effect<ReadonlyArray<Uuid>> => {
  const sync = ids.uuidSync
  if (sync !== undefined) return Effect.sync(() => Array.from({ length: count }, sync))
  return Effect.all(Array.from({ length: count }, () => ids.uuid))
}

const hex4 = (n: number) => n.toString(16).padStart(4, "0")

/** Deterministic v4-shaped UUIDs from a seed: the same seed yields the same sequence. */
export const makeSeeded = (seed: number | string): IdGenerator.Service => {
  const random = Random.make(seed)
  const word = random.nextIntBetween(0, 0x10000)
  return {
    uuid: Effect.gen(function*() {
      const w: Array<number> = []
      for (let i = 0; i < 8; i++) w.push(yield* word)
      const version = (w[3]! & 0x0fff) | 0x4000
      const variant = (w[4]! & 0x3fff) | 0x8000
      return Uuid.make(
        `${hex4(w[0]!)}${hex4(w[1]!)}-${hex4(w[2]!)}-${hex4(version)}-${hex4(variant)}-${hex4(w[5]!)}${hex4(w[6]!)}${
          hex4(w[7]!)
        }`
      )
    })
  }
}

/** A fresh seeded generator (`makeSeeded`) as a layer. */
export const layerSeeded = (seed: number | string): Layer.Layer<IdGenerator> =>
  Layer.sync(IdGenerator, () => makeSeeded(seed))
