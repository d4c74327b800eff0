import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as EvidenceProjector from "../../core/evidence/EvidenceProjector.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { DurableRun, EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import type { ExecutionScopeRef } from "../../core/execution/ExecutionScope.ts"
import * as Governed from "../../core/execution/Governed.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"
import { tempDir } from "../fixtures/sqlite.ts"
import { stateStores } from "../fixtures/state.ts"

// Handled as an argument (a value, and a key of a record argument), returned as a result and carried in a public
// failure message: never stored.
const CANARY = "sk-canary-5f0e1d2c3b4a"

const actions = [
  Action.make({
    name: "vault.use",
    input: Schema.Struct({ token: Schema.String }),
    output: Schema.Struct({ echoed: Schema.String }),
    handler: ({ token }) => ({ echoed: token })
  }),
  Action.make({
    name: "vault.fail",
    input: Schema.Struct({ token: Schema.String }),
    output: Schema.Void,
    handler: ({ token }) => Effect.fail(new Action.ActionError({ code: "vault.rejected", message: token }))
  }),
  Action.make({
    name: "vault.tag",
    input: Schema.Record({ key: Schema.String, value: Schema.String }),
    output: Schema.Void,
    handler: () => undefined
  }),
  Action.make({
    name: "vault.publish",
    input: Schema.Struct({ token: Schema.String }),
    output: Schema.Void,
    handler: () => undefined
  })
]

const declaration = {
  policy_id: "vault",
  version: "1",
  approver_class: "lead",
  rules: [
    { rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["vault.*"] },
    { rule_id: "no-publish", kind: "action", effect: "deny", action_patterns: ["vault.publish"] },
    { rule_id: "ask", kind: "approval", effect: "require_approval", action_patterns: ["nothing"] }
  ],
  gates: [
    { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow", "ask"] },
    { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow", "no-publish"] }
  ]
}

const tools = Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer)

const call = (
  ref: PolicySnapshotRef,
  scope: ExecutionScopeRef,
  action: string,
  boundary: ActionExecutor.ExecuteOptions["boundary"]
) =>
  Effect.gen(function*() {
    const request = { request_id: yield* IdGenerator.uuid, execution_scope: scope }
    return yield* run(
      action,
      action === "vault.tag" ? { [CANARY]: "labelled" } : { token: CANARY },
      request,
      { policy_snapshot: ref },
      boundary === undefined ? {} : { boundary }
    )
  })

const install = installPolicy(declaration)

describe("no secret reaches storage", () => {
  it.scoped("after governed and durable runs that handled a canary secret, no byte of the database files holds it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const filename = path.join(dir, "writ.db")
      const stores = Embedded.layerStores({ filename })
      const governed = Governed.layer().pipe(Layer.provideMerge(tools), Layer.provideMerge(stores))
      const durable = ActionExecutor.layerDurable().pipe(Layer.provideMerge(tools), Layer.provideMerge(stores))
      const outcomes: Array<string> = []
      yield* Effect.gen(function*() {
        const ref = yield* install
        const boundary = yield* Governance.openBoundary(ref)
        const scope = () => Effect.map(IdGenerator.uuid, (scope_id) => EphemeralOperation.make({ scope_id }))
        for (const action of ["vault.use", "vault.fail", "vault.tag", "vault.publish"]) {
          const outcome = yield* call(ref, yield* scope(), action, boundary)
          outcomes.push(outcome._tag)
          if (outcome._tag === "escalated") {
            const queue = yield* ApprovalQueue
            yield* queue.approve(outcome.approval!.approval_id, { id: "bob", approver_class: "lead" })
          }
        }
        yield* Governance.closeBoundary(boundary)
        yield* EvidenceProjector.drain()
      }).pipe(Effect.provide(governed))
      yield* Effect.gen(function*() {
        const ref = yield* install
        const state = yield* stateStores
        const run = yield* state.createRun()
        yield* state.transition(run.run_id, "preparing", "queued")
        yield* state.transition(run.run_id, "queued", "running")
        for (const action of ["vault.use", "vault.fail"]) {
          outcomes.push((yield* call(ref, DurableRun.make({ run_id: run.run_id }), action, undefined))._tag)
        }
      }).pipe(Effect.provide(durable))
      assert.deepStrictEqual(outcomes, ["succeeded", "failed", "succeeded", "escalated", "succeeded", "failed"])
      const files = fs.readdirSync(dir).filter((file) => file.startsWith("writ.db"))
      assert.include(files, "writ.db")
      let bytes = 0
      let controls = 0
      for (const file of files) {
        const content = fs.readFileSync(path.join(dir, file))
        bytes += content.length
        // Positive control: what is stored is readable in these bytes (an action name, a failure code).
        if (content.indexOf("vault.rejected") !== -1) controls++
        assert.strictEqual(content.indexOf(CANARY), -1, file)
        assert.strictEqual(content.indexOf(Buffer.from(CANARY, "utf16le")), -1, file)
      }
      assert.isAbove(bytes, 10_000)
      assert.isAbove(controls, 0)
    }))
})
