/**
 * Governed execution's evidence under one name, as before the split: task boundaries (TaskBoundary), the operation
 * context (OperationContext) and the evidence writer (EvidenceWriter), each now a module of its own.
 */

/** A task boundary, and why its chain or an operation on it cannot take a record. */
export { BoundaryError, OperationOwnershipError, TaskBoundary } from "./TaskBoundary.ts"

/** The frozen governed projection of one operation, derived from exactly six trusted inputs. */
export { deriveContext, deriveContextWith, OperationContext, type OperationInputs } from "./OperationContext.ts"

/** The writer every governed executor and task boundary of a process shares, and its errors. */
export {
  closeBoundary,
  type EvidenceAppendError,
  EvidenceWriter,
  failureDetail,
  GovernanceEvidenceError,
  layerWriter,
  makeWriter,
  openBoundary,
  OutcomeEvidenceError
} from "./EvidenceWriter.ts"
