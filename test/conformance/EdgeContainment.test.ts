/**
 * Containment through the edge, served on node:http and under `deno serve --host 127.0.0.1`: the handler's own backend
 * reports its platform's claims as `remote`, so where both the caller's policy and the edge's accept the remote claim
 * a call requiring filesystem containment runs at the edge, and each side's outcome and evidence say the claim was
 * remote; without the caller's opt-in it is denied `containment.unsupported` before `operation_started` and nothing is
 * sent; and the edge never takes a caller's word for containment: a body claiming it is refused, and a signed call
 * straight to an edge whose platform or policy does not cover it is denied there, the action unrun.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as EdgeBackend from "../../adapters/web/EdgeBackend.ts"
import * as EdgeSignature from "../../adapters/web/EdgeSignature.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Handler from "../../runtime/edge/Handler.ts"
import { key } from "../fixtures/edgeActions.ts"
import * as Contained from "../fixtures/edgeContained.ts"
import { type Served, serveDeno, serveNode } from "../fixtures/edgeServer.ts"
import { chainRecords, governedInMemory, run } from "../fixtures/layers.ts"
import { installPolicy } from "../fixtures/policy.ts"

const encoder = new TextEncoder()
const signingKey: EdgeSignature.Key = { keyId: key.keyId, secret: Redacted.make(key.secret) }

/** The caller's policy: everything allowed, with the containment opt-ins given. */
const callerPolicy = (remote_claims?: ReadonlyArray<"filesystem">) => ({
  policy_id: "caller",
  version: "1",
  mode: "allow_all" as const,
  ...(remote_claims === undefined ? {} : { containment: { remote_claims } })
})

/** One governed call of files.write through `backend`, in a fresh task; its outcome and operation_started payload. */
const governedWrite = (backend: EdgeBackend.EdgeBackend, declared: ReturnType<typeof callerPolicy>) =>
  Effect.gen(function*() {
    const ref = yield* installPolicy(declared)
    const boundary = yield* Governance.openBoundary(ref)
    const outcome: ExecutionOutcome = yield* run("files.write", { path: "/notes/a" }, {}, {
      policy_snapshot: ref,
      effect_backend: backend.ref
    }, { boundary })
    const started = (yield* chainRecords(boundary.chain_id)).find((r) => r.record_type === "operation_started")
    return { outcome, started: started === undefined ? undefined : JSON.parse(started.payload_json) }
  }).pipe(
    Effect.provide(governedInMemory([Contained.write], {}, Layer.succeed(ActionExecutionBackend, backend)))
  ) as Effect.Effect<{ outcome: ExecutionOutcome; started: any }>

const descriptorDigest = Effect.runPromise(
  Effect.map(Effect.provide(ActionDescriptor.describe(Contained.write), WebCryptoDigest.layer), (d) => d.digest)
)

/** A signed execute request for files.write, with any extra fields a forger adds to its body. */
const signedWrite = async (idempotencyKey: string, extra: Record<string, unknown> = {}) => {
  const body = encoder.encode(JSON.stringify({
    idempotency_key: idempotencyKey,
    request_id: `req-${idempotencyKey}`,
    action: "files.write",
    version: "1",
    descriptor_digest: await descriptorDigest,
    arguments: { path: "/notes/forged" },
    ...extra
  }))
  const headers = await Effect.runPromise(EdgeSignature.sign(signingKey, { method: "POST", path: "/v1/execute", body }))
  return { body, headers: { ...headers, "content-type": "application/json" } }
}

