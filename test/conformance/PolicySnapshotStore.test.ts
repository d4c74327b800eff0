import { Migrator, SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Either, Exit, Layer, Tracer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlPolicySnapshotStore from "../../adapters/sql/SqlPolicySnapshotStore.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import type { BindingScope } from "../../core/policy/PolicySnapshotStore.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { root } from "../fixtures/sources.ts"
import { sqliteLayer, tempDir } from "../fixtures/sqlite.ts"

const migrations = path.join(root, "adapters/sql/internal/migrations")

/** writ's migrations numbered before `number`, by name, as the Migrator loads them. */
const migrationsBefore = (number: string) =>
  Effect.promise(() =>
    Promise.all(
      fs.readdirSync(migrations).filter((file) => /^\d{4}_/.test(file) && file < number).map(async (file) =>
        [
          path.basename(file, ".ts"),
          ((await import(path.join(migrations, file))) as {
            default: Effect.Effect<void, unknown, SqlClient.SqlClient>
          })
            .default
        ] as const
      )
    )
  )

const sqlOn = (database: Layer.Layer<SqlClient.SqlClient>) =>
  SqlPolicySnapshotStore.layer.pipe(Layer.provideMerge(Layer.merge(database, NodeDigest.layer)))

const layers = [
  ["memory", MemoryPolicySnapshotStore.layer.pipe(Layer.provide(NodeDigest.layer))],
  ["sql", sqlOn(sqliteLayer())]
] as const

const compile = (declaration: unknown) =>
  PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(declaration)))
    .pipe(Effect.provide(NodeDigest.layer), Effect.orDie)

const snapshot = (policy_id: string, version: string, allow = "*") =>
  compile({ policy_id, version, allow: { [allow]: ["*"] } })

/** A snapshot with several rule kinds, optional fields and provenance: everything a store must keep. */
const rich = compile({
  policy_id: "rich",
  version: "2026.1",
  principal_scope: ["team-*"],
  mode: "safe",
  approver_class: "maintainer",
  rules: [
    { kind: "filesystem", rule_id: "fs", effect: "allow", roots: ["/srv/*"], modes: ["read", "write"] },
    { kind: "expiry", rule_id: "window", effect: "allow", not_before: "2026-01-01T00:00:00.000000Z" },
    {
      kind: "mcp",
      rule_id: "mcp",
      effect: "deny",
      server_patterns: ["évil-*"],
      tool_patterns: [],
      resource_patterns: []
    }
  ],
  provenance: { source: "conformance", author: "ops" }
})

const at = Time.fromMicros(1_800_000_000_000_000)

/** Whether a value and everything in it is frozen. */
const deepFrozen = (value: unknown): boolean =>
  typeof value !== "object" || value === null ||
  (Object.isFrozen(value) && Object.values(value).every(deepFrozen))

