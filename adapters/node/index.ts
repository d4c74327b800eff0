/** Node adapters: node:crypto, node:fs, better-sqlite3 and its commit thread, SQL executors, bubblewrap, Deno. */
export * as BubblewrapBackend from "./BubblewrapBackend.ts"
export * as DenoBackend from "./DenoBackend.ts"
export * as NodeDigest from "./NodeDigest.ts"
export * as NodePathResolver from "./NodePathResolver.ts"
export * as SqlExecutorRegistry from "./SqlExecutorRegistry.ts"
export * as Sqlite from "./Sqlite.ts"
export * as SqliteEvidenceStore from "./SqliteEvidenceStore.ts"
