import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as WebCryptoDigest from "../../adapters/WebCryptoDigest.ts"
import * as Action from "../../core/Action.ts"
import * as ActionDescriptor from "../../core/ActionDescriptor.ts"

const define = (name: string, extra: Partial<Action.Spec<object, object, string, string>>) =>
  Action.make({ name, input: Schema.Struct({}), output: Schema.String, handler: () => "ok", ...extra })

describe("declared needs on an action", () => {
  it.effect("an MCP tool, secrets and environment variables are declared, frozen and pinned by the digest", () =>
    Effect.gen(function*() {
      const plain = define("github.search", {})
      const tool = define("github.search", {
        mcp: { server: "github", tool: "search" },
        secrets: [{ namespace: "github/token", exposure: "reference_only" }],
        environment: [{ variable: "HOME", exposure: "read" }]
      })
      assert.strictEqual(tool.source.kind, "mcp")
      assert.deepStrictEqual(tool.mcp, { server: "github", tool: "search", resources: [] })
      assert.isTrue(Object.isFrozen(tool.mcp) && Object.isFrozen(tool.mcp!.resources) && Object.isFrozen(tool.secrets))
      assert.isTrue(Object.isFrozen(tool.secrets![0]) && Object.isFrozen(tool.environment![0]))
      const [a, b] = yield* Effect.forEach([plain, tool], ActionDescriptor.describe)
      assert.isFalse("mcp" in a! || "secrets" in a! || "environment" in a!)
      assert.deepStrictEqual(b!.mcp, tool.mcp)
      assert.deepStrictEqual(b!.secrets, tool.secrets)
      assert.notStrictEqual(a!.digest, b!.digest)
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it("an invalid declaration fails with the field it names", () => {
    const field = (extra: Partial<Action.Spec<object, object, string, string>>) => {
      try {
        define("x.y", extra)
      } catch (error) {
        return error instanceof Action.ActionDefinitionError ? `${error.field}: ${error.detail}` : String(error)
      }
      return "accepted"
    }
    const local = Action.Provenance.make({ kind: "local" })
    assert.match(field({ mcp: { server: "github", tool: "search" }, source: local }), /^source: an MCP action/)
    assert.match(field({ source: Action.Provenance.make({ kind: "mcp" }) }), /^mcp: an MCP action/)
    assert.match(field({ mcp: { server: "*", tool: "search" } }), /^mcp: .*no \*/s)
    assert.match(field({ mcp: { server: "github", tool: "search", resources: ["repo://*"] } }), /^mcp: .*no \*/s)
    assert.match(field({ mcp: { server: "github", tool: "search", extra: 1 } as never }), /^mcp: .*extra/s)
    assert.match(field({ secrets: [{ namespace: "aws/*", exposure: "inject" }] }), /^secrets\[0\]: /)
    assert.match(field({ secrets: [{ namespace: "aws", exposure: "forbid" as never }] }), /^secrets\[0\]: /)
    assert.match(field({ environment: [{ variable: "AWS_*", exposure: "read" }] }), /^environment\[0\]: /)
    assert.strictEqual(
      field({ environment: [{ variable: "HOME", exposure: "read" }, { variable: "HOME", exposure: "inject" }] }),
      "environment: names HOME twice"
    )
    assert.strictEqual(field({ mcp: { server: "github", tool: "search" }, secrets: [], environment: [] }), "accepted")
  })
})
