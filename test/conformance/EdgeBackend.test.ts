/**
 * The edge backend against the real edge handler, served on a real Node HTTP server on 127.0.0.1 and under the real
 * `deno serve --host 127.0.0.1`, tested from the attacker's side: unsigned, expired, replayed, mis-signed and tampered
 * requests are refused before any policy and run nothing (the handler's actions count their runs); a lost answer is
 * `ambiguous`, is never re-sent, and reconciliation reports what the edge did; a denial by the edge's policy is a
 * typed `denied` outcome here.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as MemoryNonceStore from "../../adapters/memory/MemoryNonceStore.ts"
import * as EdgeBackend from "../../adapters/web/EdgeBackend.ts"
import * as ExecutionLog from "../../adapters/web/EdgeExecutionLog.ts"
import * as EdgeSignature from "../../adapters/web/EdgeSignature.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"
import { ActionExecutionBackend } from "../../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { toHex } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Handler from "../../runtime/edge/Handler.ts"
import * as Edge from "../fixtures/edgeActions.ts"
import { type Served, serveDeno, serveNode } from "../fixtures/edgeServer.ts"

const encoder = new TextEncoder()

/** The headers an attacker crafts: every field chosen, signed with `secret` over what it names. */
const craft = async (fields: EdgeSignature.Signed & { readonly secret: string }) => {
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(fields.secret),
    {
      name: "HMAC",
      hash: "SHA-256"
    },
    false,
    ["sign"]
  )
  const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(EdgeSignature.stringToSign(fields)))
  return {
    "writ-key-id": fields.keyId,
    "writ-created": String(fields.created),
    "writ-expires": String(fields.expires),
    "writ-nonce": fields.nonce,
    "writ-content-sha256": fields.contentSha256,
    "writ-signature": toHex(new Uint8Array(signature))
  }
}

let nonces = 0
const nonce = () => `attacker-nonce-${Date.now()}-${++nonces}-padding`

const descriptorDigest = (definition: ActionDefinition) =>
  Effect.runPromise(
    Effect.map(Effect.provide(ActionDescriptor.describe(definition), WebCryptoDigest.layer), (d) => d.digest)
  )

/** A valid execute body for calc.add under a fresh idempotency key. */
const sumBody = async (key: string, a = 2, b = 40) =>
  encoder.encode(JSON.stringify({
    idempotency_key: key,
    request_id: `req-${key}`,
    action: "calc.add",
    version: "1",
    descriptor_digest: await descriptorDigest(Edge.actions[0]!),
    arguments: { a, b }
  }))

/** Headers signed by the caller's real key for a request, with any field overridden. */
const signedFor = async (
  method: string,
  path: string,
  body: Uint8Array,
  override: Partial<EdgeSignature.Signed & { readonly secret: string }> = {}
) => {
  const now = Math.floor(Date.now() / 1000)
  return craft({
    method,
    path,
    keyId: Edge.key.keyId,
    created: now,
    expires: now + 60,
    nonce: nonce(),
    contentSha256: await EdgeSignature.sha256Hex(body),
    secret: Edge.key.secret,
    ...override
  })
}

const post = (served: Served, headers: Record<string, string>, body: Uint8Array, path = "/v1/execute") =>
  fetch(new URL(path, served.url), { method: "POST", headers, body: body as BodyInit })

const refusal = async (response: Response) => {
  assert.strictEqual(response.status, 401)
  const body = await response.json() as { _tag: string; reason: string }
  assert.strictEqual(body._tag, "EdgeRequestRefused")
  return body.reason
}

const backendOptions = (served: Served, extra: Partial<EdgeBackend.Options> = {}): EdgeBackend.Options => ({
  url: served.url,
  keyId: Edge.key.keyId,
  key: Edge.key.secret,
  timeout: "3 seconds",
  ...extra
})

/** A local minimal executor whose backend is the edge; the local registry holds the same actions. */
const localLayer = (backend: EdgeBackend.EdgeBackend, actions: ReadonlyArray<ActionDefinition> = Edge.actions) =>
  ActionExecutor.layerMinimal().pipe(
    Layer.provideMerge(
      Layer.merge(ActionRegistry.layerWith(actions), Layer.succeed(ActionExecutionBackend, backend))
    ),
    Layer.provideMerge(Layer.merge(WebCryptoDigest.layer, IdGenerator.layerCrypto))
  )

