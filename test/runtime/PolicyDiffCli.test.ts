/**
 * `writ policy diff OLD NEW` on the built binary: a policy change shows as groups of differing dispositions (exit 1),
 * the same policy twice as none (exit 0), with the user's actions from `--actions` or stand-ins, from files or from a
 * `--db` store, and bad input exits 2 naming it with the files left as they were.
 */
import { assert, describe, it } from "@effect/vitest"
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { beforeAll } from "vitest"
import { bin, build, run, writ } from "../fixtures/cli.ts"
import { root } from "../fixtures/sources.ts"

const agent = readFileSync(join(root, "test/fixtures/policies/agent.yaml"), "utf-8")

// The same policy, but every notes.write and files.write denied.
const stricter = agent.replace(
  `files.write: ["/etc/*"]`,
  `files.write: ["*"]\n  notes.write: ["*"]`
)

const fresh = () => {
  const dir = mkdtempSync(join(tmpdir(), "writ-diff-"))
  const old = join(dir, "old.yaml")
  const next = join(dir, "new.yaml")
  writeFileSync(old, agent)
  writeFileSync(next, stricter)
  return { dir, old, next }
}

const actionsModule = (dir: string, name: string, spec: string) => {
  const file = join(dir, name)
  const url = (path: string) => JSON.stringify(pathToFileURL(join(root, path)).href)
  writeFileSync(
    file,
    `import { Schema } from ${url("node_modules/effect/dist/esm/index.js")}\n` +
      `import * as Action from ${url("dist/core/action/Action.js")}\n` +
      `export const actions = [Action.make({ name: "files.write", input: Schema.Struct({ path: Schema.String }), ` +
      `output: Schema.Null, handler: () => null${spec} })]\n`
  )
  return file
}

const runs = ["--runs", "50"]

// Most generated calls are hostile and refused under both policies: a single action needs more to reach a success.
const moreRuns = ["--runs", "100"]

