import { Effect } from "effect"
import type { Report, Usage } from "../ActionUsage.ts"
import { ActionUsage, ActionUsageError, validate } from "../ActionUsage.ts"

/** One invocation's meter: the service its callable reports to, closed with the wall time the executor measured. */
export const meter = () => {
  let tokens = 0
  let cost_microunits = 0
  let open = true
  const service = ActionUsage.of({
    // A plain suspended effect: a meter is made per invocation, and building a traced function each time cost more.
    report: (usage: Report) =>
      Effect.suspend(() => {
        const invalid = validate(usage)
        if (invalid !== undefined) return Effect.fail(invalid)
        if (!open) return Effect.fail(new ActionUsageError({ reason: "concluded" }))
        tokens += usage.tokens ?? 0
        cost_microunits += usage.cost_microunits ?? 0
        return Effect.void
      })
  })
  const close = (wall_microseconds: number): Usage => {
    open = false
    return { wall_microseconds, tokens, cost_microunits }
  }
  return { service, close }
}

/** The usage service when nothing charges usage: reports are still checked, and go nowhere. */
export const unmetered = ActionUsage.of({
  report: (usage: Report) =>
    Effect.suspend(() => {
      const invalid = validate(usage)
      return invalid === undefined ? Effect.void : Effect.fail(invalid)
    })
})
