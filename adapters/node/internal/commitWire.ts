/**
 * What the evidence commit thread and the store exchange over their message port: a batch of appends out (admitted
 * records, and the budget places each takes), each append's receipts or error back, as structured-clone plain values.
 */
import { Cause, Exit, Option, Schema } from "effect"
import { AppendReceipt, EvidenceConflictError, EvidenceUnavailableError } from "../../../core/evidence/EvidenceStore.ts"
import { BudgetSpentError } from "../../../core/policy/BudgetLedger.ts"
import type * as EvidenceCommit from "../../sql/internal/evidenceCommit.ts"

/** A batch to commit, numbered by the store. */
export interface Request {
  readonly id: number
  readonly batch: ReadonlyArray<EvidenceCommit.Append>
}

const PlacedError = Schema.Union(EvidenceConflictError, EvidenceUnavailableError, BudgetSpentError)

/** One append's result: its receipts' fields, or its error's. */
export type Placed =
  | { readonly receipts: ReadonlyArray<{ readonly [K in keyof AppendReceipt]: AppendReceipt[K] }> }
  | { readonly error: typeof PlacedError.Encoded }

/** A committed batch's results, in the batch's order. */
export interface Reply {
  readonly id: number
  readonly placed: ReadonlyArray<Placed>
}

/** What the thread says: that it is ready (with the database file it opened), then a reply per batch. */
export type Message = { readonly ready: string } | Reply

const encodeError = Schema.encodeSync(PlacedError)
const decodeError = Schema.decodeUnknownSync(PlacedError)

/** An append's result as a plain value; a defect in the thread is the store being unavailable. */
export const encode = (placed: EvidenceCommit.Placed): Placed => {
  if (Exit.isSuccess(placed)) return { receipts: placed.value.map((receipt) => ({ ...receipt })) }
  const failure = Cause.failureOption(placed.cause)
  return {
    error: encodeError(
      Option.getOrElse(
        failure,
        () =>
          new EvidenceUnavailableError({ detail: `the evidence commit thread failed: ${Cause.pretty(placed.cause)}` })
      )
    )
  }
}

/** An append's result back from its plain value: receipts are the thread's own, built from admitted records. */
export const decode = (placed: Placed): EvidenceCommit.Placed =>
  "receipts" in placed
    ? Exit.succeed(placed.receipts.map((receipt) => new AppendReceipt(receipt, { disableValidation: true })))
    : Exit.fail(decodeError(placed.error))
