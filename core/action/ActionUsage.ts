/**
 * What one invocation consumed, for budgets. When a verdict meters the invocation (a budget binds
 * it), the executor measures wall time itself, with the Clock, around the one invocation, whatever
 * its outcome. Tokens and cost are reported by the
 * callable, for its own invocation only: the backend provides this service to an Effect handler,
 * which calls `ActionUsage.report({ tokens, cost_microunits })` as often as it likes (reports add
 * up). A caller cannot report usage: a request field or a report after the fact would let the one
 * who spends the budget decide what it is charged. Usage is charged after the call, so a call
 * admitted while its window had budget left may overrun that budget once. A report that is
 * negative or not a safe integer, or (when metered) made after its invocation concluded, is an
 * ActionUsageError and charges nothing; unmetered, a valid report goes nowhere.
 */
import { Context, Effect, Schema } from "effect"

/** What a callable reports about its own invocation; each field a non-negative integer. */
export interface Report {
  readonly tokens?: number
  readonly cost_microunits?: number
}

/** What one invocation consumed: measured wall time and the reported tokens and cost. */
export interface Usage {
  readonly wall_microseconds: number
  readonly tokens: number
  readonly cost_microunits: number
}

/** A report that was refused, naming the field and what was wrong with it; nothing of it is charged. */
export class ActionUsageError extends Schema.TaggedError<ActionUsageError>()("ActionUsageError", {
  reason: Schema.Literal("negative", "not_integer", "concluded"),
  field: Schema.optional(Schema.Literal("tokens", "cost_microunits"))
}) {
  override get message() {
    switch (this.reason) {
      case "negative":
        return `usage report: ${this.field} is negative`
      case "not_integer":
        return `usage report: ${this.field} is not a safe integer`
      case "concluded":
        return "usage reported after its invocation concluded"
    }
  }
}

/** The usage meter of the invocation in progress. */
export class ActionUsage extends Context.Tag("writ/ActionUsage")<ActionUsage, ActionUsage.Service>() {}

/** The ActionUsage service. */
export declare namespace ActionUsage {
  /** Report tokens and cost for this invocation. */
  export interface Service {
    readonly report: (usage: Report) => Effect.Effect<void, ActionUsageError>
  }
}

/** The first thing wrong with a report, if anything. */
export const validate = (usage: Report): ActionUsageError | undefined => {
  for (const field of ["tokens", "cost_microunits"] as const) {
    const value = usage[field]
    if (value === undefined) continue
    if (!Number.isSafeInteger(value)) return new ActionUsageError({ reason: "not_integer", field })
    if (value < 0) return new ActionUsageError({ reason: "negative", field })
  }
  return undefined
}

/** Report tokens and cost for the invocation in progress. */
export const report = (usage: Report): Effect.Effect<void, ActionUsageError, ActionUsage> =>
  Effect.flatMap(ActionUsage, (meter) => meter.report(usage))
