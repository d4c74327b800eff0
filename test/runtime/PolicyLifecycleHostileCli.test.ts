/**
 * `writ policy put|activate|retire` and the audit commands given hostile input on real SQLite files: each refusal exits
 * 2 naming the problem and leaves every file as it was; a database an older writ wrote is migrated by the writing
 * commands and named, never an internal error, by the reading ones.
 */
import { assert, describe, it } from "@effect/vitest"
import { createHash } from "node:crypto"
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import { bin, build, run, writ } from "../fixtures/cli.ts"
import { root } from "../fixtures/sources.ts"

const Database = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => {
  readonly exec: (source: string) => unknown
  readonly prepare: (source: string) => { readonly all: () => Array<Record<string, unknown>> }
  readonly close: () => unknown
}

const policy = join(root, "test/fixtures/policies/agent.yaml")

const freshDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "writ-hostile-lifecycle-"))
  // Readable and searchable by an unprivileged uid, which runs one of the cases.
  chmodSync(dir, 0o755)
  return dir
}

/** Every entry in a directory with the SHA-256 of its bytes (a directory as "dir"): what "nothing changed" compares. */
const contents = (dir: string) =>
  Object.fromEntries(
    readdirSync(dir).sort().map((name) => {
      const file = join(dir, name)
      return [
        name,
        statSync(file).isDirectory() ? "dir" : createHash("sha256").update(readFileSync(file)).digest("hex")
      ]
    })
  )

const writJson = async (...args: Array<string>) => {
  const result = await writ(...args, "--json")
  return { ...result, out: result.status === 0 ? JSON.parse(result.stdout) : undefined }
}

