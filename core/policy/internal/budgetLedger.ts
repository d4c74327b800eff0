import { Effect } from "effect"
import type { Admission, BudgetLedger, BudgetWindow } from "../BudgetLedger.ts"

interface Entry {
  readonly window: number
  readonly attempts: Set<string>
  consumed: number
}

/** One entry per snapshot, rule and principal, for its latest window only. */
export const makeMemoryLedger = (): BudgetLedger.Service => {
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
    consumed: (window) => Effect.sync(() => entryOf(window).consumed),
    charge: (window, amount) =>
      Effect.sync(() => {
        entryOf(window).consumed += amount
      })
  }
}
