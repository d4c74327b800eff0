/**
 * `writ backend probe NAME`: the report a backend gives here, from bubblewrap's trial sandbox, with the digest a
 * governed call admitted on it records; an unknown backend is bad input.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { beforeAll } from "vitest"
import * as BubblewrapBackend from "../../adapters/node/BubblewrapBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import { ActionBackendCapabilityReport } from "../../core/action/ActionExecutionBackend.ts"
import * as Digest from "../../core/base/Digest.ts"
import { build, writ } from "../fixtures/cli.ts"

describe("writ backend probe", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("prints bubblewrap's verified report and its digest, which recomputes from the report", async () => {
    const probed = await writ("backend", "probe", "bubblewrap", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { capability_digest, report } = JSON.parse(probed.stdout)
    const decoded = Schema.decodeUnknownSync(ActionBackendCapabilityReport)(report)
    assert.deepStrictEqual(decoded.containment, {
      filesystem: "enforced",
      network: "enforced",
      subprocess: "unsupported",
      environment: "enforced",
      secrets: "unsupported"
    })
    const claimed = (decoded.capabilities ?? []).filter((claim) => claim.level === "enforced").map((claim) =>
      claim.name
    )
    assert.deepStrictEqual(claimed, [...BubblewrapBackend.claimed])
    const digest = await Effect.runPromise(Digest.canonical(report).pipe(Effect.provide(NodeDigest.layer)))
    assert.strictEqual(capability_digest, digest)
    const text = await writ("backend", "probe", "bubblewrap")
    assert.include(text.stdout, "writ.network.none@1            enforced")
    assert.include(text.stdout, `capability digest: ${digest}`)
  }, 60_000)

  it("reports the in-process backend as containing nothing", async () => {
    const probed = await writ("backend", "probe", "in-process", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { report } = JSON.parse(probed.stdout)
    assert.deepStrictEqual(Object.values(report.containment), Array(5).fill("unsupported"))
  }, 60_000)

  it("an unknown backend is bad input, naming the ones there are", async () => {
    const refused = await writ("backend", "probe", "docker")
    assert.strictEqual(refused.status, 2)
    assert.include(refused.stderr + refused.stdout, "in-process, bubblewrap")
  }, 60_000)
})
