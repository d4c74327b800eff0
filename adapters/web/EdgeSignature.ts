/**
 * The signed requests of writ's edge protocol (version 1), on WebCrypto's HMAC-SHA256. The signer sends six headers:
 * `writ-key-id`, `writ-created` and `writ-expires` (Unix seconds), `writ-nonce` (22 to 64 characters of base64url,
 * used once), `writ-content-sha256` (the lowercase hex SHA-256 of the body's bytes, of no bytes for a GET) and
 * `writ-signature`, the lowercase hex HMAC-SHA256 under the key of the string to sign: `writ-edge-v1`, the method,
 * the path (with its query), the key id, created, expires, the nonce and the content digest, joined by `\n`.
 *
 * A verifier refuses, in this order: a request missing any header (`unsigned`) or carrying a malformed one
 * (`malformed`), an unknown key id (`unknown_key`), a body whose digest differs (`body_digest_mismatch`), a signature
 * that does not verify (`bad_signature`), a lifetime longer than allowed (`lifetime_too_long`), one not yet valid or
 * already expired beyond the clock-skew bound (`not_yet_valid`, `expired`), and a nonce already claimed for the key
 * (`replayed`), which it claims only once everything else holds. Runtimes: every one (Node, Deno, edge, browsers).
 */
import { Clock, Effect, Redacted, Schema } from "effect"
import { toHex } from "../../core/base/Digest.ts"
import type { NonceStore } from "../../core/base/NonceStore.ts"

/** The scheme's version tag, the first line of every string to sign. */
export const scheme = "writ-edge-v1"

/** The headers a signed request carries. */
export const headers = {
  keyId: "writ-key-id",
  created: "writ-created",
  expires: "writ-expires",
  nonce: "writ-nonce",
  contentSha256: "writ-content-sha256",
  signature: "writ-signature"
} as const

/** Why a signed request was refused, before anything else looked at it. */
export const RefusalReason = Schema.Literal(
  "unsigned",
  "malformed",
  "unknown_key",
  "body_digest_mismatch",
  "bad_signature",
  "lifetime_too_long",
  "not_yet_valid",
  "expired",
  "replayed"
)

/** A request the verifier refused, and why: what the handler answers with status 401. */
export class EdgeRequestRefused extends Schema.TaggedError<EdgeRequestRefused>()("EdgeRequestRefused", {
  reason: RefusalReason,
  detail: Schema.String
}) {}

/** A signer or verifier configured with a key or address it cannot use safely, refused when it is made. */
export class EdgeConfigError extends Schema.TaggedError<EdgeConfigError>()("EdgeConfigError", {
  reason: Schema.Literal("bad_key_id", "weak_key", "duplicate_key_id", "bad_url"),
  detail: Schema.String
}) {}

/** A key: its id and its secret (at least 32 bytes of UTF-8). */
export interface Key {
  readonly keyId: string
  readonly secret: Redacted.Redacted<string>
}

/** The verifier's bounds: the clock skew it tolerates each way and the longest lifetime it accepts. */
export interface Bounds {
  /** Seconds a created or expires instant may be off the verifier's clock (default 30). */
  readonly clockSkewSeconds?: number
  /** The longest `expires - created` accepted, in seconds (default 300). */
  readonly maxLifetimeSeconds?: number
}

/** The default clock-skew bound, in seconds. */
export const defaultClockSkewSeconds = 30

/** The default longest lifetime of a signed request, in seconds. */
export const defaultMaxLifetimeSeconds = 300

const encoder = new TextEncoder()
const keyIdPattern = /^[A-Za-z0-9._-]{1,64}$/
const noncePattern = /^[A-Za-z0-9_-]{22,64}$/
const secondsPattern = /^[0-9]{1,12}$/
const hexPattern = /^[0-9a-f]{64}$/

const importKey = (secret: Redacted.Redacted<string>, usage: "sign" | "verify") =>
  globalThis.crypto.subtle.importKey(
    "raw",
    encoder.encode(Redacted.value(secret)),
    { name: "HMAC", hash: "SHA-256" },
    false,
    [usage]
  )

/** Whether a secret is long enough to key HMAC-SHA256 (32 bytes of UTF-8). */
export const strongEnough = (secret: Redacted.Redacted<string>): boolean =>
  encoder.encode(Redacted.value(secret)).length >= 32

/** Why a key cannot be used (a malformed id, a secret under 32 bytes), if it cannot. */
export const keyIssue = (key: Key): EdgeConfigError | undefined => {
  if (!keyIdPattern.test(key.keyId)) {
    return new EdgeConfigError({
      reason: "bad_key_id",
      detail: `key id ${JSON.stringify(key.keyId)} is not 1 to 64 of A-Z a-z 0-9 . _ -`
    })
  }
  if (!strongEnough(key.secret)) {
    return new EdgeConfigError({ reason: "weak_key", detail: `the secret of key ${key.keyId} is under 32 bytes` })
  }
  return undefined
}

/** The lowercase hex SHA-256 of bytes, with WebCrypto. */
export const sha256Hex = (bytes: Uint8Array): Promise<string> =>
  globalThis.crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>).then((buffer) =>
    toHex(new Uint8Array(buffer))
  )

/** The fields a signature covers. */
export interface Signed {
  readonly method: string
  readonly path: string
  readonly keyId: string
  readonly created: number
  readonly expires: number
  readonly nonce: string
  readonly contentSha256: string
}

/** The string to sign of a request. */
export const stringToSign = (fields: Signed): string =>
  [
    scheme,
    fields.method.toUpperCase(),
    fields.path,
    fields.keyId,
    String(fields.created),
    String(fields.expires),
    fields.nonce,
    fields.contentSha256
  ].join("\n")

