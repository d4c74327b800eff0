/**
 * The immutable, digest-pinned description of a registered action, as the registry resolves it.
 */
import { Effect, JSONSchema, Schema } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import * as Digest from "../base/Digest.ts"
import { ExecutionCaller } from "../policy/InvocationContext.ts"
import type { ActionDefinition } from "./Action.ts"
import { ContainmentKind, EnvironmentNeed, McpTool, Provenance, SecretNeed } from "./Action.ts"

/** A registered action's identity, Schemas (as JSON Schema), effects, declared needs, provenance and module, with its digest. */
export class ActionDescriptor extends Schema.Class<ActionDescriptor>("ActionDescriptor")({
  name: Schema.String,
  version: Schema.String,
  aliases: Schema.Array(Schema.String),
  description: Schema.String,
  input_schema: Schema.Unknown,
  output_schema: Schema.Unknown,
  effects: Schema.Array(Schema.String),
  containment: Schema.Array(ContainmentKind),
  origins: Schema.optional(Schema.Array(ExecutionCaller)),
  source: Provenance,
  mcp: Schema.optional(McpTool),
  secrets: Schema.optional(Schema.Array(SecretNeed)),
  environment: Schema.optional(Schema.Array(EnvironmentNeed)),
  module: Schema.optional(Schema.String),
  export: Schema.optional(Schema.String),
  digest: Digest.Sha256Hex
}) {}

const jsonSchemaOf = (schema: Schema.Schema.Any): unknown => {
  try {
    return JSONSchema.make(schema)
  } catch {
    return { $comment: String(schema.ast) }
  }
}

const fieldsOf = (definition: ActionDefinition) => ({
  name: definition.name,
  version: definition.version,
  aliases: definition.aliases,
  description: definition.description,
  input_schema: jsonSchemaOf(definition.input),
  output_schema: jsonSchemaOf(definition.output),
  effects: definition.effects,
  containment: definition.containment,
  ...(definition.origins === undefined ? {} : { origins: definition.origins }),
  source: { ...definition.source },
  ...(definition.mcp === undefined ? {} : { mcp: definition.mcp }),
  ...(definition.secrets === undefined ? {} : { secrets: definition.secrets }),
  ...(definition.environment === undefined ? {} : { environment: definition.environment }),
  // Absent for an action that names no module, so the digests of those stay what they were.
  ...(definition.module === undefined ? {} : { module: definition.module }),
  ...(definition.export === undefined ? {} : { export: definition.export })
})

/** Describe a definition and pin it with the `sha256-v1` digest of everything else in the descriptor. */
export const describe = (
  definition: ActionDefinition
): Effect.Effect<ActionDescriptor, CanonicalJsonError, Digest.Digest> => {
  const fields = fieldsOf(definition)
  return Effect.map(
    Digest.canonical(fields),
    (digest) => Object.freeze(ActionDescriptor.make({ ...fields, source: definition.source, digest }))
  )
}

/** The digest `describe` pins a definition with, without building its descriptor. */
export const digestOf = (
  definition: ActionDefinition
): Effect.Effect<Digest.Sha256Hex, CanonicalJsonError, Digest.Digest> => Digest.canonical(fieldsOf(definition))
