/**
 * The Digest port on WebCrypto's `crypto.subtle`. Runtimes: every one (Node, Deno, edge, browsers).
 */
import { Effect, Layer } from "effect"
import { Digest, toHex } from "../core/Digest.ts"

/** SHA-256 with WebCrypto. */
export const make: Digest.Service = {
  sha256: (bytes) =>
    Effect.promise(() => globalThis.crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>)).pipe(
      Effect.map((buffer) => toHex(new Uint8Array(buffer)))
    )
}

/** The Digest port on WebCrypto. */
export const layer: Layer.Layer<Digest> = Layer.succeed(Digest, make)
