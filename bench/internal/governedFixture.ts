/**
 * What the governed benchmarks share: the one action they call, and the policy that allows it.
 */
import { Schema } from "effect"
import * as Action from "../../core/action/Action.ts"

/** The action both sides of a governed benchmark end in. */
export const addAction = Action.make({
  name: "bench.add",
  input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  output: Schema.Int,
  handler: ({ a, b }) => a + b
})

/** One hard gate allowing `bench.*` but `bench.purge`. */
export const declaration = {
  policy_id: "bench",
  version: "1",
  rules: [
    { rule_id: "allow-bench", kind: "action", effect: "allow", action_patterns: ["bench.*"] },
    { rule_id: "no-purge", kind: "action", effect: "deny", action_patterns: ["bench.purge"] }
  ],
  gates: [{ gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-bench", "no-purge"] }]
}
