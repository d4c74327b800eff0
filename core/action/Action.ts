/**
 * Action definitions: identity, Schemas, declared effects and provenance, with the handler sealed
 * away so that nothing but a spent invocation token can reach it.
 */
import type { Effect, Redacted } from "effect"
import { Cause, Either, Option, ParseResult, Schema } from "effect"
import type * as Scope from "effect/Scope"
import type { JsonValue } from "../base/Canonical.ts"
import { actionNameIssue, Identifier } from "../base/Refs.ts"
import { type ExecutionCaller, sortOrigins } from "../policy/InvocationContext.ts"
import type { ActionOutbox } from "./ActionOutbox.ts"
import type { ActionUsage, Report } from "./ActionUsage.ts"
import { seal } from "./internal/callable.ts"

/** A kind of effect containment a backend may enforce. */
export const ContainmentKind = Schema.Literal("filesystem", "network", "subprocess", "environment", "secrets")

/** A kind of effect containment. */
export type ContainmentKind = typeof ContainmentKind.Type

/** Where an action came from. */
export class Provenance extends Schema.Class<Provenance>("Provenance")({
  kind: Schema.Literal("local", "plugin", "mcp"),
  id: Schema.optional(Identifier)
}) {}

const DeclaredName = Schema.String.pipe(
  Schema.pattern(/^[^\s*]+$/, { message: () => "a declared name is non-empty, with no whitespace and no *" }),
  Schema.maxLength(512)
)

/** The MCP tool an action calls: its server, its tool, and the resources it reads (names, never patterns). */
export const McpTool = Schema.Struct({
  server: DeclaredName,
  tool: DeclaredName,
  resources: Schema.optionalWith(Schema.Array(DeclaredName), { default: () => [] })
})

/** An MCP tool declaration. */
export type McpTool = typeof McpTool.Type

/** A secret an action needs from the executor: a reference to it only, or its value injected. */
export const SecretNeed = Schema.Struct({
  namespace: DeclaredName,
  exposure: Schema.Literal("reference_only", "inject")
})

/** A secret need. */
export type SecretNeed = typeof SecretNeed.Type

/** An environment variable an action needs: read from the host's environment, or injected into the call's. */
export const EnvironmentNeed = Schema.Struct({
  variable: Schema.String.pipe(
    Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: () => "an environment variable name, with no *" }),
    Schema.maxLength(256)
  ),
  exposure: Schema.Literal("read", "inject")
})

/** An environment need. */
export type EnvironmentNeed = typeof EnvironmentNeed.Type

/** What a handler learns about the invocation it serves. */
export interface HandlerContext {
  readonly request_id: string
  readonly attempt_id: string
  readonly signal: AbortSignal
  /** Report tokens and cost this invocation consumed (for Promise and plain handlers); throws `ActionUsageError` when invalid. */
  readonly report: (usage: Report) => void
  /** Stage an outbox intent, committed with the attempt if the call succeeds (for Promise and plain handlers); throws `ActionOutboxError` when refused. */
  readonly stage: (topic: string, payload: { readonly [key: string]: JsonValue }) => void
  /** A secret its backend injected for this call, by the name it declares with `exposure: inject`; else undefined. */
  readonly secret: (name: string) => Redacted.Redacted<string> | undefined
}

/** A handler: an Effect (which may report its usage and stage outbox intents), a Promise or a plain value; scoped resources close when the call ends. */
export type Handler<I = any, O = any> = (
  input: I,
  context: HandlerContext
) => Effect.Effect<O, unknown, Scope.Scope | ActionUsage | ActionOutbox> | PromiseLike<O> | O

/** A failure an action chooses to make public: its code and message reach the outcome. */
export class ActionError extends Schema.TaggedError<ActionError>()("ActionError", {
  code: Schema.String.pipe(Schema.pattern(/^[a-z_]+(?:\.[a-z_]+)*$/)),
  message: Schema.String
}) {}