for (const [name, layer] of layers) {
  describe(`PolicySnapshotStore conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, PolicySnapshotStore>) =>
      Effect.provide(effect, Layer.fresh(layer))

    it.effect("only the SQL store claims durability", () =>
      provided(Effect.gen(function*() {
        assert.strictEqual((yield* PolicySnapshotStore).durable, name === "sql")
      })))

    it.effect("snapshots are immutable values: what a reader gets cannot be edited, and what put was given is not kept", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const compiled = yield* rich
        // A snapshot built by hand shares nothing frozen: editing it after put must not reach the store.
        const offered = PolicySnapshot.PolicySnapshot.make({
          ...compiled,
          compiled_rules: compiled.compiled_rules.map((rule) => ({ ...rule })),
          principal_scope: [...compiled.principal_scope]
        })
        yield* store.put(offered)
        ;(offered.compiled_rules[0] as { rule_id: string }).rule_id = "tampered"
        ;(offered.principal_scope as unknown as Array<string>)[0] = "*"
        const staged = yield* store.get("rich", "2026.1")
        const active = yield* store.activate("rich", "2026.1", "ops", at)
        yield* store.bind({ _tag: "global" }, "rich", "2026.1")
        const resolved = yield* store.resolve({ roles: [] })
        for (const snapshot of [staged, active, resolved, yield* store.get("rich", "2026.1")]) {
          assert.isTrue(deepFrozen(snapshot))
          assert.throws(() => {
            ;(snapshot.compiled_rules[0] as { effect: string }).effect = "deny"
          }, TypeError)
          assert.throws(() => (snapshot.compiled_rules as Array<unknown>).pop(), TypeError)
          assert.throws(() => {
            ;(snapshot as { digest: string }).digest = "0".repeat(64)
          }, TypeError)
        }
        const again = yield* store.get("rich", "2026.1")
        assert.deepStrictEqual(again.compiled_rules, compiled.compiled_rules)
        assert.deepStrictEqual(again.principal_scope, compiled.principal_scope)
        assert.strictEqual(
          yield* Effect.provide(PolicySnapshot.recomputeDigest(again), NodeDigest.layer),
          compiled.digest
        )
      })))

    it.effect("put is a no-op for the same digest and a conflict for another", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const a = yield* snapshot("p", "1")
        yield* store.put(a)
        yield* store.put(a)
        const conflict = yield* Effect.flip(store.put(yield* snapshot("p", "1", "notes.*")))
        assert.strictEqual(conflict._tag, "PolicyConflictError")
        assert.strictEqual((yield* store.get("p", "1")).digest, a.digest)
      })))

    it.effect("activation is the only staged -> active step and keeps the executable content", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const a = yield* snapshot("p", "1")
        yield* store.put(a)
        assert.strictEqual((yield* store.get("p", "1")).release_state, "staged")
        const bindStaged = yield* Effect.flip(store.bind({ _tag: "global" }, "p", "1"))
        assert.strictEqual(bindStaged._tag, "PolicyNotFoundError")
        const active = yield* store.activate("p", "1", "ops", at)
        assert.deepStrictEqual([active.release_state, active.activated_by, active.digest], ["active", "ops", a.digest])
        assert.deepStrictEqual(active.compiled_rules, a.compiled_rules)
        yield* store.put(a)
        assert.strictEqual((yield* store.get("p", "1")).release_state, "active")
        assert.strictEqual((yield* Effect.flip(store.activate("p", "9", "ops", at)))._tag, "PolicyNotFoundError")
      })))

    it.effect("retiring is the only step after activation: final, unbound everywhere, readable still", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const a = yield* snapshot("p", "1")
        const b = yield* snapshot("p", "2", "notes.*")
        yield* store.put(a)
        yield* store.put(b)
        const retireStaged = yield* Effect.flip(store.retire("p", "1", "ops", at))
        assert.match(retireStaged.message, /^policy p@1 is staged, not active$/)
        yield* store.activate("p", "1", "ops", at)
        yield* store.activate("p", "2", "ops", at)
        yield* store.bind({ _tag: "global" }, "p", "1")
        yield* store.bind({ _tag: "role", role: "dev" }, "p", "1")
        yield* store.bind({ _tag: "resource", resource: "repo" }, "p", "2")
        const later = Time.fromMicros(1_800_000_000_000_001)
        const retired = yield* store.retire("p", "1", "auditor", later)
        assert.deepStrictEqual(
          [retired.release_state, retired.retired_by, retired.retired_at, retired.activated_by, retired.digest],
          ["retired", "auditor", later, "ops", a.digest]
        )
        assert.deepStrictEqual(retired.compiled_rules, a.compiled_rules)
        // Final: again is a no-op keeping the first retirement, and no activation or binding brings it back.
        const again = yield* store.retire("p", "1", "someone-else", at)
        assert.deepStrictEqual([again.retired_by, again.retired_at], ["auditor", later])
        const reactivated = yield* Effect.flip(store.activate("p", "1", "ops", at))
        assert.match(reactivated.message, /^policy p@1 is retired: it is never active again$/)
        const rebound = yield* Effect.flip(store.bind({ _tag: "global" }, "p", "1"))
        assert.match(rebound.message, /^policy p@1 is retired/)
        // Every scope it was bound to resolves to nothing now; another version's binding is untouched.
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: ["dev"] })))._tag, "PolicyNotFoundError")
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: [] })))._tag, "PolicyNotFoundError")
        assert.strictEqual((yield* store.resolve({ roles: ["dev"], resource: "repo" })).version, "2")
        // Readable by version, so what it governed still certifies; put again is still a no-op.
        yield* store.put(a)
        const read = yield* store.get("p", "1")
        assert.deepStrictEqual([read.release_state, read.digest], ["retired", a.digest])
        assert.isTrue(deepFrozen(read))
        assert.strictEqual((yield* Effect.flip(store.retire("p", "9", "ops", at)))._tag, "PolicyNotFoundError")
      })))

    it.effect("a stored snapshot with an origin rule in a soft gate decodes but is never activated", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const hard = yield* compile({
          policy_id: "origins",
          version: "1",
          approver_class: "maintainer",
          rules: [
            { rule_id: "notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
            { rule_id: "users-only", kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER"] }
          ],
          gates: [{ gate_id: "review", level: "hard", order: 0 }]
        })
        const gate_bindings = hard.gate_bindings.map((gate) => ({ ...gate, level: "soft" as const }))
        const digest = yield* PolicySnapshot.recomputeDigest({ ...hard, gate_bindings }).pipe(
          Effect.provide(NodeDigest.layer),
          Effect.orDie
        )
        yield* store.put(PolicySnapshot.PolicySnapshot.make({ ...hard, gate_bindings, digest }))
        const refused = yield* Effect.flip(store.activate("origins", "1", "ops", at))
        assert.strictEqual(refused._tag, "PolicyValidationError")
        assert.match(
          refused.message,
          /^\$\.compiled_rules\.\d+: origin rule "users-only" is bound to soft gate "review"/
        )
        const stored = yield* store.get("origins", "1")
        assert.deepStrictEqual([stored.release_state, stored.digest], ["staged", digest])
        assert.strictEqual(
          (yield* Effect.flip(store.bind({ _tag: "global" }, "origins", "1")))._tag,
          "PolicyNotFoundError"
        )
      })))

    it.effect("bindings: resource beats role beats global; a tie is ambiguous; none is not found", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        for (const id of ["global", "dev", "ops", "repo"]) {
          yield* store.put(yield* snapshot(id, "1"))
          yield* store.activate(id, "1", "ops", at)
        }
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: [] })))._tag, "PolicyNotFoundError")
        yield* store.bind({ _tag: "global" }, "global", "1")
        yield* store.bind({ _tag: "role", role: "dev" }, "dev", "1")
        yield* store.bind({ _tag: "role", role: "ops" }, "ops", "1")
        yield* store.bind({ _tag: "resource", resource: "repo-1" }, "repo", "1")
        assert.strictEqual((yield* store.resolve({ roles: [] })).policy_id, "global")
        assert.strictEqual((yield* store.resolve({ roles: ["dev"] })).policy_id, "dev")
        assert.strictEqual((yield* store.resolve({ roles: ["dev"], resource: "repo-1" })).policy_id, "repo")
        const tie = yield* Effect.flip(store.resolve({ roles: ["dev", "ops"] }))
        assert.isTrue(tie._tag === "AmbiguousPolicyError" && tie.candidates.join() === "dev@1,ops@1")
      })))

    it.effect("a tenant's binding beats one for every tenant in its tier, and never applies to another tenant", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        for (const id of ["shared", "t1-global", "t1-dev", "t2-repo"]) {
          yield* store.put(yield* snapshot(id, "1"))
          yield* store.activate(id, "1", "ops", at)
        }
        yield* store.bind({ _tag: "global" }, "shared", "1")
        yield* store.bind({ _tag: "global", tenant: "t1" }, "t1-global", "1")
        yield* store.bind({ _tag: "role", role: "dev", tenant: "t1" }, "t1-dev", "1")
        yield* store.bind({ _tag: "resource", resource: "repo", tenant: "t2" }, "t2-repo", "1")
        const resolved = (target: { tenant?: string; roles: Array<string>; resource?: string }) =>
          Effect.map(store.resolve(target), (found) => found.policy_id)
        assert.strictEqual(yield* resolved({ roles: [] }), "shared")
        assert.strictEqual(yield* resolved({ tenant: "t1", roles: [] }), "t1-global")
        assert.strictEqual(yield* resolved({ tenant: "t1", roles: ["dev"] }), "t1-dev")
        // Another tenant's bindings never apply, whatever the call's roles and resource.
        assert.strictEqual(yield* resolved({ tenant: "t2", roles: ["dev"] }), "shared")
        assert.strictEqual(yield* resolved({ tenant: "t1", roles: ["dev"], resource: "repo" }), "t1-dev")
        assert.strictEqual(yield* resolved({ tenant: "t2", roles: [], resource: "repo" }), "t2-repo")
        assert.strictEqual(yield* resolved({ roles: ["dev"], resource: "repo" }), "shared")
        // A tenant's binding is its own scope: binding every tenant's global again replaces only that one.
        yield* store.bind({ _tag: "global" }, "t1-dev", "1")
        assert.deepStrictEqual(
          [yield* resolved({ roles: [] }), yield* resolved({ tenant: "t1", roles: [] })],
          ["t1-dev", "t1-global"]
        )
        yield* store.retire("t1-global", "1", "ops", at)
        assert.strictEqual(yield* resolved({ tenant: "t1", roles: [] }), "t1-dev")
      })))

    it.effect("a scope that is not a BindingScope is a defect and binds nothing: an empty tenant is never every tenant", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "1"))
        yield* store.activate("p", "1", "ops", at)
        const refused: ReadonlyArray<BindingScope> = [
          { _tag: "global", tenant: "" },
          { _tag: "global", tenant: " t1" },
          { _tag: "role", role: "" },
          { _tag: "role", role: "x".repeat(1_000_000) },
          { _tag: "resource", resource: "repo", tenant: "t".repeat(201) },
          { _tag: "everything" } as unknown as BindingScope
        ]
        for (const scope of refused) {
          const exit = yield* Effect.exit(store.bind(scope, "p", "1"))
          assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause), JSON.stringify(scope).slice(0, 80))
        }
        for (const tenant of [undefined, "t1", "t2"]) {
          const target = { roles: ["", "x".repeat(1_000_000)], resource: "repo", ...(tenant ? { tenant } : {}) }
          assert.strictEqual((yield* Effect.flip(store.resolve(target)))._tag, "PolicyNotFoundError")
        }
      })))

    it.effect("names and tenants with ':', NUL, '*', '%' or '@' match only themselves", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        for (const id of ["star", "nul", "colon"]) {
          yield* store.put(yield* snapshot(id, "1"))
          yield* store.activate(id, "1", "ops", at)
        }
        yield* store.bind({ _tag: "global", tenant: "*" }, "star", "1")
        yield* store.bind({ _tag: "role", role: "a\u0000b", tenant: "t\u0000" }, "nul", "1")
        yield* store.bind({ _tag: "resource", resource: "repo:1", tenant: "%" }, "colon", "1")
        const resolved = (target: { tenant?: string; roles: Array<string>; resource?: string }) =>
          Effect.match(store.resolve(target), {
            onFailure: (error) => error._tag,
            onSuccess: (found) => found.policy_id
          })
        assert.deepStrictEqual(
          [
            yield* resolved({ tenant: "*", roles: [] }),
            yield* resolved({ tenant: "t1", roles: [] }),
            yield* resolved({ roles: [] }),
            yield* resolved({ tenant: "t\u0000", roles: ["a\u0000b"] }),
            yield* resolved({ tenant: "t", roles: ["a\u0000b"] }),
            yield* resolved({ tenant: "t\u0000", roles: ["a"] }),
            yield* resolved({ tenant: "%", roles: [], resource: "repo:1" }),
            yield* resolved({ tenant: "t1", roles: [], resource: "repo:1" }),
            yield* resolved({ tenant: "%", roles: [], resource: "repo" })
          ],
          [
            "star",
            "PolicyNotFoundError",
            "PolicyNotFoundError",
            "nul",
            "PolicyNotFoundError",
            "PolicyNotFoundError",
            "colon",
            "PolicyNotFoundError",
            "PolicyNotFoundError"
          ]
        )
      })))

    it.effect("a call holding more roles than a statement takes parameters for resolves as one holding few", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        for (const id of ["dev", "ops"]) {
          yield* store.put(yield* snapshot(id, "1"))
          yield* store.activate(id, "1", "ops", at)
        }
        yield* store.bind({ _tag: "role", role: "dev" }, "dev", "1")
        yield* store.bind({ _tag: "role", role: "ops", tenant: "t1" }, "ops", "1")
        const many = Array.from({ length: 40_000 }, (_, i) => `role-${i}`)
        assert.strictEqual((yield* store.resolve({ roles: [...many, "dev"] })).policy_id, "dev")
        assert.strictEqual((yield* store.resolve({ tenant: "t1", roles: ["dev", ...many, "ops"] })).policy_id, "ops")
        assert.strictEqual((yield* store.resolve({ tenant: "t2", roles: [...many, "ops", "dev"] })).policy_id, "dev")
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: many })))._tag, "PolicyNotFoundError")
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: [...many, "ops"] })))._tag, "PolicyNotFoundError")
      })))

    it.effect("historical versions stay readable", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "1"))
        yield* store.put(yield* snapshot("p", "2", "notes.*"))
        assert.notStrictEqual((yield* store.get("p", "1")).digest, (yield* store.get("p", "2")).digest)
      })))

    it.effect("a stored snapshot reads back field for field and its digest recomputes, staged and active", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const a = yield* rich
        yield* store.put(a)
        const staged = yield* store.get("rich", "2026.1")
        assert.deepStrictEqual(staged, a)
        assert.strictEqual(
          yield* PolicySnapshot.recomputeDigest(staged).pipe(Effect.provide(NodeDigest.layer)),
          a.digest
        )
        yield* store.activate("rich", "2026.1", "ops", at)
        const active = yield* store.get("rich", "2026.1")
        assert.deepStrictEqual(
          active,
          PolicySnapshot.PolicySnapshot.make({ ...a, release_state: "active", activated_by: "ops", activated_at: at })
        )
        assert.deepStrictEqual(yield* store.activate("rich", "2026.1", "someone-else", Time.fromMicros(0)), active)
      })))

    it.effect("put stores a snapshot staged, whatever activation it carries", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const a = yield* snapshot("p", "1")
        yield* store.put(
          PolicySnapshot.PolicySnapshot.make({
            ...a,
            release_state: "active",
            activated_by: "mallory",
            activated_at: at
          })
        )
        const stored = yield* store.get("p", "1")
        assert.deepStrictEqual([stored.release_state, stored.activated_by, stored.activated_at], [
          "staged",
          undefined,
          undefined
        ])
        assert.strictEqual((yield* Effect.flip(store.bind({ _tag: "global" }, "p", "1")))._tag, "PolicyNotFoundError")
      })))

    it.effect("an operation reads the store when it runs, not when it is built", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const read = store.get("p", "1")
        const activation = store.activate("p", "1", "ops", at)
        const binding = store.bind({ _tag: "global" }, "p", "1")
        const resolution = store.resolve({ roles: [] })
        yield* store.put(yield* snapshot("p", "1"))
        assert.strictEqual((yield* read).release_state, "staged")
        yield* activation
        yield* binding
        assert.strictEqual((yield* resolution).activated_by, "ops")
      })))

    it.effect("a scope's binding is replaced; several roles bound to one snapshot are not ambiguous", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        for (const version of ["1", "2"]) {
          yield* store.put(yield* snapshot("p", version, version === "1" ? "*" : "notes.*"))
          yield* store.activate("p", version, "ops", at)
        }
        yield* store.bind({ _tag: "global" }, "p", "1")
        yield* store.bind({ _tag: "global" }, "p", "2")
        assert.strictEqual((yield* store.resolve({ roles: [] })).version, "2")
        yield* store.bind({ _tag: "role", role: "dev" }, "p", "1")
        yield* store.bind({ _tag: "role", role: "ops" }, "p", "1")
        assert.strictEqual((yield* store.resolve({ roles: ["dev", "ops", "unbound"] })).version, "1")
        assert.strictEqual((yield* store.resolve({ roles: ["unbound"], resource: "nothing" })).version, "2")
        const unknown = yield* Effect.flip(store.bind({ _tag: "role", role: "dev" }, "p", "9"))
        assert.strictEqual(unknown._tag, "PolicyNotFoundError")
        assert.strictEqual((yield* store.resolve({ roles: ["dev"] })).version, "1")
      })))

    it.effect("identifiers may contain \"@\": (a@b, c) and (a, b@c) are two snapshots, and an ambiguity names both", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("a@b", "c"))
        yield* store.put(yield* snapshot("a", "b@c", "notes.*"))
        const got = yield* store.get("a", "b@c")
        assert.deepStrictEqual([got.policy_id, got.version], ["a", "b@c"])
        yield* store.activate("a@b", "c", "ops", at)
        yield* store.activate("a", "b@c", "ops", at)
        yield* store.bind({ _tag: "role", role: "dev" }, "a@b", "c")
        yield* store.bind({ _tag: "role", role: "ops" }, "a", "b@c")
        const ambiguous = yield* Effect.flip(store.resolve({ roles: ["dev", "ops"] }))
        assert.deepStrictEqual(ambiguous._tag === "AmbiguousPolicyError" && ambiguous.candidates, ["a@b@c", "a@b@c"])
      })))

    it.effect("a snapshot whose digest does not recompute is a defect on put, and nothing is stored", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const honest = yield* snapshot("p", "1")
        const bogus = PolicySnapshot.PolicySnapshot.make({ ...honest, digest: Sha256Hex.make("a".repeat(64)) })
        const exit = yield* Effect.exit(store.put(bogus))
        assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
        assert.strictEqual((yield* Effect.flip(store.get("p", "1")))._tag, "PolicyNotFoundError")
        yield* store.put(honest)
        assert.strictEqual((yield* store.get("p", "1")).digest, honest.digest)
      })))

    it.effect("activate with an invalid time or activator is a defect, even for a snapshot already active", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "1"))
        const dies = (by: string, when: Time.Timestamp) =>
          Effect.map(
            Effect.exit(store.activate("p", "1", by, when)),
            (exit) => Exit.isFailure(exit) && Cause.isDie(exit.cause)
          )
        assert.isTrue(yield* dies("ops", "yesterday" as Time.Timestamp))
        assert.strictEqual((yield* store.get("p", "1")).release_state, "staged")
        yield* store.activate("p", "1", "ops", at)
        assert.isTrue(yield* dies("", at))
        assert.strictEqual((yield* store.get("p", "1")).activated_by, "ops")
      })))
  })
}

describe("PolicySnapshotStore: sql", () => {
  it.scoped("put, activation and bindings survive closing and reopening the database", () =>
    Effect.gen(function*() {
      const database = Sqlite.layer({ filename: path.join(yield* tempDir, "writ.db") })
      const a = yield* rich
      yield* Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(a)
        yield* store.activate("rich", "2026.1", "ops", at)
        yield* store.bind({ _tag: "role", role: "dev" }, "rich", "2026.1")
      }).pipe(Effect.provide(sqlOn(database)))
      yield* Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const resolved = yield* store.resolve({ roles: ["dev"] })
        assert.deepStrictEqual(
          resolved,
          PolicySnapshot.PolicySnapshot.make({ ...a, release_state: "active", activated_by: "ops", activated_at: at })
        )
        assert.strictEqual((yield* Effect.flip(store.resolve({ roles: [] })))._tag, "PolicyNotFoundError")
        assert.strictEqual(
          (yield* Effect.flip(store.put(yield* snapshot("rich", "2026.1"))))._tag,
          "PolicyConflictError"
        )
      }).pipe(Effect.provide(sqlOn(database)))
    }))

  it.scoped("a retirement survives reopening, and the database refuses to undo or change it", () =>
    Effect.gen(function*() {
      const database = Sqlite.layer({ filename: path.join(yield* tempDir, "writ.db") })
      yield* Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "1"))
        yield* store.activate("p", "1", "ops", at)
        yield* store.get("p", "1")
        yield* store.retire("p", "1", "auditor", at)
      }).pipe(Effect.provide(sqlOn(database)))
      yield* Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        const sql = yield* SqlClient.SqlClient
        assert.deepStrictEqual(
          [(yield* store.get("p", "1")).release_state, (yield* store.get("p", "1")).retired_by],
          ["retired", "auditor"]
        )
        for (const undo of [sql`DELETE FROM policy_retirements`, sql`UPDATE policy_retirements SET retired_by = 'x'`]) {
          assert.include(String((yield* Effect.flip(undo)).cause), "a policy retirement is final")
        }
        assert.strictEqual((yield* store.get("p", "1")).release_state, "retired")
      }).pipe(Effect.provide(sqlOn(database)))
    }))

  it.scoped("a database bound before bindings had tenants keeps each binding, for every tenant", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const a = yield* snapshot("p", "1")
      yield* Effect.gen(function*() {
        // The schema as it stood before 0011: bindings keyed by scope alone.
        const loader = Migrator.fromRecord(Object.fromEntries(yield* migrationsBefore("0011")))
        yield* Migrator.make({})({ loader })
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO policy_snapshots (policy_id, version, digest, snapshot_json, release_state)
          VALUES ('p', '1', ${a.digest}, '{}', 'active')`
        yield* sql`INSERT INTO policy_bindings (scope_kind, scope_value, policy_id, version) VALUES ('role', 'dev', 'p', '1')`
      }).pipe(Effect.provide(SqliteClient.layer({ filename })))
      const rows = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        return yield* sql`SELECT tenant, scope_kind, scope_value, policy_id, version FROM policy_bindings`
      }).pipe(Effect.provide(Sqlite.layer({ filename })))
      assert.deepStrictEqual(rows, [{
        tenant: "",
        scope_kind: "role",
        scope_value: "dev",
        policy_id: "p",
        version: "1"
      }])
    }))

  it.effect("stored content cannot be rewritten, and a tampered row is refused rather than served", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const sql = yield* SqlClient.SqlClient
      yield* store.put(yield* snapshot("p", "1"))
      yield* store.activate("p", "1", "ops", at)
      yield* store.bind({ _tag: "global" }, "p", "1")
      const tamper = sql`UPDATE policy_snapshots SET snapshot_json = replace(snapshot_json, '"*"', '"x"')`
      assert.include(String((yield* Effect.flip(tamper)).cause), "immutable")
      assert.include(
        String((yield* Effect.flip(sql`UPDATE policy_snapshots SET activated_by = 'eve'`)).cause),
        "immutable"
      )
      assert.strictEqual((yield* store.get("p", "1")).activated_by, "ops")
      yield* sql`DROP TRIGGER policy_snapshots_immutable`
      yield* tamper
      const refused = yield* Effect.flip(store.resolve({ roles: [] }))
      assert.isTrue(refused._tag === "PolicyNotFoundError" && refused.detail.includes("digest does not recompute"))
      assert.isTrue(refused._tag === "PolicyNotFoundError" && refused.refused === true, "tampering, not absence")
      // The ingress does not read a refused binding as "nothing bound": it fails, naming the tampering.
      const ingress = yield* Effect.flip(Ingress.resolve({
        execution_scope: EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid }),
        authenticated_principal: { id: "alice" },
        effect_backend: InProcessBackend.make.ref
      }))
      assert.isTrue(ingress._tag === "PolicyNotFoundError" && ingress.detail.includes("digest does not recompute"))
      yield* sql`UPDATE policy_snapshots SET snapshot_json = replace(snapshot_json, '{', '{ ')`
      const reformatted = yield* Effect.flip(store.get("p", "1"))
      assert.include(reformatted.detail, "canonical")
    }).pipe(Effect.provide(Layer.merge(sqlOn(sqliteLayer()), IdGenerator.layerCrypto))))

  it.effect("a snapshot already served is checked against its row on every read: a changed digest is refused", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const sql = yield* SqlClient.SqlClient
      yield* store.put(yield* snapshot("p", "1"))
      const served = yield* store.activate("p", "1", "ops", at)
      assert.strictEqual(yield* store.get("p", "1"), yield* store.get("p", "1"))
      assert.strictEqual((yield* store.get("p", "1")).digest, served.digest)
      yield* sql`DROP TRIGGER policy_snapshots_immutable`
      yield* sql`UPDATE policy_snapshots SET digest = ${"0".repeat(64)}`
      const refused = yield* Effect.flip(store.get("p", "1"))
      assert.include(refused.detail, "digest does not recompute")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))

  it.effect("a served snapshot's changed activation metadata is decoded again: a valid change served, garbage refused", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const sql = yield* SqlClient.SqlClient
      yield* store.put(yield* snapshot("p", "1"))
      yield* store.activate("p", "1", "ops", at)
      assert.strictEqual((yield* store.get("p", "1")).activated_by, "ops")
      yield* sql`DROP TRIGGER policy_snapshots_immutable`
      yield* sql`UPDATE policy_snapshots SET activated_by = 'audit'`
      assert.strictEqual((yield* store.get("p", "1")).activated_by, "audit")
      yield* sql`UPDATE policy_snapshots SET activated_at = 'yesterday'`
      assert.include((yield* Effect.flip(store.get("p", "1"))).detail, "its row does not decode")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))
})

