import { afterAll, assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer, Option, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as EnvFileSecretStore from "../../adapters/node/EnvFileSecretStore.ts"
import { SecretStore } from "../../core/action/SecretStore.ts"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-secrets-"))
const file = (name: string, text: string) => {
  const at = path.join(dir, name)
  fs.writeFileSync(at, text, { mode: 0o600 })
  return at
}
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

const errorOf = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.either(effect), (either) => Option.getOrThrow(Either.getLeft(either)))

describe("EnvFileSecretStore", () => {
  it.effect("reads NAME=value lines: comments and blank lines skipped, matching quotes taken off, = kept in values", () =>
    Effect.gen(function*() {
      const store = EnvFileSecretStore.make({
        path: file("a.env", "# a comment\n\ngithub.token=ghp_abc\nQUOTED=\"with spaces\"\nSINGLE='x=y'\nRAW=a=b\r\n")
      })
      const value = (name: string) => Effect.map(store.resolve(name), Redacted.value)
      assert.strictEqual(yield* value("github.token"), "ghp_abc")
      assert.strictEqual(yield* value("QUOTED"), "with spaces")
      assert.strictEqual(yield* value("SINGLE"), "x=y")
      assert.strictEqual(yield* value("RAW"), "a=b")
      const missing = yield* errorOf(store.resolve("absent"))
      assert.strictEqual(missing.reason, "not_found")
      assert.strictEqual(missing.name, "absent")
    }))

  it.effect("reads the file on each resolve, so a rotated secret is used from the next call", () =>
    Effect.gen(function*() {
      const at = file("rotate.env", "k=old\n")
      const store = EnvFileSecretStore.make({ path: at })
      assert.strictEqual(Redacted.value(yield* store.resolve("k")), "old")
      fs.writeFileSync(at, "k=new\n")
      assert.strictEqual(Redacted.value(yield* store.resolve("k")), "new")
    }))

  it.effect("a malformed line, a name given twice or an unreadable file is unavailable, naming no value", () =>
    Effect.gen(function*() {
      const cases = [
        [file("bad.env", "ok=v1\nthis line leaks-hunter2\n"), "line 2 is not NAME=value"],
        [file("twice.env", "k=hunter2\nk=hunter2\n"), "line 2 names k again"],
        [path.join(dir, "missing.env"), "could not be read (ENOENT)"]
      ] as const
      for (const [at, detail] of cases) {
        const error = yield* errorOf(EnvFileSecretStore.make({ path: at }).resolve("ok"))
        assert.strictEqual(error.reason, "unavailable")
        assert.include(error.message, detail)
        assert.notInclude(error.message, "hunter2")
      }
    }))

  it.effect("layerConfig takes the file from WRIT_SECRETS_FILE", () =>
    Effect.gen(function*() {
      const store = yield* SecretStore
      assert.strictEqual(Redacted.value(yield* store.resolve("k")), "from-config")
    }).pipe(Effect.provide(
      EnvFileSecretStore.layerConfig.pipe(
        Layer.provide(Layer.setConfigProvider(
          ConfigProvider.fromMap(new Map([["WRIT_SECRETS_FILE", file("config.env", "k=from-config\n")]]))
        ))
      )
    )))
})
