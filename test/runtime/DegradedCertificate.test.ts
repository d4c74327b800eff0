/**
 * End to end on a SQLite file: a call that runs without required containment its policy made optional (`degrade`)
 * leaves `operation_started` saying so, and the certificate of its task is DEGRADED; a task whose calls all ran
 * contained, or whose degraded call a gate then denied (so it never ran), is FULL.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { chainRecords, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const readsConfig = Action.make({
  name: "fs.read_config",
  input: Schema.Struct({}),
  output: Schema.String,
  containment: ["filesystem"],
  handler: () => "read"
})

const adds = Action.make({
  name: "calc.add",
  input: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  output: Schema.Number,
  handler: ({ a, b }) => a + b
})

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-degraded-"))
const filename = path.join(dir, "writ.db")

const governedOnSqlite = Embedded.layerExecutor(
  { filename, profile: "governed", commitThread: "off" },
  Layer.merge(ActionRegistry.layerWith([readsConfig, adds]), InProcessBackend.layer)
)

const headOf = (chain_id: string) =>
  Effect.map(Effect.flatMap(EvidenceStore, (store) => store.head(chain_id)), (head) => Option.getOrThrow(head).hash)

// One task under `policy`: the calls run in order, the boundary closed, a certificate minted and verified.
const task = (policy: PolicySnapshotRef, calls: ReadonlyArray<readonly [string, Record<string, unknown>]>) =>
  Effect.gen(function*() {
    const boundary = yield* Governance.openBoundary(policy)
    const outcomes = []
    for (const [action, args] of calls) {
      outcomes.push(
        yield* run(action, args, {}, { policy_snapshot: boundary.policy, effect_backend: InProcessBackend.make.ref }, {
          boundary
        })
      )
    }
    const records = yield* chainRecords(boundary.chain_id)
    yield* Governance.closeBoundary(boundary)
    const certificate = yield* TaskCertificate.mint(boundary.chain_id, yield* headOf(boundary.chain_id))
    const verified = yield* TaskCertificate.verify(certificate)
    assert.isTrue(verified.valid, JSON.stringify(verified))
    return { outcomes, records, certificate }
  })

describe("a degraded call's task certificate, on SQLite", () => {
  it.live(
    "is DEGRADED; a contained task, or one whose degraded call was denied before it ran, is FULL",
    () =>
      Effect.gen(function*() {
        const degrading = yield* installPolicy({
          policy_id: "degrading",
          version: "1",
          mode: "allow_all",
          containment: { degrade: ["filesystem"] }
        })
        const denying = yield* installPolicy({
          policy_id: "degrading-denied",
          version: "1",
          containment: { degrade: ["filesystem"] },
          rules: [
            { kind: "action", effect: "allow", action_patterns: ["*"] },
            { kind: "action", effect: "deny", action_patterns: ["fs.*"] }
          ]
        })

        const degraded = yield* task(degrading, [["calc.add", { a: 1, b: 2 }], ["fs.read_config", {}]])
        assert.deepStrictEqual(degraded.outcomes.map((outcome) => outcome._tag), ["succeeded", "succeeded"])
        assert.isUndefined(degraded.outcomes[0]!.containment)
        assert.deepStrictEqual(degraded.outcomes[1]!.containment?.degraded, ["filesystem"])
        const started = degraded.records.filter((record) => record.record_type === "operation_started")
        assert.deepStrictEqual(started.map((record) => JSON.parse(record.payload_json).containment), [
          undefined,
          { degraded: ["filesystem"] }
        ])
        assert.strictEqual(degraded.certificate.process_grade, "DEGRADED")
        assert.strictEqual(
          degraded.certificate.gate_summary.exceptions,
          0,
          "no exception: the grade is the degradation's"
        )

        // A certificate that hides the degradation does not verify.
        const hidden = new TaskCertificate.TaskCertificate({ ...degraded.certificate, process_grade: "FULL" })
        const refused = yield* TaskCertificate.verify(hidden)
        assert.strictEqual(refused.failure_code, "grade_mismatch")

        const contained = yield* task(degrading, [["calc.add", { a: 2, b: 3 }]])
        assert.strictEqual(contained.certificate.process_grade, "FULL")

        const denied = yield* task(denying, [["fs.read_config", {}]])
        assert.strictEqual(denied.outcomes[0]!._tag, "denied")
        assert.deepStrictEqual(denied.outcomes[0]!.containment?.degraded, ["filesystem"])
        assert.strictEqual(
          JSON.parse(denied.records.find((record) => record.record_type === "operation_started")!.payload_json)
            .containment.degraded[0],
          "filesystem"
        )
        assert.strictEqual(denied.certificate.process_grade, "FULL", "the degraded call never ran")
        assert.isTrue(fs.statSync(filename).size > 0)
      }).pipe(
        Effect.provide(governedOnSqlite),
        Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
      ),
    60_000
  )
})
