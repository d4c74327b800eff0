/**
 * Gate 8, house rules: the executor's production path uses writ's own primitives (Effect for
 * concurrency and time, Schema for values, Canonical for serialisation); raw lower-level use is
 * confined to adapters, and core/ depends on nothing but `effect`.
 */
import { assert, describe, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { factsOf, productionFiles, root } from "../fixtures/sources.ts"

const core = () => productionFiles().filter((file) => file.startsWith("core/"))

describe("gate 8: house rules", () => {
  it("core/ imports only effect and core/ itself", () => {
    const foreign = core().flatMap((file) =>
      factsOf(file).imports
        .filter((target) => !(target === "effect" || target.startsWith("effect/") || target.startsWith("core/")))
        .map((target) => `${file} -> ${target}`)
    )
    assert.deepStrictEqual(foreign, [])
  })

  it("core/ starts no timers, promises or randomness of its own", () => {
    const raw = core().flatMap((file) =>
      factsOf(file).calls
        .filter((callee) => ["setTimeout", "setInterval", "queueMicrotask", ".random", ".now"].includes(callee))
        .map((callee) => `${file}: ${callee}`)
    )
    const constructed = core().filter((file) => /\bnew Promise\b/.test(readFileSync(join(root, file), "utf-8")))
    assert.deepStrictEqual([...raw, ...constructed], [])
  })

  it("the per-call path builds no generator function per call: each is Effect.fnUntraced, built once", () => {
    // A generator literal evaluated per call (`(x) => Effect.gen(function*() {...})`) gives every call a fresh function
    // with a prototype and hidden classes of its own: about 1.3 µs and 400 bytes of old generation a call, and what it
    // captures is promoted with it, to stay until the next full collection. Only a module's own value may be a gen.
    const perCallPath = (file: string) =>
      ["core/execution/internal/", "core/policy/internal/", "core/state/internal/", "core/evidence/internal/"]
        .some((folder) => file.startsWith(folder)) ||
      file === "core/execution/Capacity.ts" || file === "adapters/sql/internal/transaction.ts"
    const moduleValue = /^(?:export )?const \w+(?:: [^=]+)? = Effect\.gen\(/
    const built = productionFiles().filter(perCallPath).flatMap((file) =>
      readFileSync(join(root, file), "utf-8").split("\n").flatMap((line, i) =>
        line.includes("Effect.gen(") && !moduleValue.test(line) ? [`${file}:${i + 1}`] : []
      )
    )
    assert.deepStrictEqual(built, [])
  })

  it("serialisation goes through Canonical: JSON.stringify appears in core/base/Canonical.ts only", () => {
    const users = core().filter((file) => readFileSync(join(root, file), "utf-8").includes("JSON.stringify"))
    assert.deepStrictEqual(users, ["core/base/Canonical.ts"])
  })

  it("every adapter says which runtimes it supports", () => {
    const silent = productionFiles()
      .filter((file) => file.startsWith("adapters/") && !file.endsWith("/index.ts") && !file.includes("/internal/"))
      .filter((file) => !/Runtimes?: /.test(readFileSync(join(root, file), "utf-8")))
    assert.deepStrictEqual(silent, [])
  })
})