const execute = (
  backend: EdgeBackend.EdgeBackend,
  call: Ingress.Call,
  actions: ReadonlyArray<ActionDefinition> = Edge.actions
) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const { context, request } = yield* Ingress.prepare(call, {
      principal: "local-user",
      effect_backend: EdgeBackend.ref
    })
    return yield* executor.execute(request, { context })
  }).pipe(Effect.provide(localLayer(backend, actions)))

/** The attack suite, against one served handler. */
const suite = (name: string, start: () => Promise<Served>, runtime: string) =>
  describe(`edge backend against the handler on ${name}`, () => {
    let served: Served
    let backend: EdgeBackend.EdgeBackend
    beforeAll(async () => {
      served = await start()
      backend = await Effect.runPromise(EdgeBackend.make(backendOptions(served)))
    }, 60_000)
    afterAll(() => served?.close())

    const ran = async () => (await served.invocations())["calc.add"]!
    // Every counter at once: the actions' runs and the calls the edge's executor concluded (its policy included).
    const counters = () => Effect.promise(served.invocations)

    it.live("a signed call runs through the edge's executor and its result comes back", () =>
      Effect.gen(function*() {
        const before = yield* Effect.promise(ran)
        const outcome = yield* execute(backend, { action: "calc.add", arguments: { a: 2, b: 40 } })
        assert.strictEqual(outcome._tag, "succeeded")
        assert.strictEqual(outcome._tag === "succeeded" ? outcome.result : undefined, 42)
        assert.strictEqual(yield* Effect.promise(ran), before + 1)
      }))

    it.live("an unsigned request is refused before any policy, and nothing runs or is recorded", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const body = yield* Effect.promise(() => sumBody("unsigned-key"))
        const response = yield* Effect.promise(() => post(served, { "content-type": "application/json" }, body))
        assert.strictEqual(yield* Effect.promise(() => refusal(response)), "unsigned")
        const partial = yield* Effect.promise(async () =>
          post(served, { "writ-key-id": Edge.key.keyId, "writ-nonce": nonce() }, body)
        )
        assert.strictEqual(yield* Effect.promise(() => refusal(partial)), "unsigned")
        assert.deepStrictEqual(yield* counters(), before)
        const record = yield* backend.reconcile("unsigned-key")
        assert.strictEqual(record.state, "unknown")
      }))

    it.live("an expired, not yet valid or overlong signature is refused, and nothing runs", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const now = Math.floor(Date.now() / 1000)
        const skew = EdgeSignature.defaultClockSkewSeconds
        const cases = [
          [{ created: now - 120, expires: now - skew - 5 }, "expired"],
          [{ created: now + skew + 30, expires: now + skew + 60 }, "not_yet_valid"],
          [{ created: now, expires: now + EdgeSignature.defaultMaxLifetimeSeconds + 1 }, "lifetime_too_long"]
        ] as const
        for (const [times, reason] of cases) {
          const body = yield* Effect.promise(() => sumBody(`timed-${reason}`))
          const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body, times))
          const response = yield* Effect.promise(() => post(served, headers, body))
          assert.strictEqual(yield* Effect.promise(() => refusal(response)), reason)
          assert.strictEqual((yield* backend.reconcile(`timed-${reason}`)).state, "unknown")
        }
        // Just inside the skew bound: accepted, so the bound is the documented one and not a wider one.
        const body = yield* Effect.promise(() => sumBody("inside-skew"))
        const headers = yield* Effect.promise(() =>
          signedFor("POST", "/v1/execute", body, { created: now - 60, expires: now - skew + 5 })
        )
        assert.strictEqual((yield* Effect.promise(() => post(served, headers, body))).status, 200)
        const after = yield* counters()
        assert.strictEqual(after["calc.add"], before["calc.add"]! + 1)
        assert.strictEqual(after.executor, before.executor! + 1)
      }))

    it.live("a replayed request is refused, and the action ran once", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const body = yield* Effect.promise(() => sumBody("replay-key"))
        const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body))
        const first = yield* Effect.promise(() => post(served, headers, body))
        assert.strictEqual(first.status, 200)
        const replay = yield* Effect.promise(() => post(served, headers, body))
        assert.strictEqual(yield* Effect.promise(() => refusal(replay)), "replayed")
        const after = yield* counters()
        assert.strictEqual(after["calc.add"], before["calc.add"]! + 1)
        assert.strictEqual(after.executor, before.executor! + 1)
      }))

    it.live("a request signed with the wrong key, or an unknown key id, is refused and nothing runs", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const body = yield* Effect.promise(() => sumBody("wrong-key"))
        const wrong = yield* Effect.promise(() =>
          signedFor("POST", "/v1/execute", body, { secret: Edge.otherKey.secret })
        )
        const refused = yield* Effect.promise(() => post(served, wrong, body))
        assert.strictEqual(yield* Effect.promise(() => refusal(refused)), "bad_signature")
        const unknown = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body, { keyId: "agent-9" }))
        const unknownRefused = yield* Effect.promise(() => post(served, unknown, body))
        assert.strictEqual(yield* Effect.promise(() => refusal(unknownRefused)), "unknown_key")
        assert.deepStrictEqual(yield* counters(), before)
      }))

    it.live("a tampered body, content digest or path is refused and nothing runs", () =>
      Effect.gen(function*() {
        const before = yield* counters()
        const body = yield* Effect.promise(() => sumBody("tamper-key", 1, 1))
        const evil = yield* Effect.promise(() => sumBody("tamper-key", 1000, 1000))
        const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body))
        const swapped = yield* Effect.promise(() => post(served, headers, evil))
        assert.strictEqual(yield* Effect.promise(() => refusal(swapped)), "body_digest_mismatch")
        const digest = yield* Effect.promise(() => EdgeSignature.sha256Hex(evil))
        const redigested = yield* Effect.promise(() =>
          post(served, { ...headers, "writ-content-sha256": digest, "writ-nonce": nonce() }, evil)
        )
        assert.strictEqual(yield* Effect.promise(() => refusal(redigested)), "bad_signature")
        const elsewhere = yield* Effect.promise(() => signedFor("POST", "/v1/capabilities", body))
        const moved = yield* Effect.promise(() => post(served, elsewhere, body))
        assert.strictEqual(yield* Effect.promise(() => refusal(moved)), "bad_signature")
        assert.deepStrictEqual(yield* counters(), before)
        assert.strictEqual((yield* backend.reconcile("tamper-key")).state, "unknown")
      }))

    it.live("another caller's authentic key cannot read or replay this caller's executions", () =>
      Effect.gen(function*() {
        const outcome = yield* execute(backend, { action: "calc.add", arguments: { a: 5, b: 5 } })
        assert.strictEqual(outcome._tag, "succeeded")
        assert.strictEqual((yield* backend.reconcile(outcome.attempt_id)).state, "concluded")
        const other = yield* EdgeBackend.make({
          ...backendOptions(served),
          keyId: Edge.otherKey.keyId,
          key: Edge.otherKey.secret
        })
        assert.strictEqual((yield* other.reconcile(outcome.attempt_id)).state, "unknown")
      }))

    it.live("a denial by the edge's policy is a typed denied outcome here, and the action did not run", () =>
      Effect.gen(function*() {
        const wiped = async () => (await served.invocations())["danger.wipe"]!
        const before = yield* Effect.promise(wiped)
        const sent = yield* Effect.promise(served.executes)
        const outcome = yield* execute(backend, { action: "danger.wipe", arguments: { target: "/" } })
        assert.strictEqual(outcome._tag, "denied")
        if (outcome._tag !== "denied") return
        assert.strictEqual(outcome.reason.code, "backend.remote_denied")
        assert.include(outcome.reason.detail ?? "", "denied")
        assert.strictEqual(yield* Effect.promise(served.executes), sent + 1)
        assert.strictEqual(yield* Effect.promise(wiped), before)
      }))

    it.live("the action's own failure at the edge is failed here, with its public code and message", () =>
      Effect.gen(function*() {
        const before = (yield* Effect.promise(served.invocations))["calc.div"]!
        const outcome = yield* execute(backend, { action: "calc.div", arguments: { a: 1, b: 0 } })
        assert.strictEqual(outcome._tag, "failed")
        if (outcome._tag !== "failed") return
        assert.strictEqual(outcome.failure.code, "calc.division_by_zero")
        assert.strictEqual(outcome.failure.message, "b is 0")
        assert.strictEqual((yield* Effect.promise(served.invocations))["calc.div"], before + 1)
      }))

    it.live(
      "a lost answer is ambiguous, is not re-sent, and reconciliation reports what the edge did",
      () =>
        Effect.gen(function*() {
          const before = yield* Effect.promise(ran)
          const sent = yield* Effect.promise(served.executes)
          const asked = yield* Effect.promise(served.reconciles)
          yield* Effect.promise(served.loseNext)
          const outcome = yield* execute(backend, { action: "calc.add", arguments: { a: 20, b: 22 } })
          assert.strictEqual(outcome._tag, "ambiguous")
          if (outcome._tag !== "ambiguous") return
          assert.strictEqual(outcome.reason.code, "backend.response_lost")
          assert.include(outcome.reason.detail ?? "", outcome.attempt_id)
          assert.strictEqual(yield* Effect.promise(served.executes), sent + 1)
          assert.strictEqual(yield* Effect.promise(ran), before + 1)
          // The backend reconciles only when asked: nothing reached /v1/executions on its own.
          assert.strictEqual(yield* Effect.promise(served.reconciles), asked)
          const record = yield* backend.reconcile(outcome.attempt_id)
          assert.strictEqual(record.state, "concluded")
          assert.strictEqual(record.outcome?._tag, "succeeded")
          assert.strictEqual(record.outcome?.result, 42)
          // Nothing was re-sent while reconciling.
          assert.strictEqual(yield* Effect.promise(served.executes), sent + 1)
          assert.strictEqual(yield* Effect.promise(served.reconciles), asked + 1)
        }),
      20_000
    )

    it.live("its report lists the platform's claims as remote and unverified; admission's containment stays unsupported", () =>
      Effect.gen(function*() {
        const report = yield* backend.probe
        assert.deepStrictEqual(Object.values(report.containment), Array(5).fill("unsupported"))
        assert.strictEqual(report.mechanism?.name, "writ-edge")
        assert.match(report.mechanism?.platform ?? "", new RegExp(`^${runtime} `))
        assert.match(report.verified_by, /^remote claim, not verified here/)
        assert.deepStrictEqual(
          report.capabilities?.map((claim) => [claim.name, claim.level, claim.by, claim.verified]),
          [
            ["writ.filesystem.write_roots@1", "enforced", "remote", "claimed"],
            ["writ.subprocess.spawn@1", "enforced", "remote", "claimed"],
            ["writ.network.none@1", "unsupported", undefined, "claimed"]
          ]
        )
      }))

    it.live("a call requiring containment is denied here before anything is sent", () =>
      Effect.gen(function*() {
        const contained = Action.make({
          name: "files.write",
          description: "needs filesystem containment",
          input: Schema.Struct({ path: Schema.String }),
          output: Schema.Void,
          containment: ["filesystem"],
          handler: () => undefined
        })
        const sent = yield* Effect.promise(served.executes)
        const outcome = yield* execute(backend, { action: "files.write", arguments: { path: "/x" } }, [contained])
        assert.strictEqual(outcome._tag, "denied")
        assert.strictEqual(outcome._tag === "denied" ? outcome.reason.code : "", "containment.unsupported")
        assert.strictEqual(yield* Effect.promise(served.executes), sent)
      }))
  })

