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
    assert.deepStrictEqual(concepts.sort(), ["action", "approval", "base", "evidence", "execution", "policy", "state"])
    const expected = concepts.flatMap((concept) => modulesOf(join("core", concept)).map((f) => `${concept}/${f}`))
    const exported = exportsOf("core/index.ts")
    assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), expected.sort())
    for (const [, name, file] of exported) assert.strictEqual(name, file!.split("/").pop())
  })

  it("adapters/index.ts re-exports every public module of adapters/ as a namespace", () => {
    const exported = exportsOf("adapters/index.ts")
    assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), modulesOf("adapters"))
    for (const [, name, file] of exported) assert.strictEqual(name, file)
  })
})
