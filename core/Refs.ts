/**
 * Small reference values shared by requests, contexts, descriptors and outcomes.
 */
import { Schema } from "effect"
import { Sha256Hex } from "./Digest.ts"

/** A caller-supplied identifier: non-empty, at most 200 characters, no surrounding whitespace. */
export const Identifier = Schema.Trim.pipe(Schema.nonEmptyString(), Schema.maxLength(200))

/** An action's canonical name or alias: lowercase words joined by `_`, `-`, `.` or `/`. */
export const ActionName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9]*(?:[._/-][a-z0-9]+)*$/, {
    message: () => "an action name is lowercase words joined by _ - . or /"
  }),
  Schema.maxLength(128)
)

/** A reference to an action by name or alias, optionally pinned to a version. */
export class ActionRef extends Schema.Class<ActionRef>("ActionRef")({
  name: ActionName,
  version: Schema.optional(Identifier)
}) {}

/** A principal: the authenticated identity an operation runs for. */
export class PrincipalRef extends Schema.Class<PrincipalRef>("PrincipalRef")({ id: Identifier }) {}

/** A tenant: the isolation boundary a principal belongs to. */
export class TenantRef extends Schema.Class<TenantRef>("TenantRef")({ id: Identifier }) {}

/** The exact policy snapshot a context is bound to. */
export class PolicySnapshotRef extends Schema.Class<PolicySnapshotRef>("PolicySnapshotRef")({
  policy_id: Identifier,
  version: Identifier,
  digest: Sha256Hex
}) {}

/** An effect backend by identity and version. */
export class ActionBackendRef extends Schema.Class<ActionBackendRef>("ActionBackendRef")({
  id: Identifier,
  version: Identifier
}) {}