/** A declared action, without its handler. */
export interface ActionDefinition<I = any, O = any> {
  readonly name: string
  readonly version: string
  readonly aliases: ReadonlyArray<string>
  readonly description: string
  readonly input: Schema.Schema<I, any>
  readonly output: Schema.Schema<O, any>
  readonly effects: ReadonlyArray<string>
  readonly containment: ReadonlyArray<ContainmentKind>
  /** The origins that may run it (the Execution Policy seed): absent adds no restriction; empty denies every origin. */
  readonly origins?: ReadonlyArray<ExecutionCaller>
  readonly source: Provenance
  /** The MCP tool it calls; present exactly when its source is `mcp`. */
  readonly mcp?: McpTool
  /** Secrets it needs. Policy checks the declaration; a subprocess backend injects the `inject` ones from its SecretStore (read with `context.secret`), the in-process backend none, and only a backend's containment stops a handler reading others. */
  readonly secrets?: ReadonlyArray<SecretNeed>
  /** Environment variables it needs, checked like `secrets`: a handler in the host can still read its environment itself. */
  readonly environment?: ReadonlyArray<EnvironmentNeed>
  /** The URL of the module that defines it (its `import.meta.url`), which a subprocess backend imports; with `export`. */
  readonly module?: string
  /** The name under which `module` exports this definition; with `module`. */
  readonly export?: string
}

/** What `make` takes to declare an action. */
export interface Spec<I, II, O, OI> {
  readonly name: string
  readonly version?: string
  readonly aliases?: ReadonlyArray<string>
  readonly description?: string
  readonly input: Schema.Schema<I, II>
  readonly output: Schema.Schema<O, OI>
  readonly effects?: ReadonlyArray<string>
  readonly containment?: ReadonlyArray<ContainmentKind>
  readonly origins?: ReadonlyArray<ExecutionCaller>
  readonly source?: Provenance
  readonly mcp?: typeof McpTool.Encoded
  readonly secrets?: ReadonlyArray<SecretNeed>
  readonly environment?: ReadonlyArray<EnvironmentNeed>
  /** Where the action is defined, for backends that run it in another process: `import.meta.url` of its module. */
  readonly module?: string
  /** The export of `module` that is this definition. */
  readonly export?: string
  readonly handler: Handler<I, O>
}

/** An invalid declaration: a bad name, alias or version. */
export class ActionDefinitionError extends Schema.TaggedError<ActionDefinitionError>()("ActionDefinitionError", {
  action: Schema.String,
  field: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `action ${this.action}: ${this.field} ${this.detail}`
  }
}

const checkName = (action: string, field: string, value: string) => {
  const issue = actionNameIssue(value)
  if (Option.isSome(issue)) {
    throw new ActionDefinitionError({ action, field, detail: `"${value}" is not an action name: ${issue.value}` })
  }
}

const validated = <A, I>(action: string, field: string, schema: Schema.Schema<A, I>, value: unknown): A => {
  const decoded = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(value)
  if (Either.isRight(decoded)) return decoded.right
  throw new ActionDefinitionError({ action, field, detail: ParseResult.TreeFormatter.formatErrorSync(decoded.left) })
}

const needs = <A extends object>(
  action: string,
  field: string,
  schema: Schema.Schema<A, A>,
  key: keyof A,
  values: ReadonlyArray<A> | undefined
): ReadonlyArray<A> => {
  const checked = (values ?? []).map((value, i) => Object.freeze(validated(action, `${field}[${i}]`, schema, value)))
  const names = checked.map((value) => value[key])
  names.forEach((name, i) => {
    if (names.indexOf(name) !== i) throw new ActionDefinitionError({ action, field, detail: `names ${name} twice` })
  })
  return Object.freeze(checked)
}

