/** writ's public adapters modules, one namespace per module. */
export * as InProcessBackend from "./InProcessBackend.ts"
export * as MemoryApprovalQueue from "./MemoryApprovalQueue.ts"
export * as MemoryPolicySnapshotStore from "./MemoryPolicySnapshotStore.ts"
export * as NodeDigest from "./NodeDigest.ts"
export * as NodePathResolver from "./NodePathResolver.ts"
export * as PolicyFormat from "./PolicyFormat.ts"
export * as Sqlite from "./Sqlite.ts"
export * as WebCryptoDigest from "./WebCryptoDigest.ts"
