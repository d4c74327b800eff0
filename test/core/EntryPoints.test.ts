import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { root } from "../fixtures/sources.ts"

/** The public modules of a folder: its .ts files, `index.ts` aside. */
const modulesOf = (folder: string) =>
  readdirSync(join(root, folder)).filter((f) => f.endsWith(".ts") && f !== "index.ts").sort()

const exportsOf = (
  index: string
) => [...readFileSync(join(root, index), "utf-8").matchAll(/export \* as (\w+) from "\.\/([\w/]+)\.ts"/g)]

describe("entry points", () => {
  it("core/ is laid out by concept: no module at its top, and index.ts re-exports every concept's public modules", () => {
    assert.deepStrictEqual(modulesOf("core"), [])
    const concepts = readdirSync(join(root, "core")).filter((entry) =>
      statSync(join(root, "core", entry)).isDirectory()
    )
    assert.deepStrictEqual(concepts.sort(), [
      "action",
      "approval",
      "base",
      "evidence",
      "execution",
      "harness",
      "mcp",
      "policy",
      "state"
    ])
    const expected = concepts.flatMap((concept) => modulesOf(join("core", concept)).map((f) => `${concept}/${f}`))
    const exported = exportsOf("core/index.ts")
    assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), expected.sort())
    for (const [, name, file] of exported) assert.strictEqual(name, file!.split("/").pop())
  })

  it("adapters/ is laid out by runtime: each folder's index.ts and adapters/index.ts re-export its public modules", () => {
    assert.deepStrictEqual(modulesOf("adapters"), [])
    const runtimes = ["memory", "node", "sql", "web"]
    const all: Array<string> = []
    for (const folder of runtimes) {
      const exported = exportsOf(`adapters/${folder}/index.ts`)
      assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), modulesOf(join("adapters", folder)))
      for (const [, name, file] of exported) assert.strictEqual(name, file)
      all.push(...modulesOf(join("adapters", folder)).map((f) => `${folder}/${f}`))
    }
    const exported = exportsOf("adapters/index.ts")
    assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), all.sort())
    const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf-8")) as {
      exports: Record<string, unknown>
    }
    for (const entry of [".", "./adapters", ...runtimes.map((folder) => `./adapters/${folder}`), "./embedded"]) {
      assert.property(manifest.exports, entry)
    }
  })
})
