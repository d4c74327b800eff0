/**
 * How the SQL EvidenceStore hands admitted appends to its commit, and answers each only after its transaction has
 * committed: `queued`, one writer fiber committing everything pending at once on the store's own connection.
 */
import type { Scope } from "effect"
import { Effect, Exit, Fiber, Queue } from "effect"
import type * as Evidence from "../../../core/evidence/Evidence.ts"
import type { AppendError, AppendReceipt } from "../../../core/evidence/EvidenceStore.ts"
import { EvidenceUnavailableError } from "../../../core/evidence/EvidenceStore.ts"
import type { BudgetSpentError, PendingAdmission } from "../../../core/policy/BudgetLedger.ts"
import * as EvidenceCommit from "./evidenceCommit.ts"
import type { Pending } from "./evidenceCommit.ts"

/**
 * Commit one append's admitted records: its receipts once committed; with `now` where the dispatch can commit in the
 * calling step, which answers `undefined` (nothing written) when it cannot at this moment.
 */
export interface Submit {
  (
    records: ReadonlyArray<Evidence.EvidenceRecord>,
    admissions?: ReadonlyArray<PendingAdmission>
  ): Effect.Effect<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>
  readonly now?: (
    records: ReadonlyArray<Evidence.EvidenceRecord>,
    admissions?: ReadonlyArray<PendingAdmission>
  ) => EvidenceCommit.Placed | undefined
  /** It commits the budget places handed with records (else the store takes none: a wrapper that drops them says so). */
  readonly carriesPlaces?: true
}

const stop = { _tag: "Stop" } as const

/** The answer to an append made after the store closed. */
export const closedError = new EvidenceUnavailableError({ detail: "the evidence store was closed" })

/** Commit `pendings` on the store's connection and answer them; a defect answers them as unavailable. */
export const commitInline = (commit: EvidenceCommit.Commit, pendings: ReadonlyArray<Pending>) =>
  Effect.map(
    Effect.exit(commit(pendings)),
    (exit) => EvidenceCommit.settle(pendings, EvidenceCommit.answered(pendings, exit))
  )

/** Everything pending committed in one transaction by a writer fiber; an append taken before the close is committed. */
export const queued = (commit: EvidenceCommit.Commit, maxBatch: number): Effect.Effect<Submit, never, Scope.Scope> =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<Pending | typeof stop>()
    let closed = false
    // Never interrupted (an interrupted take drops the append it was handed): the writer commits everything offered
    // before `stop`, then ends.
    const writer = yield* Effect.iterate(true, {
      while: (running) => running,
      body: () =>
        Effect.flatMap(Queue.take(queue), (first) =>
          Effect.flatMap(Queue.takeUpTo(queue, maxBatch - 1), (rest) => {
            const all = [first, ...rest]
            const end = all.indexOf(stop)
            const pendings = (end === -1 ? all : all.slice(0, end)) as Array<Pending>
            return Effect.as(pendings.length === 0 ? Effect.void : commitInline(commit, pendings), end === -1)
          }))
    }).pipe(Effect.uninterruptible, Effect.forkDaemon)
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closed = true
        queue.unsafeOffer(stop)
        yield* Fiber.await(writer)
        yield* Queue.shutdown(queue)
      })
    )
    const submit: Submit = Object.assign(
      (records: ReadonlyArray<Evidence.EvidenceRecord>, admissions?: ReadonlyArray<PendingAdmission>) =>
        Effect.async<ReadonlyArray<AppendReceipt>, AppendError | BudgetSpentError>((resume) => {
          if (closed || !queue.unsafeOffer({ records, admissions, resume })) resume(Exit.fail(closedError))
        }),
      { carriesPlaces: true as const }
    )
    return submit
  })
