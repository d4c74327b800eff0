/**
 * `writ backend probe NAME`: the report a backend gives here, from bubblewrap's and deno's trial runs, with the
 * digest a governed call admitted on it records; an unknown backend is bad input.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { beforeAll } from "vitest"
import * as BubblewrapBackend from "../../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../../adapters/node/DenoBackend.ts"
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
      secrets: "enforced"
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

  it("prints deno's report from its trial run: enforced by the runtime, with the deno version", async () => {
    const probed = await writ("backend", "probe", "deno", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { capability_digest, report } = JSON.parse(probed.stdout)
    const decoded = Schema.decodeUnknownSync(ActionBackendCapabilityReport)(report)
    assert.deepStrictEqual(decoded.containment, {
      filesystem: "enforced",
      network: "enforced",
      subprocess: "enforced",
      environment: "enforced",
      secrets: "enforced"
    })
    const enforced = (decoded.capabilities ?? []).filter((claim) => claim.level === "enforced")
    assert.deepStrictEqual(enforced.map((claim) => claim.name), [...DenoBackend.claimed])
    assert.isTrue(enforced.every((claim) => claim.by === "runtime"))
    assert.strictEqual(decoded.mechanism?.name, "deno")
    assert.match(decoded.mechanism?.version ?? "", /^2\.\d+\.\d+$/)
    const digest = await Effect.runPromise(Digest.canonical(report).pipe(Effect.provide(NodeDigest.layer)))
    assert.strictEqual(capability_digest, digest)
    const text = await writ("backend", "probe", "deno")
    assert.include(text.stdout, "(deno 2.")
    assert.match(text.stdout, /writ\.subprocess\.spawn@1 +enforced +runtime +probe/)
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
    assert.include(refused.stderr + refused.stdout, "in-process, bubblewrap, deno")
  }, 60_000)
})
