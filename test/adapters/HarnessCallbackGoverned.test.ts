/**
 * The blocking callback of a governed run on a real SQLite file, over real loopback HTTP: a forged request (no token,
 * another token of the same length), a replay of a call already decided and a malformed one are refused and recorded
 * nowhere; the one genuine call is decided and recorded once, by the harness; the chain verifies.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Schema, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { serve } from "../../adapters/node/internal/harnessCallback.ts"
import * as SqlObservationLog from "../../adapters/sql/SqlObservationLog.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as Time from "../../core/base/Time.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import { openBoundary } from "../../core/evidence/EvidenceWriter.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Report from "../../core/harness/CapabilityReport.ts"
import * as GovernedRun from "../../core/harness/GovernedRun.ts"
import * as HarnessPlan from "../../core/harness/HarnessPlan.ts"
import { ObservationLog } from "../../core/harness/ObservationLog.ts"
import * as Observation from "../../core/harness/ProviderObservation.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { claudePlanAndReport } from "../fixtures/harnessPlan.ts"

const { plan, report } = claudePlanAndReport({ digest: "c", report: { requested: ["callback.pre_tool@1"] } })

describe("a governed run's callback", () => {
  it.live(
    "refuses forged, replayed and malformed requests, records none of them, and records the genuine call once",
    () => {
      const dir = mkdtempSync(join(tmpdir(), "writ-callback-gov-"))
      const layer = SqlObservationLog.layer.pipe(
        Layer.provideMerge(Embedded.layerStores({ filename: join(dir, "writ.db"), commitThread: "off" }))
      )
      return Effect.gen(function*() {
        const policies = yield* PolicySnapshotStore
        const declared = Either.getOrThrow(PermissionPolicy.decode({
          policy_id: "cb",
          version: "1",
          allow: { "shell.exec": ["touch *"] }
        }))
        const compiled = yield* Effect.orDie(PolicySnapshot.compile(declared))
        yield* Effect.orDie(policies.put(compiled))
        const snapshot = yield* Effect.orDie(policies.activate("cb", "1", "test", yield* Time.now))
        const boundary = yield* openBoundary(snapshot)
        const run = yield* GovernedRun.start({
          boundary,
          snapshot,
          plan,
          plan_digest: yield* Effect.orDie(HarnessPlan.digest(plan)),
          report,
          report_digest: yield* Effect.orDie(Digest.canonical(Schema.encodeSync(Report.CapabilityReport)(report))),
          prompt: "go",
          principal: "harness"
        })
        const token = "a".repeat(64)
        const answers = yield* Effect.scoped(Effect.gen(function*() {
          const server = yield* serve(token, run.decide)
          const post = (authorization: string | undefined, body: string) =>
            Effect.promise(() =>
              fetch(server.url, {
                method: "POST",
                body,
                headers: authorization === undefined ? {} : { authorization }
              }).then(async (r) => `${r.status} ${(await r.json()).decision}`)
            )
          const call = JSON.stringify({
            tool_name: "Bash",
            tool_input: { command: "touch /w/a" },
            tool_use_id: "toolu_1"
          })
          return [
            yield* post(undefined, call),
            yield* post(`Bearer ${"b".repeat(64)}`, call),
            yield* post(`Bearer ${token}`, "{\"tool_input\": {}}"),
            yield* post(`Bearer ${token}`, call),
            // The same call again, with the right token: a replay.
            yield* post(`Bearer ${token}`, call),
            yield* post(`Bearer ${token}`, call.replace("touch /w/a", "rm -rf /w"))
          ]
        }))
        assert.deepStrictEqual(answers, ["401 deny", "401 deny", "400 deny", "200 allow", "409 deny", "409 deny"])
        yield* run.end({ _tag: "exited", code: 0, signal: null, killed: false })
        // What the stream said goes to its own table, never the chain.
        const observed = [
          new Observation.Exit({ plane: "observation", code: 0, signal: null, killed_by_harness: false })
        ]
        yield* (yield* ObservationLog).append(run.operation.operation_id, observed)
        const { verification } = yield* Ingress.closeAndCertify(boundary, false)
        assert.isTrue(verification.valid)
        const records = Chunk.toReadonlyArray(yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id)))
        assert.deepStrictEqual(records.map((r) => r.record_type), [
          "policy_bound",
          "operation_started",
          "gate_evaluated",
          "callable_completed",
          "task_closed"
        ])
        assert.strictEqual(JSON.parse(records[2]!.payload_json).tool_call.call_id, "toolu_1")
        assert.deepStrictEqual(run.decisions().map((d) => d.decision.decision), ["allow"])
        assert.deepStrictEqual(yield* (yield* ObservationLog).read(run.operation.operation_id), observed)
      }).pipe(Effect.provide(layer), Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true }))))
    },
    60_000
  )
})
