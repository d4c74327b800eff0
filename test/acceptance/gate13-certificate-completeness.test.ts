/**
 * Gate 13, certificate completeness, on the embedded SQLite stores: success (a `undefined` result too), captured
 * failure, denial, cancellation and timeout each close their operation with exactly one allowed terminal record;
 * preflight deferral (capacity) and containment denial open no operation; a gate-derived escalation closes its
 * operation with `operation_denied`, and the approved retry is a new attempt. The closed boundary certifies FULL.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Layer, Schema, Stream } from "effect"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { terminalTypes } from "../../core/evidence/Evidence.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { tempDir } from "../fixtures/sqlite.ts"

// Signalled when `notes.slow` is inside its call.
const slowEntered = Effect.runSync(Deferred.make<void>())

const actions = [
  Action.make({ name: "notes.write", input: Schema.Struct({}), output: Schema.String, handler: () => "written" }),
  Action.make({ name: "notes.empty", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined }),
  Action.make({
    name: "notes.fail",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.fail(new Action.ActionError({ code: "notes.broken", message: "broken" }))
  }),
  Action.make({ name: "notes.drop", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined }),
  Action.make({ name: "notes.sign", input: Schema.Struct({}), output: Schema.Void, handler: () => undefined }),
  Action.make({
    name: "notes.slow",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.zipRight(Deferred.succeed(slowEntered, undefined), Effect.never)
  }),
  Action.make({
    name: "notes.late",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.sleep("5 seconds")
  }),
  Action.make({
    name: "notes.send",
    input: Schema.Struct({}),
    output: Schema.Void,
    containment: ["network"],
    handler: () => undefined
  })
]

const declaration = {
  policy_id: "gate13",
  version: "1",
  approver_class: "lead",
  rules: [
    {
      rule_id: "allow-notes",
      kind: "action",
      effect: "allow",
      action_patterns: [
        "notes.write",
        "notes.empty",
        "notes.fail",
        "notes.drop",
        "notes.slow",
        "notes.late",
        "notes.send"
      ]
    },
    { rule_id: "no-drop", kind: "action", effect: "deny", action_patterns: ["notes.drop"] },
    { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["notes.sign"] },
    { rule_id: "allow-sign", kind: "action", effect: "allow", action_patterns: ["notes.sign"] }
  ],
  gates: [
    { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow-notes", "no-drop", "ask"] },
    { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow-notes", "allow-sign"] }
  ]
}

// One slow call at a time: a second is deferred at stage 3.
const oneSlowCall = Capacity.bounded({
  id: "slow-calls",
  permits: 1,
  applies: (admission) => admission.descriptor.name === "notes.slow"
})

const certifiable = Layer.unwrapScoped(
  Effect.map(tempDir, (dir) =>
    Embedded.layerExecutor(
      { filename: path.join(dir, "writ.db"), profile: "certifiable" },
      Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer),
      { capacity: [oneSlowCall] }
    ))
)

describe("gate 13: certificate completeness", () => {
  it.scopedLive("every kind of outcome closes its operation once; preflight refusals open none; the boundary certifies FULL", () =>
    Effect.gen(function*() {
      const ref = yield* installPolicy(declaration)
      const boundary = yield* Governance.openBoundary(ref)
      const call = (action: string, extra: Parameters<typeof run>[2] = {}, cancel?: Deferred.Deferred<void>) =>
        run(action, {}, extra, { policy_snapshot: ref }, cancel === undefined ? { boundary } : { boundary, cancel })

      const outcomes = [
        yield* call("notes.write"),
        yield* call("notes.empty"),
        yield* call("notes.fail"),
        yield* call("notes.drop")
      ]
      const escalated = yield* call("notes.sign")
      assert.isTrue(escalated._tag === "escalated" && escalated.approval !== undefined)
      const approval_id = escalated._tag === "escalated" ? escalated.approval!.approval_id : ""
      yield* Effect.flatMap(ApprovalQueue, (queue) => queue.approve(approval_id, { id: "bob", approver_class: "lead" }))
      // An approval is used by a new request, never by the one that escalated (runs.md).
      const approved = yield* call("notes.sign", { approval_id: Uuid.make(approval_id), request_id: "approved-retry" })

      const cancel = yield* Deferred.make<void>()
      const slow = yield* Effect.fork(call("notes.slow", {}, cancel))
      yield* Deferred.await(slowEntered)
      const deferred = yield* call("notes.slow")
      yield* Deferred.succeed(cancel, undefined)
      const cancelled = yield* Fiber.join(slow)
      const deadline = Time.fromMicros(Time.toMicros(yield* Time.now) + 200_000)
      const timedOut = yield* call("notes.late", { deadline })
      const uncontained = yield* call("notes.send")

      assert.deepStrictEqual(
        [...outcomes, escalated, approved, cancelled, timedOut].map((o) => o._tag),
        ["succeeded", "succeeded", "failed", "denied", "escalated", "succeeded", "cancelled", "timed_out"]
      )
      assert.notStrictEqual(approved.attempt_id, escalated.attempt_id, "the approved retry is a new attempt")
      assert.deepStrictEqual([deferred._tag, deferred.stage], ["deferred", "bind_context"])
      assert.deepStrictEqual([uncontained._tag, uncontained.stage], ["denied", "bind_context"])

      const closed = yield* Governance.closeBoundary(boundary)
      const chain = Chunk.toReadonlyArray(
        yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id))
      )
      const starts = chain.filter((r) => r.record_type === "operation_started")
      assert.deepStrictEqual(
        starts.map((r) => JSON.parse(r.payload_json).attempt_id),
        [...outcomes, escalated, approved, cancelled, timedOut].map((o) => o.attempt_id),
        "one operation per attempt that passed stage 3, none for the deferral or the containment denial"
      )
      const terminals = starts.map((start) =>
        chain.filter((r) => r.operation_id === start.operation_id && terminalTypes.has(r.record_type))
      )
      assert.deepStrictEqual(terminals.map((t) => t.map((r) => r.record_type)), [
        ["callable_completed"],
        ["callable_completed"],
        ["callable_failed"],
        ["operation_denied"],
        ["operation_denied"],
        ["callable_completed"],
        ["operation_cancelled"],
        ["operation_timed_out"]
      ])
      assert.strictEqual(JSON.parse(terminals[4]![0]!.payload_json).disposition, "escalate")
      assert.isTrue(JSON.parse(terminals[7]![0]!.payload_json).call_executed, "the deadline passed inside the call")

      const certificate = yield* TaskCertificate.mint(boundary.chain_id, closed.head_hash)
      assert.strictEqual(certificate.process_grade, "FULL")
      assert.isTrue((yield* TaskCertificate.verify(certificate)).valid)
    }).pipe(Effect.provide(certifiable)))
})
