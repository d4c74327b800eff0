/**
 * Out-of-band rules in the governed profile: a configured interceptor runs only when the pinned snapshot binds it by
 * id, version and configuration digest; otherwise the call is denied at stage 3, before any operation starts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Schema, Stream } from "effect"
import * as Action from "../../core/action/Action.ts"
import * as Digest from "../../core/base/Digest.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import { base, governedInMemory, run } from "../fixtures/layers.ts"
import { bound, installPolicy } from "../fixtures/policy.ts"

const ran = { count: 0 }
const actions = [
  Action.make({ name: "notes.read", input: Schema.Struct({}), output: Schema.String, handler: () => `n${++ran.count}` })
]

const config = { limit: 3 }
const checker = Interceptor.identified(
  { id: "acme.checker", version: "1", config },
  "policy",
  () => Interceptor.allow("acme.checked")
)

const typesOf = (chain_id: string) =>
  Effect.flatMap(
    EvidenceStore,
    (store) =>
      Effect.map(Stream.runCollect(store.read(chain_id)), (chunk) => Chunk.toArray(chunk).map((r) => r.record_type))
  )

/** One governed call under a policy binding `interceptors`: its outcome, and its chain's record types. */
const callUnder = (bound: ((config_digest: string, other: string) => ReadonlyArray<unknown>) | undefined) =>
  Effect.gen(function*() {
    const interceptors = bound?.(yield* Digest.canonical(config), yield* Digest.canonical({ limit: 4 }))
    const ref = yield* installPolicy({
      policy_id: "open",
      version: "1",
      mode: "allow_all",
      ...(interceptors === undefined ? {} : { interceptors })
    })
    const boundary = yield* Governance.openBoundary(ref)
    const outcome = yield* run("notes.read", {}, {}, { policy_snapshot: ref }, { boundary })
    return { outcome, types: yield* typesOf(boundary.chain_id) }
  }).pipe(Effect.provide(governedInMemory(actions, { interceptors: [checker] })))

describe("configured interceptors are bound by the snapshot", () => {
  it.effect("an identified interceptor the snapshot does not bind: denied at stage 3, nothing ran, no operation", () =>
    Effect.gen(function*() {
      const before = ran.count
      const { outcome, types } = yield* callUnder(undefined)
      assert.strictEqual(outcome._tag, "denied")
      assert.strictEqual(outcome._tag === "denied" ? outcome.reason.code : "", "policy.unbound_interceptor")
      assert.strictEqual(ran.count, before)
      assert.notInclude(types, "operation_started")
    }))

  it.effect("bound by id, version and configuration digest: the call runs", () =>
    Effect.gen(function*() {
      const before = ran.count
      const { outcome, types } = yield* callUnder((
        config_digest
      ) => [{ id: "acme.checker", version: "1", config_digest }])
      assert.strictEqual(outcome._tag, "succeeded")
      assert.strictEqual(ran.count, before + 1)
      assert.include(types, "operation_started")
    }))

  it.effect("its gate record names it by the identity the snapshot bound; the chain verifies and certifies", () =>
    Effect.gen(function*() {
      const config_digest = yield* Digest.canonical(config)
      const ref = yield* installPolicy({
        policy_id: "open",
        version: "1",
        mode: "allow_all",
        interceptors: [{ id: "acme.checker", version: "1", config_digest }]
      })
      const boundary = yield* Governance.openBoundary(ref)
      assert.strictEqual((yield* run("notes.read", {}, {}, { policy_snapshot: ref }, { boundary }))._tag, "succeeded")
      const closed = yield* Governance.closeBoundary(boundary)
      const store = yield* EvidenceStore
      const payloads = Chunk.toArray(yield* Stream.runCollect(store.read(boundary.chain_id)))
        .filter((record) => record.record_type === "gate_evaluated")
        .map((record) => JSON.parse(record.payload_json))
      const checked = payloads.find((payload) => payload.evaluator === "acme.checker")
      assert.deepStrictEqual(checked?.evaluator_identity, { id: "acme.checker", version: "1", config_digest })
      assert.isTrue(
        payloads.filter((payload) => payload.evaluator !== "acme.checker").every((payload) =>
          payload.evaluator_identity === undefined
        ),
        "the policy's own gates are bound by the snapshot itself"
      )
      assert.isTrue((yield* store.verify(boundary.chain_id, closed.head_hash)).valid)
      const certificate = yield* TaskCertificate.mint(boundary.chain_id, closed.head_hash)
      assert.isTrue((yield* TaskCertificate.verify(certificate)).valid)
    }).pipe(Effect.provide(governedInMemory(actions, { interceptors: [checker] }))))

  it.effect("bound with another version or another configuration: denied, nothing ran", () =>
    Effect.gen(function*() {
      const before = ran.count
      for (
        const bound of [
          (_: string, other: string) => [{ id: "acme.checker", version: "1", config_digest: other }],
          (config_digest: string) => [{ id: "acme.checker", version: "2", config_digest }]
        ]
      ) {
        const { outcome, types } = yield* callUnder(bound)
        assert.strictEqual(outcome._tag === "denied" ? outcome.reason.code : outcome._tag, "policy.unbound_interceptor")
        assert.notInclude(types, "operation_started")
      }
      assert.strictEqual(ran.count, before)
    }))
})

