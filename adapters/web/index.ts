/** writ's adapters on web platform APIs (WebCrypto). */
export * as EdgeBackend from "./EdgeBackend.ts"
export * as EdgeExecutionLog from "./EdgeExecutionLog.ts"
export * as EdgePlatformBackend from "./EdgePlatformBackend.ts"
export * as EdgeSignature from "./EdgeSignature.ts"
export * as EdgeWire from "./EdgeWire.ts"
export * as WebCryptoDigest from "./WebCryptoDigest.ts"
