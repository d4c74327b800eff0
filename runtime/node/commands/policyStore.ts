/**
 * `writ policy put|activate|retire --db FILE`: a policy version's lifecycle in a writ database, staged -> active ->
 * retired, each step once. Bad input (a declaration that does not compile, an unknown or conflicting version, a step
 * its state does not allow, a malformed id) exits 2 naming it, and nothing is created or changed.
 */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Either, Option, Schema } from "effect"
import { Identifier } from "../../../core/base/Refs.ts"
import * as Time from "../../../core/base/Time.ts"
import type { PolicySnapshot } from "../../../core/policy/PolicySnapshot.ts"
import type { BindingScope } from "../../../core/policy/PolicySnapshotStore.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import * as Embedded from "../../Embedded.ts"
import {
  checkDatabase,
  CliInputError,
  exitOneOnFailure,
  json,
  onDatabase,
  parseIdentifier,
  quoted
} from "./internal/input.ts"
import { file, load } from "./internal/policyFile.ts"
import { db } from "./internal/stores.ts"

const isIdentifier = Schema.is(Identifier)

const policyId = Args.text({ name: "ID" }).pipe(Args.withDescription("the policy id"))
const version = Args.text({ name: "VERSION" }).pipe(Args.withDescription("the policy version"))
const by = Options.text("by").pipe(
  Options.withDefault("cli-user"),
  Options.withDescription("who takes the step, as the snapshot records it")
)
const newDb = Options.file("db").pipe(
  Options.withDescription("the writ SQLite database to store the snapshot in (created if missing)")
)
const tenantOption = Options.text("tenant").pipe(
  Options.optional,
  Options.withDescription("with --bind: route only this tenant's calls (its binding beats one for every tenant)")
)
const bindOption = Options.text("bind").pipe(
  Options.optional,
  Options.withDescription("also route calls to it: global, role:NAME or resource:NAME (replacing that scope's binding)")
)

/** `--bind`'s scope, for `--tenant`'s calls or every tenant's; anything else is bad input naming it. */
const parseScope = (text: string, tenant: string | undefined): Either.Either<BindingScope, CliInputError> => {
  const only = tenant === undefined ? {} : { tenant }
  if (text === "global") return Either.right({ _tag: "global", ...only })
  const [kind, ...rest] = text.split(":")
  const name = rest.join(":")
  if ((kind === "role" || kind === "resource") && isIdentifier(name)) {
    return Either.right(
      kind === "role" ? { _tag: "role", role: name, ...only } : { _tag: "resource", resource: name, ...only }
    )
  }
  return Either.left(
    new CliInputError({ message: `--bind ${quoted(text)} is not global, role:NAME or resource:NAME` })
  )
}

/** What the store refuses for a step the input asked for: bad input, never a store failure. */
const refused = <A, R>(
  effect: Effect.Effect<A, { readonly _tag: string; readonly message: string }, R>
): Effect.Effect<A, CliInputError, R> =>
  Effect.mapError(effect, (error) => new CliInputError({ message: error.message }))

const summary = (snapshot: PolicySnapshot, bound?: BindingScope) => ({
  policy_id: snapshot.policy_id,
  version: snapshot.version,
  digest: snapshot.digest,
  release_state: snapshot.release_state,
  ...(snapshot.activated_at === undefined ? {} : { activated_at: snapshot.activated_at }),
  ...(snapshot.activated_by === undefined ? {} : { activated_by: snapshot.activated_by }),
  ...(snapshot.retired_at === undefined ? {} : { retired_at: snapshot.retired_at }),
  ...(snapshot.retired_by === undefined ? {} : { retired_by: snapshot.retired_by }),
  ...(bound === undefined ? {} : {
    bound: bound._tag === "global" ? "global" : `${bound._tag}:${scopeName(bound)}`,
    ...(bound.tenant === undefined ? {} : { bound_tenant: bound.tenant })
  })
})

