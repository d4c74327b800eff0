/**
 * The action the `backends` benchmark runs on each backend: it declares this module and its export, so a child runner
 * (writ's, or the benchmark's hand-written one) imports it.
 */
import { Schema } from "effect"
import * as Action from "../../core/action/Action.ts"

/** Adds two integers. */
export const add = Action.make({
  module: import.meta.url,
  export: "add",
  name: "bench.add",
  input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  output: Schema.Int,
  handler: ({ a, b }) => a + b
})
