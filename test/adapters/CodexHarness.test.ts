import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Redacted } from "effect"
import { createHash } from "node:crypto"
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as CodexHarness from "../../adapters/node/CodexHarness.ts"
import * as HarnessStore from "../../adapters/node/HarnessStore.ts"
import * as NodeHarnessProcess from "../../adapters/node/NodeHarnessProcess.ts"
import * as Scripted from "../../adapters/node/ScriptedOpenAI.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"

mkdirSync("/var/tmp", { recursive: true })
const temp = () => realpathSync(mkdtempSync("/var/tmp/writ-codex-adapter-"))
const sha = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex")

/** A launcher and the native binary it resolves, laid out as npm installs them; the binary only prints a version. */
const fakeInstall = (dir: string) => {
  const launcher = join(dir, "pkg", "bin", "codex.js")
  const native = join(
    dir,
    "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
  )
  mkdirSync(join(dir, "pkg", "bin"), { recursive: true })
  mkdirSync(join(native, ".."), { recursive: true })
  writeFileSync(launcher, "// launcher v1\n")
  writeFileSync(join(dir, "node_modules/@openai/codex-linux-x64/package.json"), "{\"name\":\"x\"}")
  writeFileSync(native, "#!/bin/sh\necho 'codex-cli 9.9.9'\n")
  chmodSync(native, 0o755)
  return { launcher, native }
}

describe("the codex adapter on Node", () => {
  it.live(
    "probe: the native binary the launcher resolves, its version, one identity over launcher and binary",
    () =>
      Effect.gen(function*() {
        const dir = temp()
        const { launcher, native } = fakeInstall(dir)
        const store = HarnessStore.make(join(dir, "data"))
        const service = yield* CodexHarness.make({ launcher, store })
        const probe = yield* service.probe
        assert.strictEqual(probe.version, "9.9.9")
        assert.strictEqual(probe.executable?.path, native)
        const expected = createHash("sha256").update(`codex-identity-v1\n${sha(launcher)}\n${sha(native)}`).digest(
          "hex"
        )
        assert.strictEqual(probe.executable?.digest, expected)
        // A changed launcher is another identity: it decides which binary runs.
        writeFileSync(launcher, "// launcher v2, another binary\n")
        const again = yield* (yield* CodexHarness.make({ launcher, store })).probe
        assert.notStrictEqual(again.executable?.digest, probe.executable?.digest)
        rmSync(dir, { recursive: true, force: true })
      }).pipe(Effect.provide(NodeHarnessProcess.layer))
  )

  it.live("probe: no launcher is an unknown version, so every control is unsupported", () =>
    Effect.gen(function*() {
      const dir = temp()
      const service = yield* CodexHarness.make({ launcher: join(dir, "absent.js"), store: HarnessStore.make(dir) })
      const probe = yield* service.probe
      assert.isNull(probe.version)
      assert.isNull(probe.executable)
      rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  it.live(
    "spawn: with hook trust bypassed, a project .codex in the workspace refuses the run before codex starts",
    () =>
      Effect.gen(function*() {
        const dir = temp()
        const ws = join(dir, "ws")
        mkdirSync(join(ws, ".codex"), { recursive: true })
        writeFileSync(join(ws, ".codex", "config.toml"), "[[hooks.PreToolUse]]\nmatcher = \"*\"\n")
        const model = yield* Effect.promise(() => Scripted.start([{ name: "exec_command", input: { cmd: "true" } }]))
        const service = yield* CodexHarness.make({ store: HarnessStore.make(join(dir, "data")) })
        const spec = Either.getOrThrow(HarnessSpec.decode({
          spec_version: 1,
          provider: "codex",
          model: { name: "scripted", endpoint: model.baseUrl },
          workspace: ws,
          tools: { callback: true }
        }))
        const admitted = yield* HarnessAdapter.prepare(service, {
          spec,
          prompt: "go",
          home: join(dir, "home"),
          verifications: []
        })
        const error = yield* Effect.flip(service.spawn(admitted, {
          secrets: new Map([["unused", Redacted.make("x")]]),
          decide: () => Effect.succeed({ decision: "allow" })
        }))
        assert.strictEqual(error.reason, "spawn_failed")
        assert.include(error.detail, `${ws}/.codex`)
        assert.strictEqual(model.requests.length, 0)
        // An empty directory configures nothing (codex leaves empty mount points behind): it does not count.
        mkdirSync(join(dir, "empty", ".codex"), { recursive: true })
        assert.deepStrictEqual(CodexHarness.otherHookSources(join(dir, "empty")), [])
        assert.deepStrictEqual(CodexHarness.otherHookSources(ws), [join(ws, ".codex")])
        // Above the project root (the nearest .git) codex reads no project config.
        mkdirSync(join(dir, "repo", ".git"), { recursive: true })
        mkdirSync(join(dir, "repo", "ws"))
        mkdirSync(join(dir, ".agents"))
        writeFileSync(join(dir, ".agents", "hooks.json"), "{}")
        assert.deepStrictEqual(CodexHarness.otherHookSources(join(dir, "repo", "ws")), [])
        assert.deepStrictEqual(CodexHarness.otherHookSources(join(dir, "empty")), [join(dir, ".agents")])
        yield* Effect.promise(() => model.close())
        rmSync(dir, { recursive: true, force: true })
      }).pipe(Effect.provide(NodeHarnessProcess.layer)),
    60_000
  )
})
