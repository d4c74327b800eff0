import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { root } from "../fixtures/sources.ts"

describe("entry points", () => {
  for (const top of ["core", "adapters"]) {
    it(`${top}/index.ts re-exports every public module of ${top}/ as a namespace`, () => {
      const modules = readdirSync(join(root, top)).filter((f) => f.endsWith(".ts") && f !== "index.ts").sort()
      const index = readFileSync(join(root, top, "index.ts"), "utf-8")
      const exported = [...index.matchAll(/export \* as (\w+) from "\.\/(\w+)\.ts"/g)]
      assert.deepStrictEqual(exported.map((m) => `${m[2]}.ts`).sort(), modules)
      for (const [, name, file] of exported) assert.strictEqual(name, file)
    })
  }
})
