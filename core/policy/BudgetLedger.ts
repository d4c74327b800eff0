/**
 * The BudgetLedger port: what each budget window has admitted and consumed, kept where a restart or a second
 * executor on the same database sees it. A window is one snapshot's rule, for one principal, over one span of
 * `window_microseconds`; a ledger may forget a window once a later one of the same rule and principal is charged.
 */
import { Context, Effect, Layer, Schema } from "effect"

/** One budget window: the snapshot and rule that declare it, the principal it counts, and its index in time. */
export interface BudgetWindow {
  readonly snapshot_digest: string
  readonly rule_id: string
  readonly principal: string
  /** `floor(now / window_microseconds)`: windows of one rule are consecutive integers (0, the only one, without a window). */
  readonly window: number
}

/** Whether an attempt holds one of a calls budget's places, and how many the window has given. */
export interface Admission {
  readonly admitted: boolean
  readonly count: number
}

/**
 * A place in a calls budget that an attempt takes in the same commit as its call's next evidence, where the ledger and
 * the evidence share one database: plain values, so they cross a thread as the records do.
 */
export interface PendingAdmission {
  readonly window: BudgetWindow
  readonly attempt_id: string
  readonly limit: number
}

/** Admissions that ride on a call's next evidence, and the refusal the call concludes with if one of them loses. */
export interface Pending<Refusal> {
  readonly admissions: ReadonlyArray<PendingAdmission>
  /** The refusal when admission `index` found its window's `count` places taken by others. */
  readonly spent: (index: number, count: number) => Refusal
}

/** An append refused whole, nothing of it committed: admission `index` of the ones it carried found its window full. */
export class BudgetSpentError extends Schema.TaggedError<BudgetSpentError>()("BudgetSpentError", {
  reason: Schema.Literal("spent"),
  index: Schema.NonNegativeInt,
  count: Schema.NonNegativeInt
}) {
  override get message() {
    return `budget admission ${this.index} refused: its window has ${this.count} places taken`
  }
}

/** Admitted calls and consumed amounts per budget window. */
export class BudgetLedger extends Context.Tag("writ/BudgetLedger")<BudgetLedger, BudgetLedger.Service>() {}

/** The BudgetLedger service. */
export declare namespace BudgetLedger {
  /** Admit attempts to calls budgets, read and add what wall-time, token and cost budgets consumed. */
  export interface Service {
    /** Give an attempt one of the window's `limit` places, once: an attempt admitted before stays admitted. */
    readonly admit: (window: BudgetWindow, attempt_id: string, limit: number) => Effect.Effect<Admission>
    /** Whether `admit` would give the attempt a place now, read without writing anything. */
    readonly peek: (window: BudgetWindow, attempt_id: string, limit: number) => Effect.Effect<Admission>
    /** What the window has consumed so far (0 when nothing was charged to it). */
    readonly consumed: (window: BudgetWindow) => Effect.Effect<number>
    /** Add an amount to what the window has consumed. */
    readonly charge: (window: BudgetWindow, amount: number) => Effect.Effect<void>
    /**
     * The database it is kept in, where an EvidenceStore on the same one can take its admissions in its own commits
     * (equal to that store's `appendAll.ledger`); absent for a ledger no store shares.
     */
    readonly database?: unknown
  }
}

interface Entry {
  readonly window: number
  readonly attempts: Set<string>
  consumed: number
}

/** One entry per snapshot, rule and principal, for its latest window only. */
const makeMemoryLedger = (): BudgetLedger.Service => {
  const entries = new Map<string, Entry>()
  const entryOf = ({ principal, rule_id, snapshot_digest, window }: BudgetWindow): Entry => {
    const key = `${snapshot_digest}\u0000${rule_id}\u0000${principal}`
    const entry = entries.get(key)
    if (entry !== undefined && entry.window === window) return entry
    const current: Entry = { window, attempts: new Set(), consumed: 0 }
    if (entry === undefined || entry.window < window) entries.set(key, current)
    return current
  }
  return {
    admit: (window, attempt_id, limit) =>
      Effect.sync((): Admission => {
        const { attempts } = entryOf(window)
        if (attempts.has(attempt_id)) return { admitted: true, count: attempts.size }
        if (attempts.size >= limit) return { admitted: false, count: attempts.size }
        attempts.add(attempt_id)
        return { admitted: true, count: attempts.size }
      }),
    peek: (window, attempt_id, limit) =>
      Effect.sync((): Admission => {
        const { attempts } = entryOf(window)
        return { admitted: attempts.has(attempt_id) || attempts.size < limit, count: attempts.size }
      }),
    consumed: (window) => Effect.sync(() => entryOf(window).consumed),
    charge: (window, amount) =>
      Effect.sync(() => {
        entryOf(window).consumed += amount
      })
  }
}

/** A fresh in-memory ledger: every runtime, forgotten on restart. */
export const makeMemory: Effect.Effect<BudgetLedger.Service> = Effect.sync(makeMemoryLedger)

/** The in-memory BudgetLedger. */
export const layerMemory: Layer.Layer<BudgetLedger> = Layer.effect(BudgetLedger, makeMemory)
