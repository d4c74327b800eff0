/**
 * `writ exec --backend edge` and `writ backend probe edge`, with the built binary against a real edge handler on a
 * node:http server on 127.0.0.1 serving the demo's actions: the call runs there, a wrong secret is refused there
 * before anything runs, an incomplete address is bad input and nothing is sent.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import { ActionBackendCapabilityReport } from "../../core/action/ActionExecutionBackend.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as Demo from "../../runtime/Demo.ts"
import * as Handler from "../../runtime/edge/Handler.ts"
import { build, writ } from "../fixtures/cli.ts"
import { type Served, serveNode } from "../fixtures/edgeServer.ts"

const secret = "s".repeat(40)

/** Run the binary with WRIT_EDGE_KEY set to `key` (or unset). */
const withKey = async (key: string | undefined, ...args: Array<string>) => {
  const saved = process.env.WRIT_EDGE_KEY
  if (key === undefined) delete process.env.WRIT_EDGE_KEY
  else process.env.WRIT_EDGE_KEY = key
  try {
    return await writ(...args)
  } finally {
    if (saved === undefined) delete process.env.WRIT_EDGE_KEY
    else process.env.WRIT_EDGE_KEY = saved
  }
}

describe("writ and the edge backend", () => {
  let served: Served
  let handler: Handler.EdgeHandler
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
    handler = Handler.make({
      actions: Demo.actions,
      policy: { policy_id: "edge-demo", version: "1", mode: "rules", allow: { "calc.*": ["*"] } },
      keys: [{ keyId: "cli", secret: Redacted.make(secret), principal: "cli-user" }],
      claims: [{ name: "writ.subprocess.spawn@1", level: "enforced" }],
      platform: "test deployment"
    })
    served = await serveNode(handler.fetch, () => ({}))
  }, 240_000)
  afterAll(async () => {
    await served?.close()
    await handler?.dispose()
  })

  const edge = () => ["--backend", "edge", "--edge-url", served.url, "--edge-key-id", "cli"]

  it("writ exec --backend edge runs the call at the edge and prints its outcome", async () => {
    const sent = await served.executes()
    const ran = await withKey(secret, "exec", "calc.add", "--args", "{\"a\":2,\"b\":40}", ...edge(), "--json")
    assert.strictEqual(ran.status, 0, ran.stderr)
    const outcome = JSON.parse(ran.stdout)
    assert.strictEqual(outcome._tag, "succeeded")
    assert.strictEqual(outcome.result, 42)
    assert.strictEqual(await served.executes(), sent + 1)
  }, 60_000)

  it(
    "governed: a denial by the edge's policy is denied here, and the task boundary's chain still verifies",
    async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-edge-cli-"))
      const db = path.join(dir, "writ.db")
      const ran = await withKey(
        secret,
        "exec",
        "notes.read",
        "--args",
        "{\"id\":\"todo\"}",
        "--profile",
        "governed",
        "--db",
        db,
        ...edge(),
        "--json"
      )
      fs.rmSync(dir, { recursive: true, force: true })
      assert.strictEqual(ran.status, 1, ran.stderr)
      const outcome = JSON.parse(ran.stdout)
      assert.strictEqual(outcome._tag, "denied")
      assert.strictEqual(outcome.reason.code, "backend.remote_denied")
      assert.isTrue(outcome.verification.valid)
    },
    60_000
  )

  it("a wrong secret is refused by the handler: the outcome is failed, exit 1", async () => {
    const ran = await withKey("w".repeat(40), "exec", "calc.add", "--args", "{\"a\":1,\"b\":1}", ...edge(), "--json")
    assert.strictEqual(ran.status, 1, ran.stderr)
    const outcome = JSON.parse(ran.stdout)
    assert.strictEqual(outcome._tag, "failed")
    assert.strictEqual(outcome.failure.code, "backend.request_refused")
  }, 60_000)

  it("an incomplete edge address or an unset secret is bad input, and nothing is sent", async () => {
    const sent = await served.executes()
    const noUrl = await withKey(secret, "exec", "calc.add", "--backend", "edge", "--edge-key-id", "cli")
    assert.strictEqual(noUrl.status, 2)
    assert.include(noUrl.stderr + noUrl.stdout, "--edge-url")
    const noKey = await withKey(undefined, "exec", "calc.add", ...edge())
    assert.strictEqual(noKey.status, 2)
    assert.include(noKey.stderr + noKey.stdout, "WRIT_EDGE_KEY")
    assert.strictEqual(await served.executes(), sent)
  }, 60_000)

  it(
    "writ backend probe edge prints the platform's claims as remote and claimed, with the report's digest",
    async () => {
      const probed = await withKey(secret, "backend", "probe", "edge", "--url", served.url, "--key-id", "cli", "--json")
      assert.strictEqual(probed.status, 0, probed.stderr)
      const { capability_digest, report } = JSON.parse(probed.stdout)
      const decoded = Schema.decodeUnknownSync(ActionBackendCapabilityReport)(report)
      assert.deepStrictEqual(Object.values(decoded.containment), Array(5).fill("unsupported"))
      assert.deepStrictEqual(
        decoded.capabilities?.map((claim) => [claim.name, claim.level, claim.by, claim.verified]),
        [["writ.subprocess.spawn@1", "enforced", "remote", "claimed"]]
      )
      const digest = await Effect.runPromise(Digest.canonical(report).pipe(Effect.provide(NodeDigest.layer)))
      assert.strictEqual(capability_digest, digest)
    },
    60_000
  )
})