describe("writ policy diff", () => {
  beforeAll(async () => {
    const built = await build()
    assert.strictEqual(built.status, 0, built.stdout)
  }, 240_000)

  it("prints the groups a stricter policy changes and exits 1; --json names the action and both dispositions", async () => {
    const { next, old } = fresh()
    const text = await writ("policy", "diff", old, next, ...runs)
    assert.strictEqual(text.status, 1, text.stderr)
    assert.match(text.stdout, /^notes\.write {2}succeeded -> denied {2}\d+ call\(s\)$/m)
    assert.include(text.stdout, "new: denied policy.denied")

    const asJson = await writ("policy", "diff", old, next, ...runs, "--json")
    assert.strictEqual(asJson.status, 1, asJson.stderr)
    const report = JSON.parse(asJson.stdout)
    assert.deepStrictEqual([report.runs, report.seed], [50, 42])
    const group = report.groups.find((g: { action: string }) => g.action === "notes.write")
    assert.deepStrictEqual([group.old, group.new], ["succeeded", "denied"])
    assert.isAbove(group.count, 0)
    assert.strictEqual(group.example.action, "notes.write")
    for (const g of report.groups) assert.notStrictEqual(g.old, g.new)
  })

  it("finds nothing between a policy and itself and exits 0", async () => {
    const { old } = fresh()
    const same = await writ("policy", "diff", old, old, ...runs)
    assert.strictEqual(same.status, 0, same.stderr)
    assert.strictEqual(same.stdout.trim(), "no difference in 50 generated calls (seed 42)")
    const asJson = await writ("policy", "diff", old, old, ...runs, "--json")
    assert.deepStrictEqual(JSON.parse(asJson.stdout).groups, [])
  })

  it("calls the actions an --actions module exports, as they are declared", async () => {
    const { dir, next, old } = fresh()
    const plain = actionsModule(dir, "plain.mjs", "")
    const differs = await writ("policy", "diff", old, next, ...moreRuns, "--actions", plain, "--json")
    assert.strictEqual(differs.status, 1, differs.stderr)
    const groups = JSON.parse(differs.stdout).groups as Array<{ action: string; old: string; new: string }>
    assert.deepStrictEqual([...new Set(groups.map((g) => g.action))], ["files.write"])
    assert.isTrue(groups.some((g) => g.old === "succeeded" && g.new === "denied"))

    // The same action, which no origin may run: denied under both policies, so the module's declaration is what ran.
    const noOrigin = actionsModule(dir, "no-origin.mjs", ", origins: []")
    const same = await writ("policy", "diff", old, next, ...moreRuns, "--actions", noOrigin)
    assert.strictEqual(same.status, 0, same.stdout + same.stderr)

    // Resolved against the working directory.
    const relative = await run("node", [bin, "policy", "diff", old, next, ...moreRuns, "--actions", "plain.mjs"], dir)
    assert.strictEqual(relative.status, 1, relative.stderr)
    assert.include(relative.stdout, "files.write  succeeded -> denied")
  })

  it("reads id@version from a --db the policy commands wrote", async () => {
    const { dir, next, old } = fresh()
    const db = join(dir, "policy.db")
    assert.strictEqual((await writ("policy", "put", old, "--db", db)).status, 0)
    assert.strictEqual((await writ("policy", "activate", "repo-agent", "1", "--db", db)).status, 0)
    const before = statSync(db).mtimeMs
    const same = await writ("policy", "diff", "repo-agent@1", old, "--db", db, ...runs)
    assert.strictEqual(same.status, 0, same.stderr)
    const differs = await writ("policy", "diff", "repo-agent@1", next, "--db", db, ...runs, "--json")
    assert.strictEqual(differs.status, 1, differs.stderr)
    assert.isTrue(JSON.parse(differs.stdout).groups.some((g: { action: string }) => g.action === "notes.write"))
    assert.strictEqual(statSync(db).mtimeMs, before)
  })

  it("refuses bad input with exit 2, naming it, and changes no file", async () => {
    const { dir, next, old } = fresh()
    const invalid = join(dir, "invalid.yaml")
    writeFileSync(invalid, "policy_id: [\n")
    const noActions = join(dir, "no-actions.mjs")
    writeFileSync(noActions, "export const actions = 1\n")
    const notActions = join(dir, "not-actions.mjs")
    writeFileSync(notActions, "export const actions = [{ name: 'x' }]\n")
    const notDb = join(dir, "not.db")
    writeFileSync(notDb, "hello, this is not SQLite\n")
    const db = join(dir, "policy.db")
    assert.strictEqual((await writ("policy", "put", old, "--db", db)).status, 0)
    const files = [old, next, invalid, noActions, notActions, notDb, db]
    const contents = files.map((file) => readFileSync(file))

    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [[join(dir, "missing.yaml"), next], `OLD "${join(dir, "missing.yaml")}": no such file`],
      [[old, invalid], `${invalid}: $: is not valid YAML`],
      [[old, "repo-agent@1"], `NEW "repo-agent@1" names a stored version: give --db FILE`],
      [[old, "repo-agent@9", "--db", db], `NEW "repo-agent@9": no policy repo-agent@9 is stored`],
      [[old, "repo-agent@1", "--db", notDb], `--db "${notDb}": cannot be opened as a writ database`],
      [[old, "@1", "--db", db], `NEW "@1": the id "" is not an id`],
      [[old, next, "--actions", noActions], `--actions "${noActions}" exports no \`actions\` array`],
      [[old, next, "--actions", notActions], "item 0 is not an Action definition"],
      [[old, next, "--actions", join(dir, "none.mjs")], "names no file"],
      [[old, next, "--runs", "1.5"], `--runs "1.5" is not a whole number from 1`],
      [[old, next, "--runs", "0"], `--runs "0" is not a whole number from 1`],
      [[old, next, "--seed", "x"], `--seed "x" is not a whole number`]
    ]
    const results = await Promise.all(cases.map(([args]) => writ("policy", "diff", ...args)))
    for (const [i, [args, message]] of cases.entries()) {
      const refused = results[i]!
      assert.strictEqual(refused.status, 2, `${args.join(" ")}: ${refused.stdout}${refused.stderr}`)
      assert.include(refused.stderr, message, args.join(" "))
      assert.notInclude(refused.stderr, "internal error")
      assert.strictEqual(refused.stdout, "")
    }
    files.forEach((file, i) => assert.isTrue(readFileSync(file).equals(contents[i]!), file))
  })
})
