/** writ's adapters on web platform APIs (WebCrypto). */
export * as WebCryptoDigest from "./WebCryptoDigest.ts"
