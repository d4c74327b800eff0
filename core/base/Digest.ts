/**
 * The Digest port: SHA-256 behind a service so each runtime brings its fastest implementation,
 * and `sha256-v1` canonical digests built on it.
 */
import { Context, Effect, Either, Schema } from "effect"
import * as Canonical from "./Canonical.ts"

/** Lowercase hex SHA-256. */
export const Sha256Hex = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/), Schema.brand("Sha256Hex"))

/** Lowercase hex SHA-256. */
export type Sha256Hex = typeof Sha256Hex.Type

/** SHA-256 over bytes; implemented by node:crypto and WebCrypto layers in adapters/. */
export class Digest extends Context.Tag("writ/Digest")<Digest, Digest.Service>() {}

/** The Digest service. */
export declare namespace Digest {
  /** What a Digest layer provides. */
  export interface Service {
    readonly sha256: (bytes: Uint8Array) => Effect.Effect<Sha256Hex>
    /** SHA-256 of each string's UTF-8 bytes, in order: one effect for a whole batch. */
    readonly sha256Texts: (texts: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Sha256Hex>>
    /** SHA-256 of a string's UTF-8 bytes, synchronously: only where the layer's hash is synchronous (node:crypto). */
    readonly sha256TextSync?: (text: string) => Sha256Hex
  }
}

/** SHA-256 of a string's UTF-8 bytes with a Digest service. */
export const sha256TextWith = (digest: Digest.Service, text: string): Effect.Effect<Sha256Hex> => {
  const sync = digest.sha256TextSync
  return sync !== undefined
    ? Effect.sync(() => sync(text))
    : Effect.map(digest.sha256Texts([text]), (hashes) => hashes[0]!)
}

/** SHA-256 of a string's UTF-8 bytes. */
export const sha256Text = (text: string): Effect.Effect<Sha256Hex, never, Digest> =>
  Effect.flatMap(Digest, (digest) => sha256TextWith(digest, text))

/** The `sha256-v1` digest of a value with a Digest service: SHA-256 of its canonical JSON bytes. */
export const canonicalWith = (
  digest: Digest.Service,
  value: unknown
): Effect.Effect<Sha256Hex, Canonical.CanonicalJsonError> =>
  Effect.suspend(() => {
    const text = Canonical.stringify(value)
    return Either.isLeft(text) ? Effect.fail(text.left) : sha256TextWith(digest, text.right)
  })

/** The `sha256-v1` digest of a value: SHA-256 of its canonical JSON bytes. */
export const canonical = (value: unknown): Effect.Effect<Sha256Hex, Canonical.CanonicalJsonError, Digest> =>
  Effect.flatMap(Digest, (digest) => canonicalWith(digest, value))

/** Lowercase hex of bytes (for Digest layers). */
export const toHex = (bytes: Uint8Array): Sha256Hex => {
  let out = ""
  for (let i = 0; i < bytes.length; i++) out += (bytes[i]! < 16 ? "0" : "") + bytes[i]!.toString(16)
  return Sha256Hex.make(out)
}
