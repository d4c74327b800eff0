/**
 * The IdGenerator port: lowercase hyphenated UUIDs, time-ordered in production (so the stores' id indexes grow at
 * their right edge) and seeded (so a run replays exactly) in tests.
 */
import { type Clock, Context, Effect, Layer, Random, Schema } from "effect"

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

const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"))
// Random bytes are drawn from WebCrypto a block at a time: ten per identifier.
const POOL = 10 * 409

const makeV7 = (clock: Clock.Clock): () => Uuid => {
  const pool = new Uint8Array(POOL)
  let next = POOL
  let stamped = -1
  let time = ""
  return () => {
    if (next === POOL) {
      globalThis.crypto.getRandomValues(pool)
      next = 0
    }
    const r = next
    next += 10
    const ms = clock.unsafeCurrentTimeMillis()
    if (ms !== stamped) {
      stamped = ms
      time = Math.floor(ms / 0x10000).toString(16).padStart(8, "0") + "-" + (ms % 0x10000).toString(16).padStart(4, "0")
    }
    const h = (n: number) => HEX[pool[r + n]!]!
    const version = HEX[0x70 | (pool[r]! & 0x0f)]! + h(1)
    const variant = HEX[0x80 | (pool[r + 2]! & 0x3f)]! + h(3)
    return Uuid.make(`${time}-${version}-${variant}-${h(4)}${h(5)}${h(6)}${h(7)}${h(8)}${h(9)}`, {
      disableValidation: true
    })
  }
}

/**
 * Version 7 UUIDs (RFC 9562) from the Clock in context and WebCrypto (Node, Deno, edge): 48 bits of Unix milliseconds
 * then 74 random bits, so an identifier minted later sorts later and an index over ids is appended to, not scattered.
 */
export const layerCrypto: Layer.Layer<IdGenerator> = Layer.effect(
  IdGenerator,
  Effect.map(Effect.clock, (clock) => {
    const uuidSync = makeV7(clock)
    return { uuid: Effect.sync(uuidSync), uuidSync }
  })
)

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
