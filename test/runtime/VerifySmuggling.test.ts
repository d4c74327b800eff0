/**
 * `writ backend probe --verify` judges the destinations attack by what the host's listeners saw. Here the attack's own
 * attempts go from its real action (`verify.reach`, run in-process) through a loopback bridge to a real destination
 * proxy for its grant, as they do from a sandbox: with the proxy as writ runs it the smuggling attempts are refused and
 * the verdict is `blocked`; with the proxy's Host-header check, or its TLS SNI check, left out, the smuggled request
 * reaches the granted listener and the verdict is `escaped`, naming it. The direct attempt is left out: in-process it
 * would connect (a sandbox's network namespace is what stops it, not the proxy).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as net from "node:net"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as DestinationProxy from "../../adapters/node/internal/destinationProxy.ts"
import { scopedVariable } from "../../adapters/node/internal/verifyScenario.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import { destinationAttempts, judgeDestinations, networkGround } from "../../runtime/node/commands/internal/verify.ts"
import * as Hostile from "../../runtime/node/HostileActions.ts"

const layer = ActionExecutor.layerMinimal().pipe(
  Layer.provideMerge(
    ActionRegistry.layerWith(Hostile.all).pipe(
      Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)),
      Layer.merge(InProcessBackend.layer)
    )
  )
)

/** A loopback port joined to the proxy's unix socket, as the sandbox's bridge joins them. */
const bridge = (socketPath: string) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: net.Server; readonly port: number }>((resume) => {
      const server = net.createServer((client) => {
        const upstream = net.connect({ path: socketPath })
        client.on("error", () => upstream.destroy())
        upstream.on("error", () => client.destroy())
        client.pipe(upstream)
        upstream.pipe(client)
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({ server, port: (server.address() as net.AddressInfo).port })))
    }),
    ({ server }) =>
      Effect.async<void>((resume) =>
        void server.close(() => resume(Effect.void))
      )
  )

/** The destinations attack's proxied attempts through a real proxy (`unchecked`: one check left out); its verdict. */
const attack = (unchecked?: DestinationProxy.Options["unchecked"]) =>
  Effect.scoped(Effect.gen(function*() {
    const ground = yield* networkGround
    const proxy = yield* DestinationProxy.listen(
      { gates: [{ gate_id: "verify", allow: [...ground.grant], deny: [] }] },
      unchecked === undefined ? {} : { unchecked }
    )
    yield* scopedVariable("HTTP_PROXY", `http://127.0.0.1:${(yield* bridge(proxy.path)).port}`)
    const attempts = destinationAttempts(ground.granted.port).filter((attempt) => attempt.request !== undefined)
    const { context, request } = yield* Ingress.prepare(
      { action: Hostile.reach.name, arguments: { attempts } },
      { principal: "writ-verify", effect_backend: InProcessBackend.make.ref }
    )
    const outcome = yield* (yield* ActionExecutor.ActionExecutor).execute(request, { context })
    yield* Effect.sleep("50 millis")
    return {
      judged: judgeDestinations(ground, outcome),
      outcome,
      refusals: proxy.refusals.map((refusal) => refusal.reason),
      received: [...ground.granted.received]
    }
  })).pipe(Effect.provide(layer))

describe("backend probe --verify: a smuggled destination is judged escaped, and the real proxy blocks it", () => {
  it.live(
    "the proxy as writ runs it refuses every smuggling attempt: blocked, the granted listener reached",
    () =>
      Effect.gen(function*() {
        const { judged, outcome, received, refusals } = yield* attack()
        assert.strictEqual(outcome._tag, "succeeded")
        assert.deepStrictEqual(judged.verdict, "blocked", judged.detail)
        assert.include(judged.detail, "only the granted listener was reached")
        assert.deepStrictEqual(received, ["ping\n"])
        assert.isTrue(refusals.some((reason) => reason.startsWith("the Host header 127.0.0.3")), refusals.join("; "))
        assert.isTrue(refusals.some((reason) => reason.startsWith("TLS SNI 127.0.0.3")), refusals.join("; "))
      }),
    60_000
  )

  it.live(
    "without the Host-header check, the plain request naming 127.0.0.3 reaches 127.0.0.2: escaped",
    () =>
      Effect.gen(function*() {
        const { judged, received, refusals } = yield* attack("host_header")
        assert.strictEqual(judged.verdict, "escaped", judged.detail)
        assert.strictEqual(judged.detail, "127.0.0.2 (smuggled) saw a connection")
        assert.isTrue(
          received.some((first) => /^GET \/ HTTP\/1\.1\r\nhost: 127\.0\.0\.3:/i.test(first)),
          received.join("|")
        )
        assert.isTrue(refusals.some((reason) => reason.startsWith("TLS SNI 127.0.0.3")), refusals.join("; "))
      }),
    60_000
  )

  it.live(
    "without the TLS SNI check, the ClientHello naming 127.0.0.3 reaches 127.0.0.2: escaped",
    () =>
      Effect.gen(function*() {
        const { judged, received, refusals } = yield* attack("tls_sni")
        assert.strictEqual(judged.verdict, "escaped", judged.detail)
        assert.strictEqual(judged.detail, "127.0.0.2 (smuggled) saw a connection")
        assert.isTrue(received.some((first) => first.startsWith("\x16\x03\x01") && first.includes("127.0.0.3")))
        assert.isTrue(refusals.some((reason) => reason.startsWith("the Host header 127.0.0.3")), refusals.join("; "))
      }),
    60_000
  )
})
