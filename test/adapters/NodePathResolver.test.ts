import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import { mkdirSync, mkdtempSync, realpathSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as NodePathResolver from "../../adapters/node/NodePathResolver.ts"
import * as Action from "../../core/action/Action.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor, layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import { PathResolver } from "../../core/policy/PolicyPath.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base } from "../fixtures/layers.ts"

const root = realpathSync(mkdtempSync(join(tmpdir(), "writ-paths-")))
mkdirSync(join(root, "work"))
mkdirSync(join(root, "secret"))
writeFileSync(join(root, "secret", "key"), "k")
symlinkSync(join(root, "secret"), join(root, "work", "escape"))

const read = Action.make({
  name: "files.read",
  input: Schema.Struct({ path: Schema.String }),
  output: Schema.String,
  effects: ["filesystem.read"],
  handler: () => "contents"
})

const layerWith = (resolver: Layer.Layer<never> | Layer.Layer<PathResolver>) =>
  layerPolicyGated().pipe(
    Layer.provideMerge(Layer.merge(MemoryPolicySnapshotStore.layer, resolver).pipe(Layer.provideMerge(base([read]))))
  )

const readThrough = (path: string) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const declaration = Either.getOrThrow(PermissionPolicy.decode({
      policy_id: "fs",
      version: "1",
      mode: "allow_all",
      rules: [{ kind: "filesystem", effect: "allow", roots: [join(root, "work")], modes: ["read"] }]
    }))
    const snapshot = yield* Effect.orDie(PolicySnapshot.compile(declaration))
    yield* store.put(snapshot)
    yield* Effect.orDie(store.activate("fs", "1", "ops", Time.fromMicros(0)))
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* Ingress.bind({
      execution_scope: scope,
      authenticated_principal: { id: "alice" },
      effect_backend: InProcessBackend.make.ref,
      policy_snapshot: { policy_id: "fs", version: "1", digest: snapshot.digest }
    })
    const request = ExecutionRequest.make({
      request_id: "r",
      action: { name: "files.read" },
      arguments: { path },
      execution_scope: scope
    })
    const outcome = yield* (yield* ActionExecutor).execute(request, { context })
    return outcome._tag === "denied" ? outcome.reason.code : outcome._tag
  })

describe("symbolic links are resolved before paths are matched", () => {
  it.effect("a link inside a root that points outside it is denied with the Node resolver", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* readThrough(join(root, "work", "notes.txt")), "succeeded")
      assert.strictEqual(yield* readThrough(join(root, "work", "escape", "key")), "filesystem.outside_roots")
    }).pipe(Effect.provide(layerWith(NodePathResolver.layer))))

  it.effect("without a resolver (a host with no filesystem) the same path is matched as written", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* readThrough(join(root, "work", "escape", "key")), "succeeded")
    }).pipe(Effect.provide(layerWith(Layer.empty))))

  it.effect("the resolver keeps a missing tail as written", () =>
    Effect.gen(function*() {
      const resolver = yield* PathResolver
      assert.strictEqual(
        yield* resolver.resolve(join(root, "work", "escape", "new", "file")),
        join(root, "secret", "new", "file")
      )
      assert.strictEqual(yield* resolver.resolve("/nonexistent-writ/a"), "/nonexistent-writ/a")
    }).pipe(Effect.provide(NodePathResolver.layer)))
})
