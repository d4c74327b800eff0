/**
 * The policy's containment opt-ins at admission: without one, a required kind of containment the backend does not
 * enforce is denied before `operation_started`; `degrade` lets the call run degraded (the outcome and the evidence say
 * so); `remote_claims` lets the edge backend's `remote` claim satisfy it (the real handler, over an in-memory fetch).
 * An executor that pins no snapshot (minimal) takes its opt-ins from its configuration (the edge handler's policy's).
 * A policy that declares no opt-in digests as it did before the field existed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as EdgeBackend from "../../adapters/web/EdgeBackend.ts"
import * as EdgePlatformBackend from "../../adapters/web/EdgePlatformBackend.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicyComposition from "../../core/policy/PolicyComposition.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import * as Handler from "../../runtime/edge/Handler.ts"
import { chainRecords, governedInMemory, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const ran = { reads: 0, spawns: 0 }

const reads = Action.make({
  name: "fs.read_config",
  input: Schema.Struct({}),
  output: Schema.String,
  containment: ["filesystem"],
  handler: () => (ran.reads++, "read")
})

const both = Action.make({
  name: "fs.fetch_config",
  input: Schema.Struct({}),
  output: Schema.String,
  containment: ["filesystem", "network"],
  handler: () => (ran.reads++, "fetched")
})

const spawns = Action.make({
  name: "proc.build",
  input: Schema.Struct({}),
  output: Schema.String,
  containment: ["subprocess"],
  handler: () => (ran.spawns++, "built")
})

const policy = (containment?: PermissionPolicy.PermissionPolicyEncoded["containment"]) => ({
  policy_id: "opt-ins",
  version: "1",
  mode: "allow_all" as const,
  ...(containment === undefined ? {} : { containment })
})

// One governed call under `declared`, in a fresh task; its outcome and the operation_started record, if any.
const governedCall = (action: string, declared: ReturnType<typeof policy>, backend: ActionExecutionBackend.Service) =>
  Effect.gen(function*() {
    const ref = yield* installPolicy(declared)
    const boundary = yield* Governance.openBoundary(ref)
    const outcome: ExecutionOutcome = yield* run(action, {}, {}, {
      policy_snapshot: ref,
      effect_backend: backend.ref
    }, { boundary })
    const started = (yield* chainRecords(boundary.chain_id)).find((r) => r.record_type === "operation_started")
    return { outcome, started: started === undefined ? undefined : JSON.parse(started.payload_json) }
  })

const onInProcess = <A, E>(effect: Effect.Effect<A, E, any>) =>
  Effect.provide(effect, governedInMemory([reads, both], {}, InProcessBackend.layer)) as Effect.Effect<A, E>

// The edge: the real handler, whose platform claims subprocess containment, reached over an in-memory fetch, fresh
// for each test (its tests run on the live clock: a signature carries its expiry). `executed` counts the calls its own
// executor concluded.
const caller = { keyId: "agent-1", secret: "k".repeat(40) }
const edge = { executed: 0, backend: undefined as unknown as EdgeBackend.EdgeBackend }
const onEdge = <A, E>(effect: Effect.Effect<A, E, any>) =>
  Effect.suspend(() => {
    const handler = Handler.make({
      actions: [spawns],
      policy: policy(),
      keys: [{ keyId: caller.keyId, secret: Redacted.make(caller.secret), principal: "agent-one" }],
      claims: [{ name: "writ.subprocess.spawn@1", level: "enforced" }],
      platform: "test platform: isolates with no subprocess",
      config: { observers: [{ id: "count", observe: () => Effect.sync(() => void edge.executed++) }] }
    })
    edge.executed = 0
    edge.backend = Effect.runSync(EdgeBackend.make({
      url: "http://edge.test/",
      keyId: caller.keyId,
      key: caller.secret,
      fetch: (input, init) => handler.fetch(new Request(input, init))
    }))
    return Effect.provide(
      effect,
      governedInMemory([spawns], {}, Layer.succeed(ActionExecutionBackend, edge.backend))
    ) as Effect.Effect<A, E>
  })

describe("containment opt-ins", () => {
  it.effect("without an opt-in, a required kind the backend does not enforce is denied before operation_started", () =>
    onInProcess(Effect.gen(function*() {
      const before = ran.reads
      const { outcome, started } = yield* governedCall("fs.read_config", policy(), InProcessBackend.make)
      assert.strictEqual(outcome._tag, "denied")
      assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      assert.strictEqual(outcome.stage, "bind_context")
      assert.isUndefined(started)
      assert.strictEqual(ran.reads, before)
    })))

  it.effect("degrade: the call runs degraded, and its outcome and operation_started record say so", () =>
    onInProcess(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall(
        "fs.read_config",
        policy({ degrade: ["filesystem"] }),
        InProcessBackend.make
      )
      assert.strictEqual(outcome._tag, "succeeded", JSON.stringify(outcome))
      assert.deepStrictEqual(outcome.containment?.degraded, ["filesystem"])
      assert.isUndefined(outcome.containment?.remote_claims)
      assert.deepStrictEqual(started.containment, { degraded: ["filesystem"] })
    })))

  it.effect("degrade covers only the kinds it names: another required kind is still denied", () =>
    onInProcess(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall(
        "fs.fetch_config",
        policy({ degrade: ["filesystem"] }),
        InProcessBackend.make
      )
      assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      assert.include(outcome._tag === "denied" ? outcome.reason.detail : "", "cannot contain network")
      assert.isUndefined(started)
    })))

  it.effect("an empty opt-in list opts in to nothing", () =>
    onInProcess(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall("fs.read_config", policy({ degrade: [] }), InProcessBackend.make)
      assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      assert.isUndefined(started)
    })))

  it.live("remote: without the opt-in the edge's remote claim does not satisfy a required kind; nothing is sent", () =>
    onEdge(Effect.gen(function*() {
      const report = yield* edge.backend.probe
      assert.strictEqual(report.containment.subprocess, "unsupported")
      assert.isTrue((report.capabilities ?? []).some((claim) => claim.by === "remote" && claim.verified === "claimed"))
      const { outcome, started } = yield* governedCall("proc.build", policy(), edge.backend)
      assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      assert.strictEqual(outcome.stage, "bind_context")
      assert.isUndefined(started)
      assert.strictEqual(edge.executed, 0, "nothing reached the edge")
    })))

  it.live("remote_claims: the edge's remote claim satisfies it; the call is sent, its outcome and evidence say so", () =>
    onEdge(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall(
        "proc.build",
        policy({ remote_claims: ["subprocess"] }),
        edge.backend
      )
      assert.deepStrictEqual(started.containment, { remote_claims: ["subprocess"] })
      assert.deepStrictEqual(outcome.containment, { remote_claims: ["subprocess"] })
      assert.strictEqual(edge.executed, 1, "the call reached the edge's executor")
      // The edge's own policy does not accept its platform's remote claim: its executor refuses the action there.
      assert.strictEqual(reasonCode(outcome), "backend.remote_denied")
      assert.strictEqual(ran.spawns, 0)
    })))

  it.live("remote_claims names kinds: a remote claim is no cover for a kind it does not name", () =>
    onEdge(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall(
        "proc.build",
        policy({ remote_claims: ["network"] }),
        edge.backend
      )
      assert.strictEqual(reasonCode(outcome), "containment.unsupported")
      assert.isUndefined(started)
      assert.strictEqual(edge.executed, 0)
    })))

  it.live("degrade without remote_claims: the remote claim is not taken, the call is admitted degraded", () =>
    onEdge(Effect.gen(function*() {
      const { outcome, started } = yield* governedCall("proc.build", policy({ degrade: ["subprocess"] }), edge.backend)
      assert.deepStrictEqual(started.containment, { degraded: ["subprocess"] })
      assert.deepStrictEqual(outcome.containment, { degraded: ["subprocess"] })
      assert.strictEqual(edge.executed, 1)
    })))

  it.effect("a minimal executor's configured remote_claims admit a kind its backend's remote claims cover, and no other", () =>
    Effect.gen(function*() {
      const platform = EdgePlatformBackend.make({
        claims: [{ name: "writ.subprocess.spawn@1", level: "enforced" }],
        platform: "test platform",
        runtime: "test",
        version: "1"
      })
      const minimal = (config: ActionExecutor.Config) =>
        ActionExecutor.layerMinimal(config).pipe(
          Layer.provideMerge(
            Layer.mergeAll(ActionRegistry.layerWith([spawns, reads]), Layer.succeed(ActionExecutionBackend, platform))
          ),
          Layer.provideMerge(Layer.merge(WebCryptoDigest.layer, IdGenerator.layerSeeded(3)))
        )
      const call = (action: string, config: ActionExecutor.Config) =>
        Effect.provide(run(action, {}, {}, { effect_backend: platform.ref }), minimal(config))
      const before = ran.spawns
      const admitted = yield* call("proc.build", { containment: { remote_claims: ["subprocess"] } })
      assert.strictEqual(admitted._tag, "succeeded", JSON.stringify(admitted))
      assert.deepStrictEqual(admitted.containment, { remote_claims: ["subprocess"] })
      assert.strictEqual(ran.spawns, before + 1)
      assert.strictEqual(reasonCode(yield* call("proc.build", {})), "containment.unsupported")
      const unclaimed = yield* call("fs.read_config", { containment: { remote_claims: ["filesystem"] } })
      assert.strictEqual(reasonCode(unclaimed), "containment.unsupported")
      assert.strictEqual(ran.spawns, before + 1)
    }))

  it.effect("a composed policy keeps only the opt-ins both parent and child make (a child never widens by them)", () =>
    Effect.gen(function*() {
      const parent = Effect.runSync(PermissionPolicy.decode(
        policy({ degrade: ["filesystem", "network"], remote_claims: ["subprocess"] })
      ))
      const compose = (containment?: PermissionPolicy.PermissionPolicyEncoded["containment"]) =>
        Effect.map(
          Effect.orDie(PolicyComposition.compose(
            parent,
            Effect.runSync(
              PolicyComposition.decodeChild({
                policy_id: "child",
                version: "1",
                ...(containment === undefined ? {} : { containment })
              })
            )
          )),
          (composed) => composed.snapshot.containment
        )
      assert.deepStrictEqual(yield* compose({ degrade: ["secrets", "network"] }), { degrade: ["network"] })
      assert.deepStrictEqual(yield* compose({ remote_claims: ["subprocess", "filesystem"] }), {
        remote_claims: ["subprocess"]
      })
      assert.isUndefined(yield* compose())
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it.effect("the opt-ins digest only when declared, as sorted sets; a policy without them digests as before", () =>
    Effect.gen(function*() {
      const digest = (declared: ReturnType<typeof policy>) =>
        Effect.map(
          Effect.orDie(PolicySnapshot.compile(Effect.runSync(PermissionPolicy.decode(declared)))),
          (snapshot) => snapshot
        )
      const none = yield* digest(policy())
      assert.isUndefined(none.containment)
      assert.notProperty(PolicySnapshot.digestInput(none), "containment")
      assert.strictEqual((yield* digest(policy({}))).digest, none.digest)
      assert.strictEqual((yield* digest(policy({ degrade: [], remote_claims: [] }))).digest, none.digest)
      const opted = yield* digest(policy({ degrade: ["network", "filesystem", "network"] }))
      assert.deepStrictEqual(opted.containment, { degrade: ["filesystem", "network"] })
      assert.notStrictEqual(opted.digest, none.digest)
      assert.strictEqual((yield* digest(policy({ degrade: ["filesystem", "network"] }))).digest, opted.digest)
      assert.notStrictEqual((yield* digest(policy({ remote_claims: ["filesystem", "network"] }))).digest, opted.digest)
      const refused = PermissionPolicy.decode({ ...policy(), containment: { degrade: ["everything"] } })
      assert.strictEqual(refused._tag, "Left")
    }).pipe(Effect.provide(WebCryptoDigest.layer)))
})
