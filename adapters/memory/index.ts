/** writ's adapters for every runtime (effect only): the in-memory stores, the in-process backend, the policy format. */
export * as InProcessBackend from "./InProcessBackend.ts"
export * as MemoryApprovalQueue from "./MemoryApprovalQueue.ts"
export * as MemoryBudgetLedger from "./MemoryBudgetLedger.ts"
export * as MemoryEvidenceStore from "./MemoryEvidenceStore.ts"
export * as MemoryExecutorRegistry from "./MemoryExecutorRegistry.ts"
export * as MemoryPolicySnapshotStore from "./MemoryPolicySnapshotStore.ts"
export * as MemoryStateStore from "./MemoryStateStore.ts"
export * as PolicyFormat from "./PolicyFormat.ts"
