/**
 * Hostile `--args` on the built `writ` binary: nested thousands of levels deep, with a duplicate key, with a
 * `__proto__` key. Each is bad input (exit 2) naming what was wrong, and nothing runs: no `--db` file is created.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import { parseJsonObject } from "../../runtime/node/commands/internal/input.ts"
import { bin, build, run } from "../fixtures/cli.ts"
import { root } from "../fixtures/sources.ts"

const deep = `{"a":${"[".repeat(5000)}${"]".repeat(5000)},"b":1}`
const policy = join(root, "test/fixtures/policies/agent.yaml")

describe("writ exec --args, hostile", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("deep, duplicate-key and __proto__ arguments exit 2 naming what was wrong, and create no --db file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "writ-hostile-"))
    const proto = "--args is refused: $.__proto__: the key \"__proto__\" is refused"
    const cases: ReadonlyArray<readonly [string, string, ReadonlyArray<string>]> = [
      [deep, "governed", ["--args is refused: $.a[0][0]", "]: nested deeper than 128 levels"]],
      [deep, "minimal", ["nested deeper than 128 levels"]],
      ["{\"a\":1,\"a\":40,\"b\":2}", "governed", ["--args is refused: $.a: duplicate key \"a\""]],
      ["{\"a\":1,\"b\":2,\"__proto__\":{\"x\":1}}", "governed", [proto]],
      ["{\"__proto__\":{\"a\":1},\"b\":2}", "durable", [proto]]
    ]
    const runs = cases.map(([args, profile, messages], i) => {
      const db = join(dir, `${profile}-${i}.db`)
      const options = profile === "minimal" ? [] : ["--db", db]
      return {
        db,
        messages,
        result: run("node", [bin, "exec", "calc.add", "--args", args, "--profile", profile, ...options])
      }
    })
    for (const { db, messages, result } of runs) {
      const { status, stderr, stdout } = await result
      assert.strictEqual(status, 2, `${db}: ${stderr}`)
      for (const message of messages) assert.include(stderr, message, db)
      assert.notInclude(stderr, "internal error")
      assert.strictEqual(stdout, "", "nothing ran")
      assert.isFalse(existsSync(db), `${db} was created`)
    }
  }, 120_000)

  it("policy explain refuses the same --args", async () => {
    const explained = await run("node", [
      bin,
      "policy",
      "explain",
      policy,
      "--action",
      "calc.add",
      "--args",
      "{\"a\":1,\"a\":2}"
    ])
    assert.strictEqual(explained.status, 2, explained.stderr)
    assert.include(explained.stderr, "--args is refused: $.a: duplicate key \"a\"")
  }, 60_000)

  it(
    "an action name or run id 100,000 characters long is refused by a bounded excerpt naming the rule it breaks",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "writ-hostile-"))
      const long = "a".repeat(100_000)
      const db = join(dir, "writ.db")
      assert.strictEqual((await run("node", [bin, "policy", "put", policy, "--db", db])).status, 0)
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [["exec", long, "--db", join(dir, "new.db")], `ACTION "${"a".repeat(64)}…" is refused: `],
        [["policy", "explain", policy, "--action", long], `--action "${"a".repeat(64)}…" is refused: `],
        [["evidence", "log", "--db", db, "--run", long], `--run "${"a".repeat(64)}…" is not a run id`]
      ]
      for (const [args, message] of cases) {
        const result = await run("node", [bin, ...args])
        assert.strictEqual(result.status, 2, result.stderr.slice(0, 300))
        assert.include(result.stderr, message)
        assert.isBelow(result.stderr.length, 1000, args[0])
      }
      assert.isFalse(existsSync(join(dir, "new.db")))
    },
    120_000
  )

  // A command line holds at most 128 KiB per argument on Linux, under the 1 MiB limit: the parse site is asked directly.
  it("arguments larger than the size limit are bad input naming the limit", () => {
    const huge = JSON.stringify({ text: "x".repeat(1 << 20) })
    const parsed = parseJsonObject(huge, "--args")
    assert.isTrue(Either.isLeft(parsed))
    if (Either.isLeft(parsed)) {
      assert.strictEqual(parsed.left._tag, "CliInputError")
      assert.strictEqual(
        parsed.left.message,
        `--args is refused: $: ${huge.length} characters, more than the size limit of 1048576`
      )
    }
  })
})