describe("writ policy put|activate|retire on hostile input", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("a refused step exits 2 naming the problem, and every file stays byte for byte as it was", async () => {
    const dir = freshDir()
    const db = join(dir, "writ.db")
    assert.strictEqual((await writ("policy", "put", policy, "--db", db)).status, 0)
    const notWrit = join(dir, "notes.txt")
    writeFileSync(notWrit, "not a database\n")
    const unreadable = join(dir, "unreadable.yaml")
    writeFileSync(unreadable, readFileSync(policy))
    chmodSync(unreadable, 0o000)
    mkdirSync(join(dir, "sub.d"))
    const file = (name: string, text: string) => {
      const path = join(dir, name)
      writeFileSync(path, text)
      return path
    }
    const declarations: ReadonlyArray<readonly [string, string, string]> = [
      [
        "dup.json",
        "{\"policy_id\":\"x\",\"version\":\"1\",\"version\":\"2\",\"mode\":\"allow_all\"}",
        "duplicate key \"version\""
      ],
      ["proto.json", "{\"policy_id\":\"x\",\"version\":\"1\",\"__proto__\":{\"mode\":\"allow_all\"}}", "__proto__"],
      ["proto.yaml", "policy_id: x\nversion: \"1\"\nprovenance:\n  __proto__: {author: x}\n", "$.provenance.__proto__"],
      [
        "zero.json",
        "{\"policy_id\":\"x\",\"version\":0,\"mode\":\"allow_all\"}",
        "$.version: Expected string, actual 0"
      ],
      ["huge.json", `{"policy_id":"x","version":${"9".repeat(400)},"mode":"allow_all"}`, "$.version: Expected string"],
      ["long.json", JSON.stringify({ policy_id: "x", version: "1".repeat(100_000), mode: "allow_all" }), "$.version"],
      [
        "deep.yaml",
        `policy_id: x\nversion: "1"\nprovenance: ${"[".repeat(5000)}${"]".repeat(5000)}\n`,
        "nested deeper than"
      ]
    ]
    const cases: Array<readonly [ReadonlyArray<string>, string]> = [
      [["put", policy], "Expected to find option: '--db'"],
      [["activate", "repo-agent", "1"], "Expected to find option: '--db'"],
      [["put", policy, "--db", notWrit], "notes.txt"],
      [["activate", "repo-agent", "1", "--db", notWrit], "notes.txt"],
      [["retire", "repo-agent", "1", "--db", notWrit], "notes.txt"],
      [["put", policy, "--db", join(dir, "sub.d")], "sub.d"],
      [["activate", "repo-agent", "1", "--db", join(dir, "sub.d")], "sub.d"],
      [["put", join(dir, "sub.d"), "--db", db], "sub.d"],
      [["activate", "repo-agent/../../etc", "1", "--db", db], "no policy repo-agent/../../etc@1 is stored"],
      [["activate", "repo-agent", "-1", "--db", db], "no policy repo-agent@-1 is stored"],
      [["activate", "repo-agent", "1", "--db", db, "--bind", "role:"], "--bind \"role:\" is not global"],
      [["activate", "repo-agent", "1", "--db", db, "--bind", "global", "--tenant", ""], "--tenant \"\" is not an id"],
      [["activate", "repo-agent", "1", "--db", db, "--bind", `role:${"r".repeat(100_000)}`], "is not global"],
      ...declarations.map(([name, text, message]) => [["put", file(name, text), "--db", db], message] as const)
    ]
    const written = contents(dir)
    for (const [args, message] of cases) {
      const result = await writ("policy", ...args)
      assert.strictEqual(result.status, 2, `${args.join(" ").slice(0, 200)}: ${result.stderr.slice(0, 400)}`)
      assert.include(result.stderr, message, args.join(" ").slice(0, 200))
      assert.notInclude(result.stderr, "internal error")
      assert.isBelow(result.stderr.length, 2000, args.join(" ").slice(0, 200))
    }
    // Unprivileged, so the file's mode applies (root reads it anyway).
    const denied = await run("setpriv", [
      "--reuid=65534",
      "--regid=65534",
      "--clear-groups",
      "node",
      bin,
      "policy",
      "put",
      unreadable,
      "--db",
      join(dir, "new.db")
    ])
    assert.strictEqual(denied.status, 2, denied.stderr)
    assert.match(denied.stderr, /unreadable\.yaml: cannot be read \(.*permission denied/i)
    assert.deepStrictEqual(contents(dir), written)
    const state = await writJson("policy", "put", policy, "--db", db)
    assert.strictEqual(state.out.release_state, "staged", "no refused step changed the stored version")
  }, 120_000)

  it(
    "activate --bind and retire racing on one file from two processes: a retired version is never bound, nor activated again",
    async () => {
      const dir = freshDir()
      const db = join(dir, "race.db")
      const rounds = ["1", "2", "3", "4", "5"]
      for (const version of rounds) {
        const file = join(dir, `v${version}.json`)
        writeFileSync(file, JSON.stringify({ policy_id: "race", version, mode: "allow_all" }))
        assert.strictEqual((await writ("policy", "put", file, "--db", db)).status, 0)
      }
      const outcomes: Array<{ version: string; activated: boolean; retired: boolean }> = []
      for (const version of rounds) {
        const [activate, retire] = await Promise.all([
          writ("policy", "activate", "race", version, "--db", db, "--bind", "global"),
          writ("policy", "retire", "race", version, "--db", db)
        ])
        for (const result of [activate, retire]) {
          assert.include([0, 2], result.status, result.stderr)
          assert.notInclude(result.stderr, "internal error")
        }
        if (retire.status === 2) assert.include(retire.stderr, `policy race@${version} is staged, not active`)
        // The retirement may land between activation and binding: then the binding is refused, naming it.
        if (activate.status === 2) assert.include(activate.stderr, `policy race@${version} is retired`)
        outcomes.push({ version, activated: activate.status === 0, retired: retire.status === 0 })
      }
      const [again, twice] = await Promise.all(
        [0, 1].map(() => writ("policy", "activate", "race", "1", "--db", db, "--bind", "role:dev"))
      )
      const read = new Database(db)
      const retired = new Set(read.prepare("SELECT version FROM policy_retirements").all().map((row) => row.version))
      const bound = read.prepare("SELECT tenant, scope_kind, scope_value, version FROM policy_bindings").all()
      const active = new Set(
        read.prepare("SELECT version FROM policy_snapshots WHERE release_state = 'active'").all().map((row) =>
          row.version
        )
      )
      read.close()
      for (const { retired: retiredNow, version } of outcomes) {
        assert.strictEqual(retired.has(version), retiredNow, version)
        assert.isTrue(active.has(version), `${version} was activated`)
      }
      // At most one binding per scope, never to a retired version.
      assert.isAtMost(bound.filter((row) => row.scope_kind === "global").length, 1)
      for (const row of bound) assert.isFalse(retired.has(row.version), JSON.stringify(row))
      const last = outcomes.at(-1)!
      const global = bound.find((row) => row.scope_kind === "global")
      if (last.activated && !last.retired) assert.strictEqual(global?.version, last.version)
      for (const result of [again, twice]) {
        assert.strictEqual(result.status, retired.has("1") ? 2 : 0, result.stderr)
      }
    },
    240_000
  )

  it(
    "a database an older writ wrote is migrated by a step, and named, not an internal error, by an audit",
    async () => {
      const dir = freshDir()
      const db = join(dir, "old.db")
      const certified = await writJson(
        "exec",
        "calc.add",
        "--args",
        "{\"a\":2,\"b\":40}",
        "--db",
        db,
        "--profile",
        "certifiable"
      )
      assert.strictEqual(certified.status, 0, certified.stderr)
      const certificate = join(dir, "certificate.json")
      writeFileSync(certificate, JSON.stringify(certified.out.certificate))
      // Back to the schema as migration 0009 left it: no retirements, bindings without tenants, no harness or edge tables.
      const old = new Database(db)
      old.exec(`DROP TABLE policy_retirements;
      CREATE TABLE bindings_0003 (scope_kind TEXT NOT NULL, scope_value TEXT NOT NULL, policy_id TEXT NOT NULL,
        version TEXT NOT NULL, PRIMARY KEY (scope_kind, scope_value));
      INSERT INTO bindings_0003 SELECT scope_kind, scope_value, policy_id, version FROM policy_bindings;
      DROP TABLE policy_bindings;
      ALTER TABLE bindings_0003 RENAME TO policy_bindings;
      DROP TABLE harness_observations;
      DROP TABLE nonces;
      DROP TABLE edge_executions;
      DROP TABLE harness_runs;
      DROP TABLE harness_verifications;
      DELETE FROM effect_sql_migrations WHERE migration_id >= 10;`)
      old.close()
      const before = contents(dir)

      const audit = await writ("certificate", "verify", "--db", db, "--certificate", certificate)
      assert.strictEqual(audit.status, 2, audit.stderr)
      assert.include(
        audit.stderr,
        "was written by an older writ (migrations 0010_policy_retirements, 0011_tenant_bindings"
      )
      assert.notInclude(audit.stderr, "internal error")
      // What reads only the tables it has still reads them.
      const chain = await writJson("evidence", "verify", "--db", db, "--chain", certified.out.chain_id)
      assert.strictEqual(chain.status, 0, chain.stderr)
      assert.deepStrictEqual(contents(dir), before, "an audit changes nothing")

      const retired = await writJson("policy", "retire", "demo-agent", "1", "--db", db, "--by", "auditor")
      assert.deepStrictEqual([retired.status, retired.out?.release_state], [0, "retired"], retired.stderr)
      const verified = await writJson("certificate", "verify", "--db", db, "--certificate", certificate)
      assert.deepStrictEqual([verified.status, verified.out?.valid], [0, true], verified.stderr)
    },
    120_000
  )
})
