/** What a failed property reports: the shrunk call, its outcome and decision trail, as a regression test to paste. */
import { Schema } from "effect"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import type { Step } from "./internal/env.ts"

/** One decision of the trail: the stage, the evaluator, its disposition and reason code, and the gate and rules it names. */
export interface TrailEntry {
  readonly stage: string
  readonly evaluator: string
  readonly disposition: string
  readonly code: string
  readonly gate?: string
  readonly rules?: ReadonlyArray<string>
}

const GATE = /gate (\S+) \(/
const RULES = /rules ([^;]+)/

/** The decisions behind an outcome, with the gate and rule ids the policy's details name. */
export const trailOf = (outcome: ExecutionOutcome): ReadonlyArray<TrailEntry> =>
  outcome.decisions.map((decision) => {
    const detail = decision.reason.detail ?? ""
    const gate = GATE.exec(detail)?.[1]
    const rules = RULES.exec(detail)?.[1]?.split(",").map((rule) => rule.trim())
    return {
      stage: decision.stage,
      evaluator: decision.evaluator,
      disposition: decision.disposition,
      code: decision.reason.code,
      ...(gate === undefined ? {} : { gate }),
      ...(rules === undefined ? {} : { rules })
    }
  })

/** An outcome in one line: its tag and reason code. */
export const summary = (outcome: ExecutionOutcome | undefined): string =>
  outcome === undefined ? "no outcome (an evidence error)" : `${outcome._tag} ${reasonCode(outcome)}`

const isRepeat = (text: string) => text.length > 64 && text === text[0]!.repeat(text.length)

/** A value as JavaScript source that builds it again: long repeated strings as `.repeat`, an own `__proto__` kept. */
export const source = (value: unknown, indent = ""): string => {
  if (typeof value === "string") {
    return isRepeat(value)
      ? `${JSON.stringify(value[0])}.repeat(${value.length})`
      : JSON.stringify(value)
  }
  if (value === undefined) return "undefined"
  if (typeof value !== "object" || value === null) return JSON.stringify(value)
  const inner = `${indent}  `
  if (Array.isArray(value)) {
    return value.length === 0 ? "[]" : `[\n${value.map((v) => `${inner}${source(v, inner)}`).join(",\n")}\n${indent}]`
  }
  const entries = Object.entries(value)
  if (entries.length === 0) return "{}"
  const key = (
    k: string
  ) => (k === "__proto__" ? `["__proto__"]` : /^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k))
  return `{\n${entries.map(([k, v]) => `${inner}${key(k)}: ${source(v, inner)}`).join(",\n")}\n${indent}}`
}

const trailText = (trail: ReadonlyArray<TrailEntry>) =>
  trail.length === 0
    ? "  (no decision: refused before the security stages)"
    : trail.map((t) =>
      `  ${t.stage} ${t.evaluator}: ${t.disposition} ${t.code}${t.gate === undefined ? "" : ` gate ${t.gate}`}${
        t.rules === undefined ? "" : ` rules ${t.rules.join(", ")}`
      }`
    ).join("\n")

/** A property that does not hold: its name, the shrunk call, the step that broke it, and the run that found it. */
export class PropertyViolation extends Schema.TaggedError<PropertyViolation>()("PropertyViolation", {
  property: Schema.String,
  profile: Schema.String,
  seed: Schema.Number,
  path: Schema.String,
  call: Schema.Unknown,
  step: Schema.String,
  outcome: Schema.String,
  trail: Schema.Array(Schema.Unknown),
  regression: Schema.String
}) {
  override get message() {
    return this.regression
  }
}

/** The violation of `property` by one step of the shrunk `call`, with a regression test that replays it. */
export const violation = (
  property: string,
  call: unknown,
  step: Step,
  run: { readonly seed: number; readonly path: string }
): PropertyViolation => {
  const trail = step.outcome === undefined ? [] : trailOf(step.outcome)
  const regression = [
    `property "${property}" does not hold on the ${step.observed.profile} profile (seed ${run.seed}, path "${run.path}")`,
    `the ${step.call.step} step of this call came to ${
      summary(step.outcome)
    }; the callable ran ${step.observed.ran} time(s)`,
    "decision trail:",
    trailText(trail),
    "regression test (the call, shrunk; replay gives every step of it):",
    `  const call: Testing.Call = ${source(call, "  ")}`,
    `  const steps = await Testing.replay({ policy, actions }, call, "${step.observed.profile}")`,
    `  // steps.find((s) => s.call.step === "${step.call.step}") is the step "${property}" fails on`
  ].join("\n")
  return new PropertyViolation({
    property,
    profile: step.observed.profile,
    seed: run.seed,
    path: run.path,
    call,
    step: step.call.step,
    outcome: summary(step.outcome),
    trail,
    regression
  })
}
