/**
 * The embedded executor over one SQLite file: a configuration its profile refuses fails the build as a typed error
 * (never a defect), for every profile.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as path from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as Interceptor from "../../core/execution/Interceptor.ts"
import * as Embedded from "../../runtime/Embedded.ts"
import { tempDir } from "../fixtures/sqlite.ts"

const tools = Layer.merge(ActionRegistry.layerWith([]), InProcessBackend.layer)

describe("Embedded.layerExecutor", () => {
  it.scoped("an interceptor without an identity fails the governed and certifiable builds with InterceptorIdentityError", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      for (const profile of ["governed", "certifiable"] as const) {
        const layer = Embedded.layerExecutor({ filename: path.join(dir, `${profile}.db`), profile }, tools, {
          interceptors: [Interceptor.make("acme.plain", "policy", () => Interceptor.allow())]
        })
        const failure = yield* Effect.flip(Effect.scoped(Layer.build(layer)))
        assert.strictEqual(failure._tag, "InterceptorIdentityError", profile)
        assert.include(failure.message, "acme.plain")
      }
    }))
})
