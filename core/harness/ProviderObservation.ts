/**
 * What the provider's stream said happened: tool use, tool result, denial, usage, exit. Redacted, immutable, and on
 * the observation plane only: it never authorises a call, is never a gate result or governed evidence, and never
 * verifies a control (every such type requires fields no observation has).
 */
import { Schema } from "effect"

const plane = { plane: Schema.Literal("observation") }

/** The model asked for a tool call. */
export class ToolUse extends Schema.TaggedClass<ToolUse>()("tool_use", {
  ...plane,
  call_id: Schema.String,
  tool: Schema.String,
  input: Schema.String
}) {}

/** A tool call's result as the provider reported it. */
export class ToolResult extends Schema.TaggedClass<ToolResult>()("tool_result", {
  ...plane,
  call_id: Schema.String,
  is_error: Schema.Boolean,
  content: Schema.String
}) {}

/** The provider reported a call denied (by its rules, its mode or a hook). */
export class Denial extends Schema.TaggedClass<Denial>()("denial", {
  ...plane,
  call_id: Schema.NullOr(Schema.String),
  tool: Schema.String,
  detail: Schema.String
}) {}

/** Tokens and cost as the provider counted them; unknown is null, never 0. */
export class Usage extends Schema.TaggedClass<Usage>()("usage", {
  ...plane,
  input_tokens: Schema.NullOr(Schema.NonNegativeInt),
  output_tokens: Schema.NullOr(Schema.NonNegativeInt),
  turns: Schema.NullOr(Schema.NonNegativeInt)
}) {}

/** The CLI's process ended. */
export class Exit extends Schema.TaggedClass<Exit>()("exit", {
  ...plane,
  code: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String),
  killed_by_harness: Schema.Boolean
}) {}

type Observed = typeof ToolUse | typeof ToolResult | typeof Denial | typeof Usage | typeof Exit

/**
 * The instance `new Class(fields, { disableValidation: true })` makes (same prototype, fields, key order), built
 * directly for the parsers, whose fields come from typed readers: the Schema class constructor walks its field schemas
 * on every call, about 2 µs an instance, most of what a parser spends a line.
 */
export const observed = <C extends Observed>(Class: C, fields: ConstructorParameters<C>[0]): InstanceType<C> =>
  Object.assign(Object.create(Class.prototype), fields, { _tag: Class._tag })

/** What the provider's stream said happened. */
export const ProviderObservation = Schema.Union(ToolUse, ToolResult, Denial, Usage, Exit)

/** What the provider's stream said happened. */
export type ProviderObservation = typeof ProviderObservation.Type

/** The most characters of a tool's input or result an observation keeps. */
export const maxText = 4096

/** A text with every secret value replaced and cut to `maxText`: what an observation may hold. */
export const redact = (text: string, secrets: ReadonlyArray<string>): string => {
  let out = text
  for (const secret of secrets) {
    if (secret.length > 0 && out.includes(secret)) out = out.split(secret).join("[redacted]")
  }
  return out.length > maxText ? `${out.slice(0, maxText)}…` : out
}
