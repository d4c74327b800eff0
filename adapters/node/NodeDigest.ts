/**
 * The Digest port on node:crypto's one-shot `hash` (Node 20.12+): under a microsecond for a record-sized
 * string. Runtimes: Node (and Deno's node: compatibility layer).
 */
import { Effect, Layer } from "effect"
import { hash } from "node:crypto"
import type { Sha256Hex } from "../../core/base/Digest.ts"
import { Digest } from "../../core/base/Digest.ts"

/** SHA-256 with node:crypto. */
export const make: Digest.Service = {
  sha256: (bytes) => Effect.sync(() => hash("sha256", bytes, "hex") as Sha256Hex),
  sha256Texts: (texts) => Effect.sync(() => texts.map((text) => hash("sha256", text, "hex") as Sha256Hex)),
  sha256TextSync: (text) => hash("sha256", text, "hex") as Sha256Hex
}

/** The Digest port on node:crypto. */
export const layer: Layer.Layer<Digest> = Layer.succeed(Digest, make)
