import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import * as MemoryPolicySnapshotStore from "../../adapters/MemoryPolicySnapshotStore.ts"
import * as NodeDigest from "../../adapters/NodeDigest.ts"
import * as PermissionPolicy from "../../core/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/PolicySnapshotStore.ts"
import * as Time from "../../core/Time.ts"

const layers = [["memory", MemoryPolicySnapshotStore.layer]] as const

const snapshot = (policy_id: string, version: string, allow = "*") =>
  PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode({ policy_id, version, allow: { [allow]: ["*"] } })))
    .pipe(Effect.provide(NodeDigest.layer), Effect.orDie)

const at = Time.fromMicros(1_800_000_000_000_000)

for (const [name, layer] of layers) {
  describe(`PolicySnapshotStore conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, PolicySnapshotStore>) =>
      Effect.provide(effect, Layer.fresh(layer))

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

    it.effect("historical versions stay readable", () =>
      provided(Effect.gen(function*() {
        const store = yield* PolicySnapshotStore
        yield* store.put(yield* snapshot("p", "1"))
        yield* store.put(yield* snapshot("p", "2", "notes.*"))
        assert.notStrictEqual((yield* store.get("p", "1")).digest, (yield* store.get("p", "2")).digest)
      })))
  })
}
