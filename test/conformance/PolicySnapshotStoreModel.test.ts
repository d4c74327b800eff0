/**
 * The SQL PolicySnapshotStore against the in-memory one, its reference: any sequence of put, activate, retire, bind,
 * resolve and get gives the same answer from both, step for step, on a real SQLite file.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Either, Exit, FastCheck as fc, Layer } from "effect"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as SqlPolicySnapshotStore from "../../adapters/sql/SqlPolicySnapshotStore.ts"
import * as Time from "../../core/base/Time.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import type { BindingScope, BindingTarget } from "../../core/policy/PolicySnapshotStore.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { sqliteLayer } from "../fixtures/sqlite.ts"

const memory = MemoryPolicySnapshotStore.layer.pipe(Layer.provide(NodeDigest.layer))
const sql = SqlPolicySnapshotStore.layer.pipe(Layer.provide(Layer.merge(sqliteLayer(), NodeDigest.layer)))

const ids = ["p", "q@1"] as const
const versions = ["1", "2"] as const
// Two contents per version, so a second put may conflict.
const allows = ["*", "notes.*"] as const
const people = ["ops", "auditor"] as const

const scopes: ReadonlyArray<BindingScope> = [
  { _tag: "global" },
  { _tag: "global", tenant: "t1" },
  { _tag: "global", tenant: "*" },
  { _tag: "role", role: "dev" },
  { _tag: "role", role: "dev", tenant: "t1" },
  { _tag: "role", role: "a:b" },
  { _tag: "resource", resource: "repo" },
  { _tag: "resource", resource: "repo", tenant: "t2" }
]

const targets: ReadonlyArray<BindingTarget> = [
  { roles: [] },
  { tenant: "t1", roles: [] },
  { tenant: "t2", roles: ["dev"] },
  { tenant: "*", roles: ["a:b", "dev"] },
  { tenant: "t1", roles: ["dev", "a:b"], resource: "repo" },
  { tenant: "t2", roles: [], resource: "repo" },
  { roles: ["dev", "a:b"], resource: "other" }
]

const pick = <A>(items: ReadonlyArray<A>) => fc.integer({ min: 0, max: items.length - 1 }).map((i) => items[i]!)

const pair = { id: pick(ids), version: pick(versions) }
const step = fc.oneof(
  { weight: 1, arbitrary: fc.record({ op: fc.constant("put" as const), ...pair, allow: pick(allows) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant("activate" as const), ...pair, by: pick(people) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("retire" as const), ...pair, by: pick(people) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant("bind" as const), ...pair, scope: pick(scopes) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant("resolve" as const), target: pick(targets) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("get" as const), ...pair }) }
)
type Step = typeof step extends fc.Arbitrary<infer S> ? S : never

const compile = (policy_id: string, version: string, allow: string) =>
  PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode({ policy_id, version, allow: { [allow]: ["*"] } })))
    .pipe(Effect.provide(NodeDigest.layer), Effect.orDie)

const at = Time.fromMicros(1_800_000_000_000_000)

const shown = (snapshot: PolicySnapshot.PolicySnapshot) =>
  [
    `${snapshot.policy_id}@${snapshot.version}`,
    snapshot.digest.slice(0, 8),
    snapshot.release_state,
    snapshot.activated_by ?? "-",
    snapshot.retired_by ?? "-"
  ].join(" ")

/** Each step's answer from the store in context: what it returned, or its error's tag and message. */
const answers = (steps: ReadonlyArray<Step>) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const out: Array<string> = []
    for (const s of steps) {
      const effect: Effect.Effect<string, { readonly _tag: string; readonly message: string }> = s.op === "put"
        ? Effect.as(Effect.flatMap(compile(s.id, s.version, s.allow), store.put), "put")
        : s.op === "activate"
        ? Effect.map(store.activate(s.id, s.version, s.by, at), shown)
        : s.op === "retire"
        ? Effect.map(store.retire(s.id, s.version, s.by, at), shown)
        : s.op === "bind"
        ? Effect.as(store.bind(s.scope, s.id, s.version), "bound")
        : s.op === "resolve"
        ? Effect.map(store.resolve(s.target), shown)
        : Effect.map(store.get(s.id, s.version), shown)
      const exit = yield* Effect.exit(effect)
      out.push(
        Exit.isSuccess(exit)
          ? exit.value
          : Cause.failureOption(exit.cause).pipe(
            (failure) => failure._tag === "Some" ? `${failure.value._tag}: ${failure.value.message}` : "defect"
          )
      )
    }
    return out
  })

describe("PolicySnapshotStore: the SQL store answers as the in-memory one does", () => {
  it.effect.prop(
    "any sequence of put, activate, retire, bind, resolve and get",
    [fc.array(step, { minLength: 20, maxLength: 60 })],
    ([random]) =>
      Effect.gen(function*() {
        // Most versions are stored first (with the first content), so the random steps mostly meet one.
        const stored = ids.flatMap((id) =>
          versions.map((version) => ({ op: "put" as const, id, version, allow: allows[0] }))
        )
        const steps = [...stored.slice(1), ...random]
        const expected = yield* Effect.provide(answers(steps), Layer.fresh(memory))
        const actual = yield* Effect.provide(answers(steps), Layer.fresh(sql))
        assert.deepStrictEqual(actual, expected)
        assert.notInclude(expected, "defect")
      }),
    { fastCheck: { numRuns: 40 } }
  )
})