const suite = (name: string, start: () => Promise<Served>) =>
  describe(`containment through the edge handler on ${name}`, () => {
    let served: Served
    let backend: EdgeBackend.EdgeBackend
    beforeAll(async () => {
      served = await start()
      backend = await Effect.runPromise(
        EdgeBackend.make({ url: served.url, keyId: key.keyId, key: key.secret, timeout: "5 seconds" })
      )
    }, 60_000)
    afterAll(() => served?.close())

    const counters = () => Effect.promise(served.invocations)

    it.live("with remote_claims opted in, a call requiring filesystem runs at the edge; both sides say remote", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const { outcome, started } = yield* governedWrite(backend, callerPolicy(["filesystem"]))
        assert.strictEqual(outcome._tag, "succeeded", JSON.stringify(outcome))
        assert.strictEqual(outcome._tag === "succeeded" ? outcome.result : undefined, "wrote /notes/a")
        assert.deepStrictEqual(outcome.containment, { remote_claims: ["filesystem"] })
        assert.deepStrictEqual(started.containment, { remote_claims: ["filesystem"] })
        const after = yield* counters()
        assert.strictEqual(after.written, before.written! + 1)
        // The edge's own executor admitted it on its platform's remote claim, and its record says so.
        const record = yield* backend.reconcile(outcome.attempt_id)
        assert.strictEqual(record.outcome?._tag, "succeeded")
        assert.deepStrictEqual(record.outcome?.containment, { remote_claims: ["filesystem"] })
      }))

    it.live("without the caller's opt-in it is denied containment.unsupported before operation_started; nothing sent", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const sent = yield* Effect.promise(served.executes)
        const { outcome, started } = yield* governedWrite(backend, callerPolicy())
        assert.strictEqual(reasonCode(outcome), "containment.unsupported")
        assert.strictEqual(outcome.stage, "bind_context")
        assert.isUndefined(started)
        assert.strictEqual(yield* Effect.promise(served.executes), sent)
        assert.deepStrictEqual(yield* counters(), before)
      }))

    it.live("a signed body claiming containment or a preflight is refused, and nothing runs", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const forgeries = [
          { containment: { remote_claims: ["filesystem"] } },
          { preflight: { report_digest: "0".repeat(64), capability: { containment: { filesystem: "enforced" } } } }
        ]
        for (const [i, extra] of forgeries.entries()) {
          const { body, headers } = yield* Effect.promise(() => signedWrite(`forged-${name}-${i}`, extra))
          const response = yield* Effect.promise(() =>
            fetch(new URL("/v1/execute", served.url), { method: "POST", headers, body: body as BodyInit })
          )
          assert.strictEqual(response.status, 400)
          assert.deepInclude(yield* Effect.promise(() => response.json()), {
            _tag: "EdgeRequestInvalid",
            reason: "body_invalid"
          })
        }
        assert.deepStrictEqual(yield* counters(), before)
      }))
  })

suite("node:http", async () => {
  const handler = Handler.make(Contained.options())
  const served = await serveNode(handler.fetch, () => Contained.counts)
  return { ...served, close: async () => (await served.close(), await handler.dispose()) }
})

suite("deno serve", () => serveDeno("edgeContainedServe.ts"))

describe("the edge decides containment itself", () => {
  // A signed call sent straight to the handler, as a caller that skipped its own admission would send it.
  const straight = (options: Handler.Options, idempotencyKey: string) =>
    Effect.promise(async () => {
      const handler = Handler.make(options)
      try {
        const { body, headers } = await signedWrite(idempotencyKey)
        const response = await handler.fetch(
          new Request("http://127.0.0.1/v1/execute", { method: "POST", headers, body: body as BodyInit })
        )
        return { status: response.status, body: await response.json() as { outcome: Record<string, any> } }
      } finally {
        await handler.dispose()
      }
    })

  it.live("a platform that claims no filesystem containment: denied there, containment.unsupported, unrun", () =>
    Effect.gen(function*() {
      const before = Contained.counts.written
      const answer = yield* straight(Contained.options({ claims: [] }), "no-claim")
      assert.strictEqual(answer.status, 200)
      assert.strictEqual(answer.body.outcome._tag, "denied")
      assert.strictEqual(answer.body.outcome.reason.code, "containment.unsupported")
      assert.strictEqual(Contained.counts.written, before)
    }))

  it.live("an edge policy that does not accept remote claims: denied there, though its platform claims it", () =>
    Effect.gen(function*() {
      const before = Contained.counts.written
      const answer = yield* straight(Contained.options({ policy: Contained.policy() }), "no-opt-in")
      assert.strictEqual(answer.body.outcome._tag, "denied")
      assert.strictEqual(answer.body.outcome.reason.code, "containment.unsupported")
      assert.strictEqual(Contained.counts.written, before)
    }))

  it.live("a claim that covers only part of a kind (write roots, not read roots) does not satisfy it", () =>
    Effect.gen(function*() {
      const before = Contained.counts.written
      const answer = yield* straight(
        Contained.options({ claims: [Contained.filesystemClaims[1]] }),
        "half-claim"
      )
      assert.strictEqual(answer.body.outcome.reason.code, "containment.unsupported")
      assert.strictEqual(Contained.counts.written, before)
    }))

  it.live("where the platform claims it and the edge's policy accepts it, the same straight call runs", () =>
    Effect.gen(function*() {
      const before = Contained.counts.written
      const answer = yield* straight(Contained.options(), "claimed")
      assert.strictEqual(answer.body.outcome._tag, "succeeded")
      assert.deepStrictEqual(answer.body.outcome.containment, { remote_claims: ["filesystem"] })
      assert.strictEqual(Contained.counts.written, before + 1)
    }))
})
