import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as Canonical from "../../core/base/Canonical.ts"
import * as Digest from "../../core/base/Digest.ts"
import type { Sha256Hex } from "../../core/base/Digest.ts"
import type { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as Capacity from "../../core/execution/Capacity.ts"
import { Call } from "../../core/execution/internal/executor/call.ts"
import type { Env } from "../../core/execution/internal/executor/env.ts"
import { preflightWith, verifyPreflight } from "../../core/execution/internal/executor/preflight.ts"
import { ActionPreflightReport, digestInput } from "../../core/execution/Preflight.ts"
import { call as fixtureCall, chainRecords, governedInMemory, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

let ran = 0
const note = Action.make({
  name: "notes.write",
  input: Schema.Struct({}),
  output: Schema.String,
  handler: () => {
    ran++
    return "ok"
  }
})

const records = chainRecords

const governedCall = Effect.gen(function*() {
  const ref = yield* installPolicy({ policy_id: "p", version: "1", mode: "allow_all" })
  const boundary = yield* Governance.openBoundary(ref)
  const outcome = yield* run("notes.write", {}, {}, { policy_snapshot: ref }, { boundary })
  return { outcome, chain: yield* records(boundary.chain_id) }
})

interface Started {
  readonly request_id: string
  readonly request_digest: string
  readonly action: { readonly digest: string }
  readonly backend: { readonly id: string; readonly version: string; readonly capability_digest: string }
  readonly preflight: {
    readonly report_id: string
    readonly digest: string
    readonly admission_leases: ReadonlyArray<{ capacity: string; lease_id: string | null; expires_at: string | null }>
    readonly verified_at: string
    readonly expires_at: string | null
  }
}

describe("the preflight report", () => {
  it.effect("operation_started carries it: the leases, their expiry, and a digest an auditor recomputes", () =>
    Effect.gen(function*() {
      const { chain, outcome } = yield* governedCall
      assert.strictEqual(outcome._tag, "succeeded")
      const started = JSON.parse(chain.find((r) => r.record_type === "operation_started")!.payload_json) as Started
      const [lease] = started.preflight.admission_leases
      assert.strictEqual(lease?.capacity, "one")
      assert.match(lease?.lease_id ?? "", /^[0-9a-f-]{36}$/)
      assert.strictEqual(started.preflight.expires_at, lease?.expires_at)
      assert.strictEqual(
        Time.toMicros(started.preflight.expires_at as Time.Timestamp) -
          Time.toMicros(started.preflight.verified_at as Time.Timestamp),
        30_000_000,
        "a lease term after it was verified"
      )
      const input = digestInput(
        {
          report_id: started.preflight.report_id,
          request_id: started.request_id,
          request_digest: started.request_digest,
          action_descriptor_digest: started.action.digest,
          effect_backend: { id: started.backend.id, version: started.backend.version },
          capability_digest: started.backend.capability_digest,
          admission_leases: started.preflight.admission_leases,
          verified_at: started.preflight.verified_at,
          expires_at: started.preflight.expires_at
        } as unknown as Parameters<typeof digestInput>[0]
      )
      const text = Either.getOrThrow(Canonical.stringify(input))
      assert.strictEqual(yield* Digest.sha256Text(text), started.preflight.digest)
      // Any field changed changes the digest.
      const forged = Either.getOrThrow(Canonical.stringify({ ...input, expires_at: null }))
      assert.notStrictEqual(yield* Digest.sha256Text(forged), started.preflight.digest)
    }).pipe(Effect.provide(governedInMemory([note], {
      capacity: [Capacity.bounded({ id: "one", permits: 1, lease_microseconds: 30_000_000 })]
    }))))

  it.effect("a lease that lapsed before stage 4 denies the call before operation_started, and nothing runs", () =>
    Effect.gen(function*() {
      const before = ran
      const { chain, outcome } = yield* governedCall
      assert.deepStrictEqual(outcome._tag === "denied" && [outcome.reason.code, outcome.stage], [
        "preflight.lease_expired",
        "governed_start"
      ])
      assert.deepStrictEqual(chain.map((r) => r.record_type), [], "no operation was opened")
      assert.strictEqual(ran, before)
    }).pipe(Effect.provide(governedInMemory([note], {
      capacity: [{
        id: "lapsed",
        admit: () =>
          Effect.map(Time.now, (now) =>
            Either.right({
              lease_id: "l-1",
              expires_at: Time.fromMicros(Time.toMicros(now) - 1),
              release: Effect.void
            }))
      }]
    }))))
})

describe("stage 4's verification of the report stage 3 made", () => {
  const env = {
    backend: InProcessBackend.make,
    digest: NodeDigest.make,
    ids: { uuidSync: () => randomUUID() }
  } as unknown as Env

  const preflighted = Effect.gen(function*() {
    const { context, request } = yield* fixtureCall("notes.write", {})
    const call = new Call(request, context, randomUUID() as Uuid, "governed", undefined, undefined, undefined, {
      micros: () => Date.now() * 1000,
      invocation: Option.none()
    }, undefined)
    const capability = yield* InProcessBackend.make.probe
    const step = preflightWith(env)
    assert.strictEqual(step._tag, "Sync", "node:crypto digests synchronously")
    const state = {
      call,
      action: { descriptor: { digest: "d".repeat(64) } },
      capability,
      args: {},
      digest: "a".repeat(64)
    } as unknown as Parameters<typeof step.run>[0]
    const made = step._tag === "Sync" ? step.run(state) : yield* step.run(state)
    assert.isTrue("preflight" in made)
    return { call, report: (made as { preflight: ActionPreflightReport }).preflight }
  })

  it.effect("the sealed report passes and cannot be changed after it was digested", () =>
    Effect.gen(function*() {
      const { call, report } = yield* preflighted
      assert.isTrue(Object.isFrozen(report) && Object.isFrozen(report.admission_leases))
      assert.throws(() => {
        ;(report as { expires_at: unknown }).expires_at = null
      })
      assert.strictEqual(verifyPreflight(env, call, report), undefined)
    }).pipe(Effect.provide(governedInMemory([note]))))

  it.effect("a report stage 3 did not make here is recomputed: a faithful copy passes, a changed one is refused", () =>
    Effect.gen(function*() {
      const { call, report } = yield* preflighted
      const copy = ActionPreflightReport.make({ ...report })
      assert.strictEqual(verifyPreflight(env, call, copy), undefined)
      const changed = ActionPreflightReport.make({ ...report, request_digest: "b".repeat(64) as Sha256Hex })
      const refused = verifyPreflight(env, call, changed)
      assert.deepStrictEqual(
        refused !== undefined && !Effect.isEffect(refused) && refused._tag === "denied"
          ? refused.reason.code
          : refused,
        "preflight.digest_mismatch"
      )
    }).pipe(Effect.provide(governedInMemory([note]))))
})