suite("node:http", async () => {
  const handler = Handler.make(Edge.options())
  const served = await serveNode(handler.fetch, () => Edge.invocations)
  return { ...served, close: async () => (await served.close(), await handler.dispose()) }
}, "node")

suite("deno serve", serveDeno, "deno")

describe("edge handler workers and transport", () => {
  it.effect("a weak secret, a malformed key id or a URL that is not http(s) is refused when the backend is made", () =>
    Effect.gen(function*() {
      const made = (options: Partial<EdgeBackend.Options>) =>
        Effect.flip(EdgeBackend.make({ url: "http://127.0.0.1:9", keyId: "k", key: "x".repeat(32), ...options }))
      assert.strictEqual((yield* made({ key: "x".repeat(31) })).reason, "weak_key")
      assert.strictEqual((yield* made({ keyId: "a b" })).reason, "bad_key_id")
      assert.strictEqual((yield* made({ url: "file:///etc/passwd" })).reason, "bad_url")
      assert.strictEqual((yield* made({ url: "not a url" })).reason, "bad_url")
    }))

  it.live("a body over the limit is refused unread, announced or streamed, and nothing runs", () =>
    Effect.gen(function*() {
      const handler = Handler.make(Edge.options({ maxBodyBytes: 1024 }))
      const before = Edge.invocations["calc.add"]
      const big = new Uint8Array(4096).fill(32)
      const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", big))
      const announced = yield* Effect.promise(() =>
        handler.fetch(new Request("http://127.0.0.1/v1/execute", { method: "POST", headers, body: big as BodyInit }))
      )
      assert.strictEqual(announced.status, 413)
      assert.strictEqual((yield* Effect.promise(() => announced.json())).reason, "body_too_large")
      const stream = new ReadableStream<Uint8Array>({
        pull: (controller) => controller.enqueue(new Uint8Array(512))
      })
      const streamed = yield* Effect.promise(() =>
        handler.fetch(
          new Request(
            "http://127.0.0.1/v1/execute",
            { method: "POST", headers, body: stream, duplex: "half" } as RequestInit
          )
        )
      )
      assert.strictEqual(streamed.status, 413)
      assert.strictEqual(Edge.invocations["calc.add"], before)
      yield* Effect.promise(() => handler.dispose())
    }))

  it.live("a policy the handler cannot compile is a typed 503 and nothing runs", () =>
    Effect.gen(function*() {
      const handler = Handler.make(Edge.options({ policy: { policy_id: "", version: "1" } }))
      const before = Edge.invocations["calc.add"]
      const body = yield* Effect.promise(() => sumBody("bad-policy"))
      const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body))
      const response = yield* Effect.promise(() =>
        handler.fetch(new Request("http://127.0.0.1/v1/execute", { method: "POST", headers, body: body as BodyInit }))
      )
      assert.strictEqual(response.status, 503)
      assert.deepInclude(yield* Effect.promise(() => response.json()), {
        _tag: "EdgeRequestInvalid",
        reason: "policy_unavailable"
      })
      assert.strictEqual(Edge.invocations["calc.add"], before)
      yield* Effect.promise(() => handler.dispose())
    }))

  it("a handler refuses to be made with a weak caller key or two keys of one id", () => {
    const weak = () =>
      Handler.make(
        Edge.options({ keys: [{ keyId: "weak", secret: Redacted.make("short"), principal: "p" }] })
      )
    assert.throws(weak, /under 32 bytes/)
    const twice = () =>
      Handler.make(Edge.options({
        keys: [
          { keyId: "same", secret: Redacted.make("a".repeat(32)), principal: "p" },
          { keyId: "same", secret: Redacted.make("b".repeat(32)), principal: "q" }
        ]
      }))
    assert.throws(twice, /two keys have the id same/)
  })

  it.live("a request replayed to another worker sharing the nonce store is refused there", () =>
    Effect.gen(function*() {
      const shared = { nonces: MemoryNonceStore.make(), log: ExecutionLog.memory() }
      const one = Handler.make(Edge.options(shared))
      const two = Handler.make(Edge.options(shared))
      const before = Edge.invocations["calc.add"]
      const body = yield* Effect.promise(() => sumBody("worker-key"))
      const headers = yield* Effect.promise(() => signedFor("POST", "/v1/execute", body))
      const request = () =>
        new Request("http://127.0.0.1/v1/execute", { method: "POST", headers, body: body as BodyInit })
      assert.strictEqual((yield* Effect.promise(() => one.fetch(request()))).status, 200)
      const replayed = yield* Effect.promise(() => two.fetch(request()))
      assert.strictEqual(yield* Effect.promise(() => refusal(replayed)), "replayed")
      assert.strictEqual(Edge.invocations["calc.add"], before + 1)
      yield* Effect.promise(() => Promise.all([one.dispose(), two.dispose()]))
    }))

  it.live("a handler refused before sending (connection refused) concludes failed, not ambiguous", () =>
    Effect.gen(function*() {
      const closed = yield* Effect.promise(async () => {
        const handler = Handler.make(Edge.options())
        const served = await serveNode(handler.fetch, () => Edge.invocations)
        await served.close()
        return served
      })
      const backend = yield* EdgeBackend.make(backendOptions(closed))
      const outcome = yield* execute(backend, { action: "calc.add", arguments: { a: 1, b: 1 } })
      assert.strictEqual(outcome._tag, "failed")
      assert.strictEqual(outcome._tag === "failed" ? outcome.failure.code : "", "backend.remote_unreachable")
      const report = yield* backend.probe
      assert.match(report.verified_by, /^probe failed/)
      assert.deepStrictEqual(report.capabilities, [])
    }))
})
