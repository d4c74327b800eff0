/**
 * Small reference values shared by requests, contexts, descriptors and outcomes.
 */
import { Schema } from "effect"
import { Sha256Hex } from "./Digest.ts"

/** A caller-supplied identifier: non-empty, at most 200 characters, no surrounding whitespace. */
export const Identifier = Schema.String.pipe(Schema.trimmed(), Schema.nonEmptyString(), Schema.maxLength(200))

/** An action's canonical name or alias: lowercase words joined by `_`, `-`, `.` or `/`. */
export const ActionName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9]*(?:[._/-][a-z0-9]+)*$/, {
    message: () => "an action name is lowercase words joined by _ - . or /"
  }),
  Schema.maxLength(128)
)

/** A reference to an action by name or alias, optionally pinned to a version. */
export const ActionRef = Schema.Struct({
  name: ActionName,
  version: Schema.optional(Identifier)
})

/** The type of ActionRef. */
export type ActionRef = typeof ActionRef.Type

/** A principal: the authenticated identity an operation runs for. */
export const PrincipalRef = Schema.Struct({ id: Identifier })

/** The type of PrincipalRef. */
export type PrincipalRef = typeof PrincipalRef.Type

/** A tenant: the isolation boundary a principal belongs to. */
export const TenantRef = Schema.Struct({ id: Identifier })

/** The type of TenantRef. */
export type TenantRef = typeof TenantRef.Type

/** The exact policy snapshot a context is bound to. */
export const PolicySnapshotRef = Schema.Struct({
  policy_id: Identifier,
  version: Identifier,
  digest: Sha256Hex
})

/** The type of PolicySnapshotRef. */
export type PolicySnapshotRef = typeof PolicySnapshotRef.Type

/** An effect backend by identity and version. */
export const ActionBackendRef = Schema.Struct({
  id: Identifier,
  version: Identifier
})

/** The type of ActionBackendRef. */
export type ActionBackendRef = typeof ActionBackendRef.Type
