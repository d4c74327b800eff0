/**
 * A policy diff by generated calls: the calls whose disposition differs between two versions, grouped by
 * (action, old, new), each group with its smallest example. Sampled and executor-faithful (each call runs on a fresh
 * minimal executor under each version), not a symbolic analysis: a difference no generated call reaches is missed.
 */
import { Effect, Schema } from "effect"
import fc from "fast-check"
import * as Action from "../../core/action/Action.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import type { Call } from "./Calls.ts"
import { calls, witnessesOf } from "./Calls.ts"
import type { Options, Policy, SetupError } from "./Harness.ts"
import { prepare } from "./Harness.ts"
import { runCase } from "./internal/env.ts"
import { source, summary } from "./Report.ts"

/** Calls of one action whose disposition went from `old` to `new`: how many, and the smallest. */
export interface DiffGroup {
  readonly action: string
  readonly old: string
  readonly new: string
  readonly count: number
  readonly example: Call
  readonly old_outcome: string
  readonly new_outcome: string
}

/** What a diff sampled and found. */
export interface DiffReport {
  readonly runs: number
  readonly seed: number
  readonly groups: ReadonlyArray<DiffGroup>
}

/** How many calls, from which seed, with the rest of a check's options. */
export type DiffOptions = Partial<Omit<Options, "policy" | "actions" | "properties" | "sequences">>

// The salient arguments a policy's patterns match, each optional.
const StandInInput = Schema.Struct({
  command: Schema.optional(Schema.String),
  path: Schema.optional(Schema.String),
  url: Schema.optional(Schema.String),
  address: Schema.optional(Schema.String),
  host: Schema.optional(Schema.String)
})

const standIn = (name: string): ReadonlyArray<ActionDefinition> => {
  try {
    return [Action.make({
      name,
      input: StandInInput,
      output: Schema.Null,
      handler: () => null
    })]
  } catch {
    // A pattern's instance that is no action name (`*` gives ""): nothing to call.
    return []
  }
}

/** Stand-in actions for the names the policies mention: the salient arguments, no effect. */
export const mentionedActions = (names: ReadonlyArray<string>): ReadonlyArray<ActionDefinition> =>
  names.flatMap(standIn)

/** The diff as an Effect: each generated call on a fresh executor under each policy, compared by disposition. */
export const diffEffect = (
  oldPolicy: Policy,
  newPolicy: Policy,
  actions?: ReadonlyArray<ActionDefinition>,
  options: DiffOptions = {}
): Effect.Effect<DiffReport, SetupError> =>
  Effect.gen(function*() {
    const probe = { ...options, policy: oldPolicy, actions: [] }
    const snapshots = [(yield* prepare(probe, oldPolicy)).snapshot, (yield* prepare(probe, newPolicy)).snapshot]
    const used = actions ?? mentionedActions(witnessesOf(snapshots).actions)
    const before = yield* prepare({ ...options, policy: oldPolicy, actions: used }, oldPolicy)
    const after = yield* prepare({ ...options, policy: newPolicy, actions: used }, newPolicy)
    const runs = options.runs ?? 500
    const seed = options.seed ?? 42
    const sample = fc.sample(calls({ actions: used, snapshots, agent: before.boundAgent }), { numRuns: runs, seed })
    const groups = new Map<string, DiffGroup>()
    for (const call of sample) {
      const [old] = yield* runCase(before, "minimal", call)
      const [now] = yield* runCase(after, "minimal", call)
      const from = old?.outcome?._tag ?? "refused"
      const to = now?.outcome?._tag ?? "refused"
      if (from === to) continue
      const key = `${call.action}\u0000${from}\u0000${to}`
      const seen = groups.get(key)
      const smaller = seen === undefined || source(call).length < source(seen.example).length
      groups.set(key, {
        action: call.action,
        old: from,
        new: to,
        count: (seen?.count ?? 0) + 1,
        example: smaller ? call : seen.example,
        old_outcome: smaller ? summary(old?.outcome) : seen.old_outcome,
        new_outcome: smaller ? summary(now?.outcome) : seen.new_outcome
      })
    }
    return { runs, seed, groups: [...groups.values()].sort((a, b) => b.count - a.count) }
  })

/** The diff as a Promise. */
export const diff = (
  oldPolicy: Policy,
  newPolicy: Policy,
  actions?: ReadonlyArray<ActionDefinition>,
  options: DiffOptions = {}
): Promise<DiffReport> => Effect.runPromise(diffEffect(oldPolicy, newPolicy, actions, options))
