/**
 * The Digest port on WebCrypto's `crypto.subtle`. Runtimes: every one (Node, Deno, edge, browsers).
 */
import { Effect, Layer } from "effect"
import { Digest, toHex } from "../../core/base/Digest.ts"

const digestOf = (bytes: Uint8Array) =>
  globalThis.crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>).then((buffer) =>
    toHex(new Uint8Array(buffer))
  )

const encoder = new TextEncoder()

/** SHA-256 with WebCrypto. */
export const make: Digest.Service = {
  sha256: (bytes) => Effect.promise(() => digestOf(bytes)),
  sha256Texts: (texts) => Effect.promise(() => Promise.all(texts.map((text) => digestOf(encoder.encode(text)))))
}

/** The Digest port on WebCrypto. */
export const layer: Layer.Layer<Digest> = Layer.succeed(Digest, make)
