import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  utimesSync,
  writeFileSync
} from "node:fs"
import { join } from "node:path"
import * as ClaudeCodeHarness from "../../adapters/node/ClaudeCodeHarness.ts"
import * as CodexHarness from "../../adapters/node/CodexHarness.ts"
import * as GeminiCliHarness from "../../adapters/node/GeminiCliHarness.ts"
import * as HarnessStore from "../../adapters/node/HarnessStore.ts"
import * as NodeHarnessProcess from "../../adapters/node/NodeHarnessProcess.ts"
import type { HarnessAdapter } from "../../core/harness/HarnessAdapter.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"

mkdirSync("/var/tmp", { recursive: true })
// Not under /tmp: codex's probe home goes in the data directory, and codex refuses one under /tmp.
const temp = () => realpathSync(mkdtempSync("/var/tmp/writ-version-cache-"))
const slow = { timeout: 240_000 }

/** How many times a fake executable ran: each run appends one line to `ran` beside it. */
const runs = (dir: string) =>
  existsSync(join(dir, "ran")) ? readFileSync(join(dir, "ran"), "utf-8").split("\n").length - 1 : 0

/** Move a file's mtime forward, contents unchanged: the same bytes, another identity. */
const touch = (path: string, seconds: number) => {
  const when = new Date(Date.now() + seconds * 1000)
  utimesSync(path, when, when)
}

/** A shell script answering `--version` with `answer` (or failing when null), counting its runs. */
const fakeShell = (dir: string, path: string, answer: string | null) => {
  mkdirSync(join(path, ".."), { recursive: true })
  writeFileSync(
    path,
    `#!/bin/sh\necho run >> '${join(dir, "ran")}'\n${
      answer === null ? "echo broken >&2; exit 1" : `echo '${answer}'`
    }\n`
  )
  chmodSync(path, 0o755)
}

/** The process port over Node's, counting every `--version` spawned (of the real CLIs too). */
const counting = () => {
  const seen = { probes: 0 }
  const layer = Layer.effect(
    HarnessProcess,
    Effect.map(HarnessProcess, (inner): HarnessProcess.Service => ({
      run: (spec) => {
        if (spec.args.includes("--version")) seen.probes++
        return inner.run(spec)
      }
    }))
  ).pipe(Layer.provide(NodeHarnessProcess.layer))
  return { seen, layer }
}

// Each probe builds a fresh adapter over a fresh store object on the same directory: as each `writ` process does.
const probeOnce = (
  make: (store: HarnessStore.HarnessStore) => Effect.Effect<HarnessAdapter.Service, never, HarnessProcess>,
  data: string
) => Effect.flatMap(make(HarnessStore.make(data)), (adapter) => adapter.probe)

