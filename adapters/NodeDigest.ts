/**
 * The Digest port on node:crypto: about a microsecond per hash. Runtimes: Node (and Deno's node:
 * compatibility layer).
 */
import { Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import { Digest, Sha256Hex } from "../core/Digest.ts"

/** SHA-256 with node:crypto. */
export const make: Digest.Service = {
  sha256: (bytes) => Effect.sync(() => Sha256Hex.make(createHash("sha256").update(bytes).digest("hex")))
}

/** The Digest port on node:crypto. */
export const layer: Layer.Layer<Digest> = Layer.succeed(Digest, make)
