/**
 * The durable PolicySnapshotStore over `@effect/sql` (`durable: true`): each snapshot is stored as the canonical JSON
 * of its encoded staged form (immutable, guarded by a trigger), with its release state and activation metadata beside
 * it; a retirement is a row of its own, appended once (so the release state a read sees is derived: retired once that
 * row exists). Every snapshot it serves is immutable (`PolicySnapshot.immutable`), built once per verified text and state.
 * Every read checks the stored text: the first decodes it, checks it is canonical and that its digest recomputes, and
 * refuses it otherwise; later ones compare it, in the database, with the text verified (sent as its UTF-8 bytes,
 * encoded once), and verify it again when it or its digest changed.
 * A storage failure has no place in the port's errors and is a defect.
 *
 * Runtimes: any with a SqlClient (no driver imported; tested on @effect/sql-sqlite-node).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer, Option, Schema } from "effect"
import * as Canonical from "../../core/base/Canonical.ts"
import type * as Digest from "../../core/base/Digest.ts"
import { Identifier } from "../../core/base/Refs.ts"
import { Timestamp } from "../../core/base/Time.ts"
import {
  activatable,
  checkDigest,
  immutable,
  PolicySnapshot,
  recomputeDigest,
  ReleaseState
} from "../../core/policy/PolicySnapshot.ts"
import type { BindingScope, BindingTarget } from "../../core/policy/PolicySnapshotStore.ts"
import {
  AmbiguousPolicyError,
  candidatesOf,
  checkScope,
  notActive,
  pairKey,
  PolicyConflictError,
  policyLabel,
  PolicyNotFoundError,
  PolicySnapshotStore,
  selectBindings
} from "../../core/policy/PolicySnapshotStore.ts"
import { writeTransaction } from "./internal/transaction.ts"

const Key = Schema.Struct({ policy_id: Schema.String, version: Schema.String })

const SnapshotRow = Schema.Struct({
  snapshot_json: Schema.String,
  digest: Schema.String,
  release_state: ReleaseState,
  activated_at: Schema.NullOr(Timestamp),
  activated_by: Schema.NullOr(Identifier),
  retired_at: Schema.NullOr(Timestamp),
  retired_by: Schema.NullOr(Identifier)
})

const DigestRow = Schema.Struct({ digest: Schema.String })

const CurrentRow = Schema.Struct({
  digest: Schema.String,
  release_state: ReleaseState,
  activated_at: Schema.NullOr(Timestamp),
  activated_by: Schema.NullOr(Identifier),
  retired_at: Schema.NullOr(Timestamp),
  retired_by: Schema.NullOr(Identifier),
  unchanged: Schema.Literal(0, 1)
})

const isCurrentRow = Schema.is(CurrentRow)

/** A row's release state and its activation and retirement metadata. */
type StateColumns = Pick<
  typeof SnapshotRow.Type,
  "release_state" | "activated_at" | "activated_by" | "retired_at" | "retired_by"
>

// Whether a row's release state and metadata are a snapshot's.
const sameState = (snapshot: PolicySnapshot, row: { readonly [K in keyof StateColumns]?: unknown }) =>
  snapshot.release_state === row.release_state && (snapshot.activated_at ?? null) === row.activated_at &&
  (snapshot.activated_by ?? null) === row.activated_by && (snapshot.retired_at ?? null) === row.retired_at &&
  (snapshot.retired_by ?? null) === row.retired_by

const StateRow = Schema.Struct({ release_state: ReleaseState })

const BindingRow = Schema.Struct({
  tenant: Schema.String,
  scope_kind: Schema.Literal("global", "role", "resource"),
  scope_value: Schema.String,
  policy_id: Schema.String,
  version: Schema.String
})

// The most roles a binding query names as parameters (SQLite takes 32766 in one statement, older builds 999).
const ROLES_IN_STATEMENT = 500

const utf8 = new TextEncoder()

const decodeSnapshotJson = Schema.decodeUnknown(Schema.parseJson(PolicySnapshot))
const encodeSnapshot = Schema.encode(PolicySnapshot)

/** The canonical JSON of the encoded staged form: what is stored, and what a read must give back byte for byte. */
const stagedJson = (snapshot: PolicySnapshot) => {
  const { activated_at: _at, activated_by: _by, retired_at: _retiredAt, retired_by: _retiredBy, ...content } = snapshot
  return encodeSnapshot(PolicySnapshot.make({ ...content, release_state: "staged" })).pipe(
    Effect.flatMap(Canonical.stringify),
    Effect.orDie
  )
}

const scopeColumns = (scope: BindingScope) =>
  scope._tag === "global"
    ? { scope_kind: "global", scope_value: "" }
    : scope._tag === "role"
    ? { scope_kind: "role", scope_value: scope.role }
    : { scope_kind: "resource", scope_value: scope.resource }