describe("the probed version is kept with the executable's identity", () => {
  it.live("claude-code: a known binary is not asked `--version` again; a touched one is", () =>
    Effect.gen(function*() {
      const dir = temp()
      const bin = join(dir, "bin", "claude")
      fakeShell(dir, bin, "9.9.9 (Claude Code)")
      const make = (store: HarnessStore.HarnessStore) => ClaudeCodeHarness.make({ executable: bin, store })
      const first = yield* probeOnce(make, join(dir, "data"))
      assert.strictEqual(first.version, "9.9.9")
      assert.strictEqual(runs(dir), 1)
      const second = yield* probeOnce(make, join(dir, "data"))
      assert.strictEqual(second.version, "9.9.9")
      assert.strictEqual(second.executable?.digest, first.executable?.digest)
      assert.strictEqual(runs(dir), 1)
      touch(bin, 10)
      const third = yield* probeOnce(make, join(dir, "data"))
      assert.strictEqual(third.version, "9.9.9")
      assert.strictEqual(runs(dir), 2)
      // A replaced binary (another inode, same path) answers for itself.
      rmSync(bin)
      fakeShell(dir, bin, "9.9.10 (Claude Code)")
      assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.10")
      assert.strictEqual(runs(dir), 3)
      rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeHarnessProcess.layer)), slow)

  it.live("an unknown version is not kept: the next run asks again", () =>
    Effect.gen(function*() {
      const dir = temp()
      const bin = join(dir, "bin", "claude")
      fakeShell(dir, bin, null)
      const make = (store: HarnessStore.HarnessStore) => ClaudeCodeHarness.make({ executable: bin, store })
      const first = yield* probeOnce(make, join(dir, "data"))
      assert.isNull(first.version)
      assert.include(first.notes.join("\n"), "--version said: broken")
      assert.isNull((yield* probeOnce(make, join(dir, "data"))).version)
      assert.strictEqual(runs(dir), 2)
      rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeHarnessProcess.layer)), slow)

  it.live("codex: the native binary's version is kept; touching the binary re-asks", () =>
    Effect.gen(function*() {
      const dir = temp()
      const launcher = join(dir, "pkg", "bin", "codex.js")
      const native = join(dir, "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")
      mkdirSync(join(launcher, ".."), { recursive: true })
      writeFileSync(launcher, "// launcher\n")
      mkdirSync(join(native, ".."), { recursive: true })
      writeFileSync(join(dir, "node_modules/@openai/codex-linux-x64/package.json"), "{\"name\":\"x\"}")
      fakeShell(dir, native, "codex-cli 9.9.9")
      const make = (store: HarnessStore.HarnessStore) => CodexHarness.make({ launcher, store })
      assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
      assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
      assert.strictEqual(runs(dir), 1)
      touch(native, 10)
      assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
      assert.strictEqual(runs(dir), 2)
      rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NodeHarnessProcess.layer)), slow)

  it.live(
    "gemini-cli: the package tree's version is kept; touching any file in the tree re-asks",
    () =>
      Effect.gen(function*() {
        const dir = temp()
        const pkg = join(dir, "gemini-cli")
        mkdirSync(join(pkg, "bundle"), { recursive: true })
        writeFileSync(join(pkg, "package.json"), "{\"name\":\"@google/gemini-cli\"}")
        writeFileSync(
          join(pkg, "bundle", "gemini.js"),
          `require("node:fs").appendFileSync(${JSON.stringify(join(dir, "ran"))}, "run\\n"); console.log("9.9.9")\n`
        )
        writeFileSync(join(pkg, "bundle", "chunk.js"), "// a chunk the entry loads\n")
        const make = (store: HarnessStore.HarnessStore) => GeminiCliHarness.make({ packageDir: pkg, store })
        assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
        assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
        assert.strictEqual(runs(dir), 1)
        touch(join(pkg, "bundle", "chunk.js"), 10)
        assert.strictEqual((yield* probeOnce(make, join(dir, "data"))).version, "9.9.9")
        assert.strictEqual(runs(dir), 2)
        rmSync(dir, { recursive: true, force: true })
      }).pipe(Effect.provide(NodeHarnessProcess.layer)),
    slow
  )

  it.live("the real CLIs: a second run's probe spawns no `--version` and reports the same version and identity", () => {
    const { layer, seen } = counting()
    return Effect.gen(function*() {
      const dir = temp()
      const makes = [
        (store: HarnessStore.HarnessStore) => ClaudeCodeHarness.make({ store }),
        (store: HarnessStore.HarnessStore) => CodexHarness.make({ store }),
        (store: HarnessStore.HarnessStore) => GeminiCliHarness.make({ store })
      ]
      for (const make of makes) {
        const before = seen.probes
        const first = yield* probeOnce(make, dir)
        assert.match(first.version ?? "", /^\d+\.\d+\.\d+$/)
        assert.strictEqual(seen.probes, before + 1)
        const second = yield* probeOnce(make, dir)
        assert.strictEqual(seen.probes, before + 1)
        assert.strictEqual(second.version, first.version)
        assert.deepStrictEqual(second.executable, first.executable)
      }
      rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(layer))
  }, slow)
})