const freshNonce = () => {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(24))
  let text = ""
  for (const byte of bytes) text += String.fromCharCode(byte)
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "")
}

/** What a signer needs of a request: its method, its path (with query) and its body. */
export interface Unsigned {
  readonly method: string
  readonly path: string
  readonly body: Uint8Array
}

/** The six headers that sign a request under `key`, created now and expiring `lifetimeSeconds` later (default 60). */
export const sign = (
  key: Key,
  request: Unsigned,
  lifetimeSeconds = 60
): Effect.Effect<Record<string, string>> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.promise(async () => {
      const created = Math.floor(now / 1000)
      const fields: Signed = {
        method: request.method,
        path: request.path,
        keyId: key.keyId,
        created,
        expires: created + lifetimeSeconds,
        nonce: freshNonce(),
        contentSha256: await sha256Hex(request.body)
      }
      const hmac = await importKey(key.secret, "sign")
      const signature = await globalThis.crypto.subtle.sign("HMAC", hmac, encoder.encode(stringToSign(fields)))
      return {
        [headers.keyId]: fields.keyId,
        [headers.created]: String(fields.created),
        [headers.expires]: String(fields.expires),
        [headers.nonce]: fields.nonce,
        [headers.contentSha256]: fields.contentSha256,
        [headers.signature]: toHex(new Uint8Array(signature))
      }
    }))

const refuse = (reason: typeof RefusalReason.Type, detail: string) => new EdgeRequestRefused({ reason, detail })

/** The signed fields of a request's headers, or why they are absent or malformed. */
const readHeaders = (get: (name: string) => string | null, method: string, path: string) => {
  const values = Object.values(headers).map((name) => get(name))
  if (values.every((value) => value === null)) return refuse("unsigned", "the request carries no writ signature")
  const missing = Object.values(headers).filter((_, index) => values[index] === null)
  if (missing.length > 0) return refuse("unsigned", `the request lacks ${missing.join(", ")}`)
  const [keyId, created, expires, nonce, contentSha256, signature] = values as Array<string>
  if (!keyIdPattern.test(keyId!)) return refuse("malformed", `${headers.keyId} is not a key id`)
  if (!secondsPattern.test(created!) || !secondsPattern.test(expires!)) {
    return refuse("malformed", `${headers.created} and ${headers.expires} must be Unix seconds`)
  }
  if (!noncePattern.test(nonce!)) return refuse("malformed", `${headers.nonce} must be 22 to 64 base64url characters`)
  if (!hexPattern.test(contentSha256!) || !hexPattern.test(signature!)) {
    return refuse("malformed", `${headers.contentSha256} and ${headers.signature} must be 64 lowercase hex digits`)
  }
  const fields: Signed = {
    method,
    path,
    keyId: keyId!,
    created: Number(created),
    expires: Number(expires),
    nonce: nonce!,
    contentSha256: contentSha256!
  }
  return { fields, signature: signature! }
}

const fromHex = (hex: string) => Uint8Array.from(hex.match(/../g)!, (pair) => parseInt(pair, 16))

/** What a verifier is configured with: the keys it knows by id, its bounds and the nonce store its workers share. */
export interface Verifier extends Bounds {
  readonly keys: ReadonlyMap<string, Key>
  readonly nonces: NonceStore.Service
}

/** The request that verified: its key id and the body it carried. */
export interface Verified {
  readonly keyId: string
  readonly body: Uint8Array
}

/** Verify a request (its method, path with query, headers and body bytes); refused as `EdgeRequestRefused`. */
export const verify = (
  verifier: Verifier,
  request: { readonly method: string; readonly path: string; readonly get: (name: string) => string | null },
  body: Uint8Array
): Effect.Effect<Verified, EdgeRequestRefused> =>
  Effect.gen(function*() {
    const read = readHeaders(request.get, request.method, request.path)
    if (read instanceof EdgeRequestRefused) return yield* read
    const { fields, signature } = read
    const key = verifier.keys.get(fields.keyId)
    if (key === undefined) return yield* refuse("unknown_key", `no key has the id ${fields.keyId}`)
    const digest = yield* Effect.promise(() => sha256Hex(body))
    if (digest !== fields.contentSha256) {
      return yield* refuse("body_digest_mismatch", "the body's SHA-256 differs from the signed content digest")
    }
    const valid = yield* Effect.promise(async () =>
      globalThis.crypto.subtle.verify(
        "HMAC",
        await importKey(key.secret, "verify"),
        fromHex(signature),
        encoder.encode(stringToSign(fields))
      )
    )
    if (!valid) return yield* refuse("bad_signature", "the signature does not verify under the key")
    const skew = verifier.clockSkewSeconds ?? defaultClockSkewSeconds
    const lifetime = verifier.maxLifetimeSeconds ?? defaultMaxLifetimeSeconds
    if (fields.expires <= fields.created) {
      return yield* refuse("malformed", "a request must expire after it was created")
    }
    if (fields.expires - fields.created > lifetime) {
      return yield* refuse("lifetime_too_long", `a signed request lives at most ${lifetime} seconds`)
    }
    const now = (yield* Clock.currentTimeMillis) / 1000
    if (fields.created > now + skew) {
      return yield* refuse("not_yet_valid", `created more than ${skew} seconds ahead of this clock`)
    }
    if (fields.expires < now - skew) {
      return yield* refuse("expired", `expired more than ${skew} seconds before this clock`)
    }
    const fresh = yield* verifier.nonces.claim(fields.keyId, fields.nonce, (fields.expires + skew) * 1000 + 1000)
    if (!fresh) return yield* refuse("replayed", "this nonce was already used with this key")
    return { keyId: fields.keyId, body }
  })