/** What an effect returns, with the text of each SQL statement it ran (from the `sql.execute` spans). */
const statementsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const inner = yield* Effect.tracer
    const spans: Array<Tracer.Span> = []
    const tracer = Tracer.make({
      span: (...args) => {
        const span = inner.span(...args)
        spans.push(span)
        return span
      },
      context: (f, fiber) => inner.context(f, fiber)
    })
    const result = yield* Effect.withTracer(effect, tracer)
    return [
      result,
      spans.filter((span) => span.name === "sql.execute").map((span) => String(span.attributes.get("db.query.text")))
    ] as const
  })

describe("PolicySnapshotStore: sql, a snapshot served before", () => {
  it.effect("is checked by one statement comparing its stored text, multi-byte text included, not read back", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const a = yield* rich
      yield* store.put(a)
      const served = yield* store.activate("rich", "2026.1", "ops", at)
      const [again, statements] = yield* statementsOf(store.get("rich", "2026.1"))
      assert.strictEqual(again, served)
      assert.strictEqual(statements.length, 1)
      assert.include(statements[0]!, "typeof(snapshot_json) = 'text' AND CAST(snapshot_json AS BLOB) = ?")
      assert.notInclude(statements[0]!, "SELECT snapshot_json")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))

  it.scoped("sees another connection's activation, and refuses the text another connection tampered with", () =>
    Effect.gen(function*() {
      const filename = path.join(yield* tempDir, "writ.db")
      const writer = yield* Layer.build(sqlOn(Sqlite.layer({ filename })))
      const reader = yield* Layer.build(sqlOn(Sqlite.layer({ filename })))
      const onWriter = <A, E>(effect: Effect.Effect<A, E, PolicySnapshotStore | SqlClient.SqlClient>) =>
        Effect.provide(effect, writer)
      const read = Effect.provide(Effect.flatMap(PolicySnapshotStore, (store) => store.get("p", "1")), reader)
      yield* onWriter(Effect.flatMap(PolicySnapshotStore, (store) => Effect.flatMap(snapshot("p", "1"), store.put)))
      assert.strictEqual((yield* read).release_state, "staged")
      assert.strictEqual((yield* read).release_state, "staged")
      yield* onWriter(Effect.flatMap(PolicySnapshotStore, (store) => store.activate("p", "1", "ops", at)))
      const active = yield* read
      assert.deepStrictEqual([active.release_state, active.activated_by, active.activated_at], ["active", "ops", at])
      assert.strictEqual(yield* read, active)
      // A retirement another connection appends is seen by the next read of a snapshot already served, and unbinds it.
      yield* onWriter(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "2", "notes.*"))
        yield* store.activate("p", "2", "ops", at)
        yield* store.bind({ _tag: "global", tenant: "t1" }, "p", "2")
      }))
      const resolved = Effect.provide(
        Effect.flatMap(PolicySnapshotStore, (store) => store.resolve({ tenant: "t1", roles: [] })),
        reader
      )
      assert.strictEqual((yield* resolved).release_state, "active")
      yield* onWriter(Effect.flatMap(PolicySnapshotStore, (store) => store.retire("p", "2", "auditor", at)))
      assert.strictEqual((yield* Effect.flip(resolved))._tag, "PolicyNotFoundError")
      const retired = yield* Effect.provide(Effect.flatMap(PolicySnapshotStore, (store) => store.get("p", "2")), reader)
      assert.deepStrictEqual([retired.release_state, retired.retired_by], ["retired", "auditor"])
      yield* onWriter(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`DROP TRIGGER policy_snapshots_immutable`
        yield* sql`UPDATE policy_snapshots SET snapshot_json = replace(snapshot_json, '"*"', '"x"')`
      }))
      assert.include((yield* Effect.flip(read)).detail, "digest does not recompute")
    }))

  it.effect("is refused when its text is stored again as a blob of the same bytes, as a fresh read refuses it", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const sql = yield* SqlClient.SqlClient
      yield* store.put(yield* rich)
      yield* store.activate("rich", "2026.1", "ops", at)
      yield* sql`DROP TRIGGER policy_snapshots_immutable`
      yield* sql`UPDATE policy_snapshots SET snapshot_json = CAST(snapshot_json AS BLOB)`
      assert.include((yield* Effect.flip(store.get("rich", "2026.1"))).detail, "its row does not decode")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))
})

describe("PolicySnapshotStore: sql, another version's content under a key", () => {
  it.effect("a row holding another version's verified text and digest is refused, by get and by resolve", () =>
    Effect.gen(function*() {
      const store = yield* PolicySnapshotStore
      const sql = yield* SqlClient.SqlClient
      yield* store.put(yield* snapshot("p", "1"))
      yield* store.put(yield* snapshot("p", "2", "notes.*"))
      yield* store.activate("p", "2", "ops", at)
      yield* store.bind({ _tag: "global" }, "p", "2")
      assert.strictEqual((yield* store.get("p", "2")).version, "2")
      yield* sql`DROP TRIGGER policy_snapshots_immutable`
      yield* sql`UPDATE policy_snapshots SET
        snapshot_json = (SELECT snapshot_json FROM policy_snapshots WHERE version = '1'),
        digest = (SELECT digest FROM policy_snapshots WHERE version = '1')
        WHERE policy_id = 'p' AND version = '2'`
      assert.include((yield* Effect.flip(store.get("p", "2"))).detail, "its snapshot is p@1")
      assert.strictEqual((yield* Effect.flip(store.resolve({ roles: [] })))._tag, "PolicyNotFoundError")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))
})
