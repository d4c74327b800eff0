/**
 * `writ policy put|activate|retire --db FILE` on real SQLite files: each step once, bad input exits 2 naming it with
 * nothing created or changed, and an operation certified under a version before it was retired still certifies.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import { build, writ } from "../fixtures/cli.ts"
import { root } from "../fixtures/sources.ts"

const policy = join(root, "test/fixtures/policies/agent.yaml")

const freshDir = () => mkdtempSync(join(tmpdir(), "writ-lifecycle-"))

const writJson = async (...args: Array<string>) => {
  const result = await writ(...args, "--json")
  return { ...result, out: result.status === 2 || result.stdout === "" ? undefined : JSON.parse(result.stdout) }
}

describe("writ policy put|activate|retire", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("takes a version staged -> active -> retired, each step once, and never back", async () => {
    const db = join(freshDir(), "policy.db")
    const put = await writJson("policy", "put", policy, "--db", db)
    assert.strictEqual(put.status, 0, put.stderr)
    assert.deepStrictEqual([put.out.policy_id, put.out.version, put.out.release_state], ["repo-agent", "1", "staged"])
    const again = await writJson("policy", "put", policy, "--db", db)
    assert.deepStrictEqual([again.status, again.out.digest], [0, put.out.digest])

    const active = await writJson(
      "policy",
      "activate",
      "repo-agent",
      "1",
      "--db",
      db,
      "--by",
      "ops",
      "--bind",
      "role:dev"
    )
    assert.strictEqual(active.status, 0, active.stderr)
    assert.deepStrictEqual(
      [active.out.release_state, active.out.activated_by, active.out.bound, active.out.digest],
      ["active", "ops", "role:dev", put.out.digest]
    )
    const forTenant = await writJson(
      "policy",
      "activate",
      "repo-agent",
      "1",
      "--db",
      db,
      "--bind",
      "global",
      "--tenant",
      "t1"
    )
    assert.deepStrictEqual([forTenant.out.bound, forTenant.out.bound_tenant], ["global", "t1"])
    const text = await writ("policy", "activate", "repo-agent", "1", "--db", db)
    assert.match(text.stdout, /^repo-agent@1 {2}digest [0-9a-f]{64} {2}active \(activated by ops at /)

    const retired = await writJson("policy", "retire", "repo-agent", "1", "--db", db, "--by", "auditor")
    assert.strictEqual(retired.status, 0, retired.stderr)
    assert.deepStrictEqual(
      [retired.out.release_state, retired.out.retired_by, retired.out.activated_by],
      ["retired", "auditor", "ops"]
    )
    const retiredAgain = await writJson("policy", "retire", "repo-agent", "1", "--db", db, "--by", "someone")
    assert.deepStrictEqual([retiredAgain.status, retiredAgain.out.retired_by], [0, "auditor"])

    const reactivated = await writ("policy", "activate", "repo-agent", "1", "--db", db)
    assert.strictEqual(reactivated.status, 2)
    assert.include(reactivated.stderr, "policy repo-agent@1 is retired: it is never active again")
    const put2 = await writJson("policy", "put", policy, "--db", db)
    assert.deepStrictEqual([put2.status, put2.out.release_state], [0, "retired"])
  }, 120_000)

  it("bad input exits 2 naming it; nothing is created, and nothing stored changes", async () => {
    const dir = freshDir()
    const db = join(dir, "new.db")
    const bad = join(dir, "bad.json")
    writeFileSync(bad, JSON.stringify({ policy_id: "x", version: "1", rules: [{ kind: "action", effect: "allow" }] }))
    const refused = await writ("policy", "put", bad, "--db", db)
    assert.strictEqual(refused.status, 2)
    assert.include(refused.stderr, "$.rules.0.action_patterns: is missing")
    assert.isFalse(existsSync(db), "a declaration that does not compile creates no database")

    assert.strictEqual((await writ("policy", "put", policy, "--db", db)).status, 0)
    const conflicting = join(dir, "conflicting.yaml")
    writeFileSync(conflicting, readFileSync(policy, "utf-8").replace("mode: safe", "mode: read_only"))
    const conflict = await writ("policy", "put", conflicting, "--db", db)
    assert.strictEqual(conflict.status, 2, conflict.stderr)
    assert.match(conflict.stderr, /policy repo-agent@1 is stored with digest [0-9a-f]{64}; refusing [0-9a-f]{64}/)

    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["retire", "repo-agent", "1", "--db", db], "policy repo-agent@1 is staged, not active"],
      [["activate", "repo-agent", "9", "--db", db], "no policy repo-agent@9 is stored"],
      [["activate", " repo-agent", "1", "--db", db], "ID \" repo-agent\" is not an id"],
      [["activate", "repo-agent", "x".repeat(201), "--db", db], "VERSION \"xxx"],
      [["activate", "repo-agent", "1", "--db", db, "--by", ""], "--by \"\" is not an id"],
      [["activate", "repo-agent", "1", "--db", db, "--bind", "team:dev"], "--bind \"team:dev\" is not global"],
      [["activate", "repo-agent", "1", "--db", db, "--tenant", "t1"], "--tenant names whose calls --bind routes"],
      [
        ["activate", "repo-agent", "1", "--db", db, "--bind", "global", "--tenant", " t"],
        "--tenant \" t\" is not an id"
      ],
      [["activate", "repo-agent", "1", "--db", join(dir, "missing.db")], "missing.db"]
    ]
    for (const [args, message] of cases) {
      const result = await writ("policy", ...args)
      assert.strictEqual(result.status, 2, `${args.join(" ")}: ${result.stderr}`)
      assert.include(result.stderr, message, args.join(" "))
    }
    assert.isFalse(existsSync(join(dir, "missing.db")))
    const state = await writJson("policy", "put", policy, "--db", db)
    assert.strictEqual(state.out.release_state, "staged", "no refused step changed the stored version")
  }, 120_000)

  it(
    "an operation certified under a version before it was retired still certifies; a call pinning it is refused",
    async () => {
      const dir = freshDir()
      const db = join(dir, "exec.db")
      const call = ["exec", "calc.add", "--args", "{\"a\":2,\"b\":40}", "--db", db]
      const before = await writJson(...call, "--profile", "certifiable")
      assert.strictEqual(before.status, 0, before.stderr)
      assert.isTrue(before.out.certificate_verification.valid)
      const certificate = join(dir, "certificate.json")
      writeFileSync(certificate, JSON.stringify(before.out.certificate))

      const retired = await writJson("policy", "retire", "demo-agent", "1", "--db", db)
      assert.deepStrictEqual([retired.status, retired.out.release_state], [0, "retired"])

      const verified = await writJson("certificate", "verify", "--db", db, "--certificate", certificate)
      assert.deepStrictEqual([verified.status, verified.out.valid, verified.out.failure_code], [0, true, null])
      const chain = await writJson("evidence", "verify", "--db", db, "--chain", before.out.chain_id)
      assert.strictEqual(chain.status, 0, chain.stderr)

      const after = await writJson(...call, "--profile", "governed")
      assert.strictEqual(after.status, 1, after.stderr)
      assert.deepStrictEqual([after.out._tag, after.out.reason], ["denied", {
        code: "policy.not_active",
        detail: "demo-agent@1 is retired"
      }])
    },
    120_000
  )
})