/** A broken database is a defect: the port has no error for it. */
const orDieSql = <A, E, R>(effect: Effect.Effect<A, E | SqlError, R>): Effect.Effect<A, E, R> =>
  Effect.catchIf(effect, (error): error is SqlError => error instanceof SqlError, Effect.die)

/** A PolicySnapshotStore over the SqlClient in context, checking digests with the Digest in context. */
export const make: Effect.Effect<PolicySnapshotStore.Service, never, SqlClient.SqlClient | Digest.Digest> = Effect.gen(
  function*() {
    const sql = yield* SqlClient.SqlClient
    const transaction = writeTransaction(sql)
    // A snapshot row with its retirement, if any: the release state a read sees is derived from both.
    const fromSnapshots = sql.literal(
      "policy_snapshots s LEFT JOIN policy_retirements r ON r.policy_id = s.policy_id AND r.version = s.version"
    )
    const stateColumns = sql.literal(
      "CASE WHEN r.policy_id IS NULL THEN s.release_state ELSE 'retired' END AS release_state, " +
        "s.activated_at, s.activated_by, r.retired_at, r.retired_by"
    )
    const context = yield* Effect.context<Digest.Digest>()

    const findSnapshot = SqlSchema.findOne({
      Request: Key,
      Result: SnapshotRow,
      execute: ({ policy_id, version }) =>
        sql`SELECT snapshot_json, digest, ${stateColumns} FROM ${fromSnapshots}
          WHERE s.policy_id = ${policy_id} AND s.version = ${version}`
    })
    // Checked with `Schema.is`, not decoded: this read runs once per governed call. The text is compared as bytes: a
    // string parameter is transcoded to UTF-8 on every call (about 50 µs for a 64 KB snapshot), bytes are bound as
    // they are; a value stored as a blob is no text, however equal its bytes. A database in another encoding never
    // compares equal, and is read back and checked every time.
    const findCurrent = (policy_id: string, version: string, bytes: Uint8Array) =>
      Effect.map(
        sql`SELECT digest, ${stateColumns},
          typeof(snapshot_json) = 'text' AND CAST(snapshot_json AS BLOB) = ${bytes} AS unchanged
          FROM ${fromSnapshots} WHERE s.policy_id = ${policy_id} AND s.version = ${version}`,
        (rows) => rows[0]
      )
    const findDigest = SqlSchema.findOne({
      Request: Key,
      Result: DigestRow,
      execute: ({ policy_id, version }) =>
        sql`SELECT digest FROM policy_snapshots WHERE policy_id = ${policy_id} AND version = ${version}`
    })
    const findState = SqlSchema.findOne({
      Request: Key,
      Result: StateRow,
      execute: ({ policy_id, version }) =>
        sql`SELECT ${stateColumns} FROM ${fromSnapshots} WHERE s.policy_id = ${policy_id} AND s.version = ${version}`
    })
    // The bindings that may apply to a call: its tenant's and every tenant's (''), of its scopes.
    const findBindings = SqlSchema.findAll({
      Request: Schema.Struct({
        tenant: Schema.optional(Schema.String),
        roles: Schema.Array(Schema.String),
        resource: Schema.optional(Schema.String)
      }),
      Result: BindingRow,
      execute: ({ resource, roles, tenant }) =>
        sql`SELECT tenant, scope_kind, scope_value, policy_id, version FROM policy_bindings
        WHERE tenant IN ${sql.in(tenant === undefined ? [""] : ["", tenant])} AND ${
          sql.or([
            sql`scope_kind = 'global'`,
            // More roles than a statement takes parameters for: every role binding, the call's picked out by `resolve`.
            ...(roles.length === 0 ? [] : roles.length > ROLES_IN_STATEMENT ?
              [sql`scope_kind = 'role'`] :
              [sql`(scope_kind = 'role' AND scope_value IN ${sql.in(roles)})`]),
            ...(resource === undefined ? [] : [sql`(scope_kind = 'resource' AND scope_value = ${resource})`])
          ])
        }`
    })

    const notFound = (policy_id: string, version: string) =>
      new PolicyNotFoundError({ detail: `no policy ${policyLabel(policy_id, version)} is stored` })
    const corrupt = (policy_id: string, version: string, why: string) =>
      new PolicyNotFoundError({
        detail: `stored policy ${policyLabel(policy_id, version)} is refused: ${why}`,
        refused: true
      })

    // Snapshot texts already decoded, found canonical and recomputed to their digest: immutable, so checked once.
    const verified = new Map<string, PolicySnapshot>()

    const verify = (policy_id: string, version: string, digest: string, snapshot_json: string) =>
      Effect.gen(function*() {
        const staged = yield* decodeSnapshotJson(snapshot_json).pipe(
          Effect.map(immutable),
          Effect.mapError(() => corrupt(policy_id, version, "its snapshot does not decode"))
        )
        if ((yield* stagedJson(staged)) !== snapshot_json) {
          return yield* corrupt(policy_id, version, "its snapshot is not in canonical form")
        }
        if (staged.policy_id !== policy_id || staged.version !== version) {
          return yield* corrupt(policy_id, version, `its snapshot is ${policyLabel(staged.policy_id, staged.version)}`)
        }
        const recomputed = yield* recomputeDigest(staged).pipe(Effect.provide(context), Effect.orDie)
        if (recomputed !== staged.digest || recomputed !== digest) {
          return yield* corrupt(policy_id, version, `its digest does not recompute (${recomputed})`)
        }
        verified.set(snapshot_json, staged)
        return staged
      })

    // The last snapshot a read built for each policy version, with the verified text (and its UTF-8 bytes) and the
    // staged form it came from.
    const served = new Map<
      string,
      {
        readonly json: string
        readonly bytes: Uint8Array
        readonly staged: PolicySnapshot
        readonly snapshot: PolicySnapshot
      }
    >()

    const serve = (policy: string, json: string, staged: PolicySnapshot, row: StateColumns) => {
      const last = served.get(policy)
      const same = last !== undefined && last.json === json
      const bytes = same ? last.bytes : utf8.encode(json)
      const snapshot = same && sameState(last.snapshot, row)
        ? last.snapshot
        : immutable(
          new PolicySnapshot({
            ...staged,
            release_state: row.release_state,
            ...(row.activated_at === null ? {} : { activated_at: row.activated_at }),
            ...(row.activated_by === null ? {} : { activated_by: row.activated_by }),
            ...(row.retired_at === null ? {} : { retired_at: row.retired_at }),
            ...(row.retired_by === null ? {} : { retired_by: row.retired_by })
          }, { disableValidation: true })
        )
      served.set(policy, { json, bytes, staged, snapshot })
      return snapshot
    }

    const read = (policy_id: string, version: string) =>
      Effect.gen(function*() {
        const policy = pairKey(policy_id, version)
        const last = served.get(policy)
        // A text once verified is compared in the database, not read back; a changed text or digest is read again,
        // verified again, and refused.
        if (last !== undefined) {
          const row = yield* findCurrent(policy_id, version, last.bytes)
          if (row === undefined) return yield* notFound(policy_id, version)
          const unchanged = row.unchanged === 1 && row.digest === last.snapshot.digest
          // A row equal to what was last served is as valid as that was: only a changed one is decoded.
          if (unchanged && sameState(last.snapshot, row)) return last.snapshot
          if (!isCurrentRow(row)) return yield* corrupt(policy_id, version, "its row does not decode")
          if (unchanged) return serve(policy, last.json, last.staged, row)
        }
        const row = yield* findSnapshot({ policy_id, version }).pipe(
          Effect.catchTag("ParseError", () => Effect.fail(corrupt(policy_id, version, "its row does not decode")))
        )
        if (Option.isNone(row)) return yield* notFound(policy_id, version)
        const { digest, snapshot_json } = row.value
        const cached = verified.get(snapshot_json)
        const staged = cached?.digest === digest && cached.policy_id === policy_id && cached.version === version
          ? cached
          : yield* verify(policy_id, version, digest, snapshot_json)
        return serve(policy, snapshot_json, staged, row.value)
      })

    const put = Effect.fn("SqlPolicySnapshotStore.put")(
      function*(snapshot: PolicySnapshot) {
        const { digest, policy_id, version } = snapshot
        yield* Effect.provide(checkDigest(snapshot), context)
        const json = yield* stagedJson(snapshot)
        const stored = yield* transaction(() =>
          Effect.gen(function*() {
            yield* sql`INSERT INTO policy_snapshots (policy_id, version, digest, snapshot_json, release_state)
            VALUES (${policy_id}, ${version}, ${digest}, ${json}, 'staged')
            ON CONFLICT (policy_id, version) DO NOTHING`
            return yield* findDigest({ policy_id, version })
          })
        )
        if (Option.isNone(stored)) return yield* Effect.dieMessage(`policy ${policyLabel(policy_id, version)} vanished`)
        if (stored.value.digest === digest) return
        return yield* new PolicyConflictError({
          policy_id,
          version,
          stored_digest: stored.value.digest,
          offered_digest: digest
        })
      },
      Effect.catchTag("ParseError", (error) => Effect.die(error)),
      orDieSql
    )

    const activate = Effect.fn("SqlPolicySnapshotStore.activate")(
      function*(policy_id: string, version: string, by: string, at: Timestamp) {
        // As PolicySnapshot.make does in the memory store: an invalid activator or time is a defect, not a stored value.
        yield* Schema.validate(Identifier)(by).pipe(Effect.orDie)
        yield* Schema.validate(Timestamp)(at).pipe(Effect.orDie)
        yield* Effect.flatMap(read(policy_id, version), activatable)
        return yield* transaction(() =>
          Effect.gen(function*() {
            // Write first, so the transaction takes the write lock before it reads.
            yield* sql`UPDATE policy_snapshots SET release_state = 'active', activated_by = ${by}, activated_at = ${at}
            WHERE policy_id = ${policy_id} AND version = ${version} AND release_state = 'staged'`
            const snapshot = yield* read(policy_id, version)
            return snapshot.release_state === "active" ? snapshot : yield* notActive(snapshot)
          })
        )
      },
      orDieSql
    )

    const retire = Effect.fn("SqlPolicySnapshotStore.retire")(
      function*(policy_id: string, version: string, by: string, at: Timestamp) {
        yield* Schema.validate(Identifier)(by).pipe(Effect.orDie)
        yield* Schema.validate(Timestamp)(at).pipe(Effect.orDie)
        return yield* transaction(() =>
          Effect.gen(function*() {
            // Write first (only an active snapshot is retired, once), then read why nothing was written.
            yield* sql`INSERT INTO policy_retirements (policy_id, version, retired_at, retired_by)
            SELECT policy_id, version, ${at}, ${by} FROM policy_snapshots
            WHERE policy_id = ${policy_id} AND version = ${version} AND release_state = 'active'
            ON CONFLICT (policy_id, version) DO NOTHING`
            yield* sql`DELETE FROM policy_bindings WHERE policy_id = ${policy_id} AND version = ${version}`
            const snapshot = yield* read(policy_id, version)
            return snapshot.release_state === "retired" ? snapshot : yield* notActive(snapshot)
          })
        )
      },
      orDieSql
    )

    const bind = Effect.fn("SqlPolicySnapshotStore.bind")(
      function*(scope: BindingScope, policy_id: string, version: string) {
        yield* checkScope(scope)
        const { scope_kind, scope_value } = scopeColumns(scope)
        const tenant = scope.tenant ?? ""
        yield* transaction(() =>
          Effect.gen(function*() {
            // Write first (only an active snapshot is bound), then read why nothing was written.
            yield* sql`INSERT INTO policy_bindings (tenant, scope_kind, scope_value, policy_id, version)
            SELECT ${tenant}, ${scope_kind}, ${scope_value}, policy_id, version FROM policy_snapshots
            WHERE policy_id = ${policy_id} AND version = ${version} AND release_state = 'active'
              AND NOT EXISTS (SELECT 1 FROM policy_retirements r WHERE r.policy_id = ${policy_id} AND r.version = ${version})
            ON CONFLICT (tenant, scope_kind, scope_value) DO UPDATE SET policy_id = excluded.policy_id, version = excluded.version`
            const state = yield* findState({ policy_id, version }).pipe(
              Effect.catchTag("ParseError", (error) => Effect.die(error))
            )
            if (Option.isNone(state)) return yield* notFound(policy_id, version)
            if (state.value.release_state !== "active") {
              return yield* notActive({ policy_id, version, release_state: state.value.release_state })
            }
          })
        )
      },
      orDieSql
    )

    const resolve = Effect.fn("SqlPolicySnapshotStore.resolve")(
      function*(target: BindingTarget) {
        const held = new Set(target.roles)
        const rows = yield* findBindings({ ...target, roles: [...held] }).pipe(
          Effect.catchTag("ParseError", Effect.die)
        )
        const candidates = selectBindings(
          rows.filter((row) => row.scope_kind !== "role" || held.has(row.scope_value)).map((row) => ({
            kind: row.scope_kind,
            policy_id: row.policy_id,
            version: row.version,
            ...(row.tenant === "" ? {} : { tenant: row.tenant })
          })),
          target
        )
        const bound = candidatesOf(candidates)
        if (bound.length > 1) return yield* new AmbiguousPolicyError({ candidates: bound })
        if (candidates.length > 0) return yield* read(candidates[0]!.policy_id, candidates[0]!.version)
        return yield* new PolicyNotFoundError({ detail: "no policy is bound for this call" })
      },
      orDieSql
    )

    const get = Effect.fn("SqlPolicySnapshotStore.get")(
      (policy_id: string, version: string) => read(policy_id, version),
      orDieSql
    )

    return { durable: true, put, activate, retire, bind, resolve, get }
  }
)

/** The PolicySnapshotStore over SQL (needs a migrated SqlClient, e.g. `Sqlite.layer`, and a Digest). */
export const layer: Layer.Layer<PolicySnapshotStore, never, SqlClient.SqlClient | Digest.Digest> = Layer.effect(
  PolicySnapshotStore,
  make
)