const scopeName = (scope: BindingScope) =>
  scope._tag === "role" ? scope.role : scope._tag === "resource" ? scope.resource : ""

const report = (snapshot: PolicySnapshot, asJson: boolean, bound?: BindingScope) => {
  const fields = summary(snapshot, bound)
  const step = snapshot.release_state === "retired"
    ? ` (retired by ${fields.retired_by} at ${fields.retired_at})`
    : snapshot.release_state === "active"
    ? ` (activated by ${fields.activated_by} at ${fields.activated_at})`
    : ""
  return Console.log(
    asJson
      ? JSON.stringify(fields, null, 2)
      : `${fields.policy_id}@${fields.version}  digest ${fields.digest}  ${fields.release_state}${step}${
        fields.bound === undefined
          ? ""
          : `, bound ${fields.bound}${fields.bound_tenant === undefined ? "" : ` for tenant ${fields.bound_tenant}`}`
      }`
  )
}

/** `writ policy put`. */
export const put = Command.make("put", { file, db: newDb, json }, ({ db, file, json }) =>
  Effect.gen(function*() {
    const { snapshot } = yield* load(file)
    yield* checkDatabase(db, "new_or_existing")
    const stored = yield* Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      yield* refused(store.put(snapshot))
      return yield* refused(store.get(snapshot.policy_id, snapshot.version))
    }).pipe(Effect.provide(Embedded.layerStores({ filename: db })), onDatabase(db))
    yield* report(stored, json)
  }).pipe(exitOneOnFailure)).pipe(
    Command.withDescription(
      "Store a compiled policy version, staged (the same version and digest again changes nothing; another digest is refused)"
    )
  )

/** Run a lifecycle step on an existing database's store, after checking the ids it names. */
const step = <A, E, R>(
  ids: { readonly id: string; readonly version: string; readonly by: string },
  db: string,
  body: (store: PolicySnapshotStore.Service, at: Time.Timestamp) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    yield* parseIdentifier(ids.id, "ID")
    yield* parseIdentifier(ids.version, "VERSION")
    yield* parseIdentifier(ids.by, "--by")
    yield* checkDatabase(db, "existing")
    const at = yield* Time.now
    return yield* Effect.flatMap(PolicySnapshotStore, (store) => body(store, at)).pipe(
      Effect.provide(Embedded.layerStores({ filename: db })),
      onDatabase(db)
    )
  })

/** `writ policy activate`. */
export const activate = Command.make(
  "activate",
  { id: policyId, version, db, by, bind: bindOption, tenant: tenantOption, json },
  ({ bind, by, db, id, json, tenant, version }) =>
    Effect.gen(function*() {
      if (Option.isSome(tenant)) {
        yield* parseIdentifier(tenant.value, "--tenant")
        if (Option.isNone(bind)) {
          return yield* new CliInputError({ message: "--tenant names whose calls --bind routes: give --bind too" })
        }
      }
      const scope = Option.isSome(bind) ? yield* parseScope(bind.value, Option.getOrUndefined(tenant)) : undefined
      const active = yield* step({ id, version, by }, db, (store, at) =>
        Effect.gen(function*() {
          const snapshot = yield* refused(store.activate(id, version, by, at))
          if (scope !== undefined) yield* refused(store.bind(scope, id, version))
          return snapshot
        }))
      yield* report(active, json, scope)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Activate a staged policy version (never a retired one), and with --bind route a scope's calls to it"
))

/** `writ policy retire`. */
export const retire = Command.make(
  "retire",
  { id: policyId, version, db, by, json },
  ({ by, db, id, json, version }) =>
    Effect.gen(function*() {
      const retired = yield* step({ id, version, by }, db, (store, at) => refused(store.retire(id, version, by, at)))
      yield* report(retired, json)
    }).pipe(exitOneOnFailure)
).pipe(
  Command.withDescription(
    "Retire an active policy version: unbound, no call runs under it again, readable still so what it governed certifies"
  )
)
