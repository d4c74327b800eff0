import { assert, describe, it } from "@effect/vitest"

const expected = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env
  .WRIT_EXPECT_RUNTIME

describe("the suite's runtime", () => {
  it("runs on the runtime the test command asked for", () => {
    const actual = "Deno" in globalThis ? "deno" : "node"
    assert.strictEqual(actual, expected ?? "node")
  })
})
