import { assert, describe, it } from "@effect/vitest"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll } from "vitest"
import { build, writ } from "../fixtures/cli.ts"
import { root } from "../fixtures/sources.ts"

const policy = join(root, "test/fixtures/policies/agent.yaml")

describe("writ policy", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("check prints id, version, digest and rule count; fmt keeps the digest in YAML and JSON", async () => {
    const check = JSON.parse((await writ("policy", "check", policy, "--json")).stdout)
    assert.deepStrictEqual([check.policy_id, check.version, check.rules], ["repo-agent", "1", 6])
    const dir = mkdtempSync(join(tmpdir(), "writ-policy-"))
    for (const [flag, name] of [[[], "fmt.yaml"], [["--json"], "fmt.json"]] as const) {
      const formatted = await writ("policy", "fmt", policy, ...flag)
      assert.strictEqual(formatted.status, 0)
      writeFileSync(join(dir, name), formatted.stdout)
      assert.strictEqual(
        JSON.parse((await writ("policy", "check", join(dir, name), "--json")).stdout).digest,
        check.digest
      )
    }
  }, 60_000)

  it("invalid input exits 2 and names the field", async () => {
    const dir = mkdtempSync(join(tmpdir(), "writ-policy-"))
    const bad = join(dir, "bad.json")
    writeFileSync(bad, JSON.stringify({ policy_id: "x", version: "1", rules: [{ kind: "action", effect: "allow" }] }))
    const result = await writ("policy", "check", bad)
    assert.strictEqual(result.status, 2)
    assert.include(result.stderr, "$.rules.0.action_patterns: is missing")
    // An option outside its choices is named with the value and the choices, and nothing is explained.
    const origin = await writ("policy", "explain", policy, "--action", "notes.read", "--origin", "user")
    assert.strictEqual(origin.status, 2)
    assert.include(origin.stderr, "--origin \"user\" is not one of USER, SELF, OTHER_AGENT")
    assert.strictEqual(origin.stdout, "")
  }, 60_000)

  it("check refuses an origin rule placed in a soft or advisory gate, naming the rule's path (exit 2)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "writ-policy-"))
    for (const level of ["soft", "advisory"]) {
      const file = join(dir, `${level}.json`)
      writeFileSync(
        file,
        JSON.stringify({
          policy_id: "x",
          version: "1",
          approver_class: "maintainer",
          rules: [
            { rule_id: "notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
            { rule_id: "users-only", kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER"] }
          ],
          gates: [{ gate_id: "review", level, order: 0 }]
        })
      )
      const result = await writ("policy", "check", file)
      assert.strictEqual(result.status, 2)
      assert.include(result.stderr, `$.rules.1: origin rule "users-only" is bound to ${level} gate "review"`)
      assert.strictEqual(result.stdout, "")
    }
  }, 60_000)

  it(
    "gates may bind a preset's generated rule-N; check names the gate, the missing rule and its path (exit 2)",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "writ-policy-"))
      const declaration = (rule_ids: string) =>
        [
          "policy_id: gated",
          "version: \"1\"",
          "mode: read_only",
          "gates:",
          "  - { gate_id: editors, level: hard, order: 0, rule_ids: [rule-0] }",
          `  - { gate_id: readers, level: soft, order: 1, rule_ids: [${rule_ids}] }`,
          ""
        ].join("\n")
      const good = join(dir, "good.yaml")
      const bad = join(dir, "bad.yaml")
      writeFileSync(good, declaration("rule-1"))
      writeFileSync(bad, declaration("rule-1, rule-7"))
      const [ok, dangling] = await Promise.all([writ("policy", "check", good, "--json"), writ("policy", "check", bad)])
      assert.strictEqual(ok.status, 0, ok.stderr)
      assert.deepStrictEqual([JSON.parse(ok.stdout).rules, JSON.parse(ok.stdout).gates], [2, 2])
      assert.strictEqual(dangling.status, 2)
      assert.include(
        dangling.stderr,
        `${bad}: $.gates.1.rule_ids.1: gate "readers" references rule "rule-7", which does not exist (the rules are ` +
          "rule-0, rule-1; a rule without a rule_id is rule-N, N its position)"
      )
      assert.strictEqual(dangling.stdout, "")
    },
    60_000
  )

  it("explain gives disposition, reason and matched rules; exit 0 allow, 1 deny or escalate", async () => {
    const explain = async (...args: Array<string>) => {
      const result = await writ("policy", "explain", policy, "--json", ...args)
      return [result.status, JSON.parse(result.stdout).reason] as const
    }
    assert.deepStrictEqual(await explain("--action", "calc.add"), [0, "policy.allowed"])
    assert.deepStrictEqual(await explain("--action", "shell.exec", "--args", "{\"command\":\"rm -rf /\"}"), [
      1,
      "policy.denied"
    ])
    assert.deepStrictEqual(await explain("--action", "shell.exec", "--args", "{\"command\":\"ls\"}"), [
      1,
      "approval.required"
    ])
    assert.deepStrictEqual(await explain("--action", "notes.read", "--origin", "USER", "--via-agent", "helper"), [
      0,
      "policy.allowed"
    ])
    assert.deepStrictEqual(await explain("--action", "notes.read", "--origin", "SELF"), [1, "origin.not_allowed"])
    const viaOther = await explain("--action", "notes.read", "--origin", "OTHER_AGENT", "--via-agent", "helper")
    assert.deepStrictEqual(viaOther, [0, "policy.allowed"])
    assert.deepStrictEqual(await explain("--action", "notes.read"), [1, "origin.unknown"])
    const detail = JSON.parse(
      (await writ("policy", "explain", policy, "--json", "--action", "shell.exec", "--args", "{\"command\":\"ls\"}"))
        .stdout
    ).detail
    assert.include(detail, "rules rule-1")
  }, 120_000)

  it("explain refuses a --via-agent that no --origin makes part of the call (exit 2, nothing explained)", async () => {
    const cases: Array<[Array<string>, string]> = [
      [["--via-agent", "helper"], "--via-agent helper needs --origin USER or OTHER_AGENT"],
      [["--origin", "SELF", "--via-agent", "helper"], "--via-agent helper contradicts --origin SELF"],
      [["--origin", "USER", "--via-agent", "writ-agent"], "--via-agent writ-agent names the executing agent itself"],
      [["--origin", "OTHER_AGENT", "--via-agent", "writ-agent"], "--via-agent writ-agent names the executing agent"]
    ]
    const results = await Promise.all(
      cases.map(([args]) => writ("policy", "explain", policy, "--json", "--action", "notes.read", ...args))
    )
    for (const [i, [args, message]] of cases.entries()) {
      const result = results[i]!
      assert.strictEqual(result.status, 2, `${args.join(" ")}: ${result.stderr}`)
      assert.include(result.stderr, message)
      assert.strictEqual(result.stdout, "")
    }
  }, 60_000)

  it(
    "explain refuses an action name or id a real call could not have (exit 2 naming it), with or without an origin",
    async () => {
      const cases: Array<[Array<string>, string]> = [
        [
          ["--action", ""],
          "--action \"\" is refused: an action name is lowercase words (a letter, then letters or digits) joined by one of _ - . /"
        ],
        [
          ["--action", "Notes Read"],
          "--action \"Notes Read\" is refused: an action name is lowercase words (a letter, then letters or digits) joined by one of _ - . /"
        ],
        [["--action", "a".repeat(200)], "is refused: an action name is at most 128 characters, not 200"],
        [["--action", "notes.read", "--principal", ""], "--principal \"\" is not an id"],
        [
          ["--action", "notes.read", "--origin", "USER", "--principal", " alice"],
          "--principal \" alice\" is not an id"
        ],
        [["--action", "notes.read", "--tenant", ""], "--tenant \"\" is not an id"],
        [["--action", "notes.read", "--origin", "OTHER_AGENT", "--via-agent", ""], "--via-agent \"\" is not an id"]
      ]
      const results = await Promise.all(cases.map(([args]) => writ("policy", "explain", policy, "--json", ...args)))
      for (const [i, [args, message]] of cases.entries()) {
        const result = results[i]!
        assert.strictEqual(result.status, 2, `${args.join(" ")}: ${result.stderr}`)
        assert.include(result.stderr, message)
        assert.strictEqual(result.stdout, "")
      }
    },
    60_000
  )

  it("explain takes the MCP tool, secrets and environment an action declares, as Action.make does", async () => {
    const dir = mkdtempSync(join(tmpdir(), "writ-policy-"))
    const grants = join(dir, "grants.json")
    writeFileSync(
      grants,
      JSON.stringify({
        policy_id: "grants",
        version: "1",
        mode: "allow_all",
        rules: [
          {
            kind: "mcp",
            effect: "allow",
            server_patterns: ["github"],
            tool_patterns: ["search"],
            resource_patterns: []
          }
        ]
      })
    )
    const explain = async (declares: string) => {
      const result = await writ(
        "policy",
        "explain",
        grants,
        "--json",
        "--action",
        "issues.search",
        "--declares",
        declares
      )
      return [result.status, result.status === 2 ? result.stderr.trim() : JSON.parse(result.stdout).reason]
    }
    assert.deepStrictEqual(await explain("{\"mcp\":{\"server\":\"github\",\"tool\":\"search\"}}"), [
      0,
      "policy.allowed"
    ])
    assert.deepStrictEqual(await explain("{\"mcp\":{\"server\":\"github\",\"tool\":\"delete_repo\"}}"), [
      1,
      "mcp.not_allowed"
    ])
    const [status, message] = await explain("{\"mcp\":{\"server\":\"github\"}}")
    assert.strictEqual(status, 2)
    assert.include(message, "--declares $.mcp.tool: is missing")
    assert.include((await explain("{\"secret\":[]}"))[1], "--declares $.secret: is not a field")
  }, 60_000)

  it("schema prints the declaration's JSON Schema", async () => {
    const plain = await writ("policy", "schema")
    const schema = JSON.parse(plain.stdout)
    assert.includeMembers(schema.required, ["policy_id", "version"])
    assert.strictEqual((await writ("policy", "schema", "--json")).stdout, plain.stdout, "--json changes nothing")
    assert.include((await writ("policy", "schema", "--help")).stdout, "this command always prints JSON")
  }, 60_000)
})
