/**
 * Small reference values shared by requests, contexts, descriptors and outcomes.
 */
import { Either, Option, ParseResult, Schema } from "effect"
import { Sha256Hex } from "./Digest.ts"

/** A caller-supplied identifier: non-empty, at most 200 characters, no surrounding whitespace. */
export const Identifier = Schema.String.pipe(Schema.trimmed(), Schema.nonEmptyString(), Schema.maxLength(200))

/** An action's canonical name or alias: lowercase words joined by `_`, `-`, `.` or `/`, at most 128 characters. */
export const ActionName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9]*(?:[._/-][a-z0-9]+)*$/, {
    message: () => "an action name is lowercase words (a letter, then letters or digits) joined by one of _ - . /"
  }),
  Schema.maxLength(128, {
    message: (issue) => `an action name is at most 128 characters, not ${String(issue.actual).length}`
  })
)

const decodeActionName = Schema.decodeUnknownEither(ActionName)

/** The rule of ActionName a text breaks, or none when it is an action name: what the registry and the CLI both say. */
export const actionNameIssue = (value: string): Option.Option<string> =>
  Either.match(decodeActionName(value), {
    onLeft: (error) => Option.some(ParseResult.ArrayFormatter.formatErrorSync(error)[0]!.message),
    onRight: () => Option.none()
  })

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
