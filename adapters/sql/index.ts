/** writ's SQL adapters over any @effect/sql SqlClient (no driver). */
export * as SqlApprovalQueue from "./SqlApprovalQueue.ts"
export * as SqlBudgetLedger from "./SqlBudgetLedger.ts"
export * as SqlEdgeExecutionLog from "./SqlEdgeExecutionLog.ts"
export * as SqlEvidenceStore from "./SqlEvidenceStore.ts"
export * as SqlNonceStore from "./SqlNonceStore.ts"
export * as SqlObservationLog from "./SqlObservationLog.ts"
export * as SqlPolicySnapshotStore from "./SqlPolicySnapshotStore.ts"
export * as SqlStateStore from "./SqlStateStore.ts"