describe("an exception a configured interceptor grants", () => {
  // A soft gate of its own denies, and an attributable approval lets the call pass.
  const excepting = Interceptor.identified(
    { id: "acme.excepting", version: "2", config },
    "policy",
    () => ({
      ...Interceptor.allow("acme.excepted"),
      gates: [{
        gate_id: "acme-review",
        level: "soft",
        decision: "deny",
        reason_code: "acme.review",
        matched_rules: []
      }],
      exception: { approval_id: "approval-1", approver_class: "lead", reason_code: "acme.review" }
    })
  )

  it.effect("names it by the identity the snapshot bound, as its gate record does", () =>
    Effect.gen(function*() {
      const config_digest = yield* Digest.canonical(config)
      const identity = { id: "acme.excepting", version: "2", config_digest }
      const ref = yield* installPolicy({ policy_id: "open", version: "1", mode: "allow_all", interceptors: [identity] })
      const boundary = yield* Governance.openBoundary(ref)
      assert.strictEqual((yield* run("notes.read", {}, {}, { policy_snapshot: ref }, { boundary }))._tag, "succeeded")
      const payloads = Chunk.toArray(yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id)))
        .filter((record) => record.record_type === "exception_granted" || record.record_type === "gate_evaluated")
        .map((record) => [record.record_type, JSON.parse(record.payload_json)] as const)
      const exception = payloads.find(([type]) => type === "exception_granted")?.[1]
      assert.deepStrictEqual(
        [exception?.evaluator, exception?.evaluator_identity, exception?.approval_id],
        ["acme.excepting", identity, "approval-1"]
      )
      const gate = payloads.find(([type, payload]) => type === "gate_evaluated" && payload.gate_id === "acme-review")
      assert.deepStrictEqual(gate?.[1].evaluator_identity, identity)
    }).pipe(Effect.provide(governedInMemory(actions, { interceptors: [excepting] }))))
})

describe("a governed executor takes only interceptors a snapshot can bind", () => {
  const built = (interceptor: Interceptor.Interceptor) =>
    Effect.flip(Effect.provide(Effect.void, governedInMemory(actions, { interceptors: [interceptor] })))

  it.effect("one without an identity, or with a configuration that has no canonical JSON, fails the build naming it", () =>
    Effect.gen(function*() {
      const plain = yield* built(Interceptor.make("acme.plain", "policy", () => Interceptor.allow()))
      assert.strictEqual(plain._tag, "InterceptorIdentityError")
      assert.strictEqual(plain._tag === "InterceptorIdentityError" && plain.interceptor, "acme.plain")
      const floaty = yield* built(
        Interceptor.identified(
          { id: "acme.floaty", version: "1", config: { ratio: 0.5 } },
          "policy",
          () => Interceptor.allow()
        )
      )
      assert.include(floaty.message, "acme.floaty")
      assert.include(floaty.message, "no canonical JSON")
      const unnamed = yield* built(
        Interceptor.identified({ id: "acme.v", version: " ", config: {} }, "policy", () => Interceptor.allow())
      )
      assert.include(unnamed.message, "identifiers")
    }))

  it.effect("the fixture's bound identity is the digest of an empty configuration", () =>
    Effect.map(Digest.canonical({}), (digest) => assert.strictEqual(bound("x")[0]!.config_digest, digest)).pipe(
      Effect.provide(base(actions))
    ))
})
