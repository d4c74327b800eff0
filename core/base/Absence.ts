/**
 * The three absence states: Undefined (a field omitted), Unset (inherit, still unresolved) and
 * `null` (explicitly none). The wire form omits Undefined and Unset; `null` is kept and is never
 * read back as Unset.
 */
import { Either, Predicate, Schema } from "effect"

const UnsetTypeId: unique symbol = Symbol.for("writ/Unset")

/** The type of the Unset sentinel. */
export interface Unset {
  readonly [UnsetTypeId]: typeof UnsetTypeId
}

/** A field that may be left Unset to inherit from a captured parent. */
export type Settable<A> = A | Unset

/** The one Unset value: "inherit from the parent; not resolved yet". */
export const Unset: Unset = Object.freeze({
  [UnsetTypeId]: UnsetTypeId,
  toJSON: () => undefined,
  toString: () => "Unset"
}) as Unset

/** Whether a value is the Unset sentinel. */
export const isUnset = (value: unknown): value is Unset => Predicate.hasProperty(value, UnsetTypeId)

/** Schema of the Unset sentinel (decodes only the sentinel itself, never `null` or a string). */
export const UnsetSchema: Schema.Schema<Unset> = Schema.declare(isUnset, { identifier: "Unset" })

/** `A` or Unset, for declarations that allow inheritance. */
export const settable = <A, I, R>(schema: Schema.Schema<A, I, R>) => Schema.Union(schema, UnsetSchema)

/** Resolve a Settable field against the parent's value; `null` stays `null`. */
export const resolve = <A>(child: Settable<A>, parent: A): A => (isUnset(child) ? parent : child)

/** A value that still holds an Unset somewhere a resolved snapshot must not. */
export class UnresolvedFieldError extends Schema.TaggedError<UnresolvedFieldError>()("UnresolvedFieldError", {
  path: Schema.String
}) {
  override get message() {
    return `field ${this.path} is still Unset: resolve it against its parent before snapshotting`
  }
}

const findUnset = (value: unknown, path: string): string | undefined => {
  if (isUnset(value)) return path
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnset(value[i], `${path}[${i}]`)
      if (found !== undefined) return found
    }
    return undefined
  }
  if (Predicate.isObject(value)) {
    for (const [key, child] of Object.entries(value)) {
      const found = findUnset(child, `${path}.${key}`)
      if (found !== undefined) return found
    }
  }
  return undefined
}

/** A strict snapshot: the value itself when no nested field is Unset, else the first Unset path. */
export const strictSnapshot = <A>(value: A): Either.Either<A, UnresolvedFieldError> => {
  const path = findUnset(value, "$")
  return path === undefined ? Either.right(value) : Either.left(new UnresolvedFieldError({ path }))
}