const mcpOf = (spec: Spec<any, any, any, any>): McpTool | undefined => {
  const kind = spec.source?.kind ?? (spec.mcp === undefined ? "local" : "mcp")
  if (spec.mcp === undefined && kind !== "mcp") return undefined
  if (spec.mcp === undefined || kind !== "mcp") {
    throw new ActionDefinitionError({
      action: spec.name,
      field: spec.mcp === undefined ? "mcp" : "source",
      detail: "an MCP action (source mcp) declares its server and tool, and only an MCP action does"
    })
  }
  const tool = validated(spec.name, "mcp", McpTool, spec.mcp)
  return Object.freeze({ ...tool, resources: Object.freeze([...tool.resources]) })
}

/** A module URL as a subprocess imports it: absolute, with no credentials, query or fragment. */
const ModuleUrl = Schema.String.pipe(
  Schema.maxLength(4096),
  Schema.filter((text) => {
    if (!URL.canParse(text)) return "an absolute URL (the module's import.meta.url)"
    const url = new URL(text)
    return url.username === "" && url.password === "" && url.search === "" && url.hash === "" ||
      "a module URL with no credentials, query or fragment"
  })
)

/** An export name: a JavaScript identifier, or `default`. */
const ExportName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z_$][A-Za-z0-9_$]*$/, { message: () => "an export name is a JavaScript identifier" }),
  Schema.maxLength(256)
)

const locationOf = (
  spec: Spec<any, any, any, any>
): { readonly module: string; readonly export: string } | undefined => {
  if (spec.module === undefined && spec.export === undefined) return undefined
  if (spec.module === undefined || spec.export === undefined) {
    throw new ActionDefinitionError({
      action: spec.name,
      field: spec.module === undefined ? "module" : "export",
      detail: "an action that declares where it is defined names both its module and its export"
    })
  }
  return {
    module: validated(spec.name, "module", ModuleUrl, spec.module),
    export: validated(spec.name, "export", ExportName, spec.export)
  }
}

/** Declare an action; throws ActionDefinitionError on an invalid name, alias, version, location or MCP, secret or environment declaration. */
export const make = <I, II, O, OI>(spec: Spec<I, II, O, OI>): ActionDefinition<I, O> => {
  checkName(spec.name, "name", spec.name)
  spec.aliases?.forEach((alias, i) => checkName(spec.name, `aliases[${i}]`, alias))
  const version = spec.version ?? "1"
  if (!Schema.is(Identifier)(version)) {
    throw new ActionDefinitionError({ action: spec.name, field: "version", detail: "must be a non-empty identifier" })
  }
  const mcp = mcpOf(spec)
  const secrets = needs(spec.name, "secrets", SecretNeed, "namespace", spec.secrets)
  const environment = needs(spec.name, "environment", EnvironmentNeed, "variable", spec.environment)
  const location = locationOf(spec)
  const definition: ActionDefinition<I, O> = Object.freeze({
    name: spec.name,
    version,
    aliases: Object.freeze([...(spec.aliases ?? [])]),
    description: spec.description ?? "",
    input: spec.input,
    output: spec.output,
    effects: Object.freeze([...(spec.effects ?? [])]),
    containment: Object.freeze([...(spec.containment ?? [])]),
    ...(spec.origins === undefined ? {} : { origins: sortOrigins(spec.origins) }),
    source: spec.source ?? Provenance.make({ kind: mcp === undefined ? "local" : "mcp" }),
    ...(mcp === undefined ? {} : { mcp }),
    ...(secrets.length === 0 ? {} : { secrets }),
    ...(environment.length === 0 ? {} : { environment }),
    ...location
  })
  seal<Handler>(definition, spec.handler)
  return definition
}

/** A captured handler failure, normalised and redacted: a code, and a message only if public. */
export interface CapturedFailure {
  readonly code: string
  readonly message?: string
}

/** Normalise a handler's failure cause: an ActionError keeps its code and message; anything else only a code. */
export const captureFailure = (cause: Cause.Cause<unknown>): CapturedFailure => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value
    return error instanceof ActionError ? { code: error.code, message: error.message } : { code: "handler.failed" }
  }
  return { code: "handler.defect" }
}
