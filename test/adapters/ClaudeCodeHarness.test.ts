import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HarnessStore from "../../adapters/node/HarnessStore.ts"
import * as ClaudeCodeHook from "../../adapters/node/internal/claudeCodeHook.ts"
import { serve, toolCallOf } from "../../adapters/node/internal/harnessCallback.ts"
import * as NodeHarnessProcess from "../../adapters/node/NodeHarnessProcess.ts"
import { ExecutableIdentity } from "../../core/harness/CapabilityReport.ts"
import * as ClaudeCode from "../../core/harness/ClaudeCode.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import { HarnessProcess } from "../../core/harness/HarnessProcess.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"

const temp = () => mkdtempSync(join(tmpdir(), "writ-harness-test-"))

// The compiled hook, run by this Node exactly as claude runs it, against a callback file and a loopback answer.
// Asynchronous: the loopback servers answering it share this event loop.
const runHook = async (callback: { url: string; token: string } | "garbage") => {
  const dir = temp()
  try {
    const file = join(dir, "callback.json")
    writeFileSync(file, callback === "garbage" ? "{" : JSON.stringify(callback))
    writeFileSync(join(dir, "hook.mjs"), ClaudeCodeHook.script(file))
    const out = await new Promise<string>((resolve, reject) => {
      const child = execFile(process.execPath, [join(dir, "hook.mjs")], { encoding: "utf-8", timeout: 30_000 }, (
        error,
        stdout
      ) => (error === null ? resolve(stdout) : reject(error)))
      child.stdin!.end(JSON.stringify({ tool_name: "Bash", tool_input: { command: "true" }, tool_use_id: "t" }))
    })
    return out === "" ? "allow" : JSON.parse(out).hookSpecificOutput.permissionDecision as string
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const answering = (status: number, body: string) =>
  new Promise<{ url: string; close: () => void }>((resolve) => {
    const server = http.createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(status)
        res.end(body)
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
        close: () => server.close()
      }))
  })

describe("the compiled PreToolUse hook (real node, blocking form)", () => {
  it("is the Node host's program in the plan, reading its token from the hidden callback file", () =>
    Effect.runPromise(Effect.gen(function*() {
      const hook = ClaudeCodeHook.script("/srv/home/.writ/callback.json")
      assert.include(hook, "\"/srv/home/.writ/callback.json\"")
      assert.include(hook, "permissionDecision: \"deny\"")
      assert.include(hook, "if (answer.decision === \"allow\") process.exit(0)")
      assert.include(hook, "catch { deny(\"writ is unreachable\") }")
      const probe = new HarnessAdapter.ProbeResult({
        provider: "claude-code",
        executable: new ExecutableIdentity({ path: "/bin/claude", digest: "c".repeat(64) as never }),
        version: "2.1.328",
        notes: []
      })
      const spec = Either.getOrThrow(HarnessSpec.decode({
        spec_version: 1,
        provider: "claude-code",
        model: { name: "scripted", endpoint: "http://127.0.0.1:9/" },
        workspace: "/srv/ws",
        tools: { allow: ["Bash"], callback: true }
      }))
      const { plan } = yield* ClaudeCode.compile(
        { spec, probe, prompt: "go", home: "/srv/home", verifications: [] },
        { node: "/usr/bin/node", hookScript: ClaudeCodeHook.script }
      )
      assert.strictEqual(plan.config_files.find((f) => f.path.endsWith("hook.mjs"))!.content, hook)
    })))

  it("allows only on a 200 allow; unreachable, refused, malformed or an unreadable callback file deny", async () => {
    const allow = await answering(200, "{\"decision\":\"allow\"}")
    const refused = await answering(401, "{\"decision\":\"allow\"}")
    const malformed = await answering(200, "not json")
    const denied = await answering(200, "{\"decision\":\"deny\",\"reason\":\"no\"}")
    const closed = await answering(200, "")
    closed.close()
    try {
      assert.strictEqual(await runHook({ url: allow.url, token: "t" }), "allow")
      assert.strictEqual(await runHook({ url: refused.url, token: "t" }), "deny")
      assert.strictEqual(await runHook({ url: malformed.url, token: "t" }), "deny")
      assert.strictEqual(await runHook({ url: denied.url, token: "t" }), "deny")
      assert.strictEqual(await runHook({ url: closed.url, token: "t" }), "deny")
      assert.strictEqual(await runHook("garbage"), "deny")
    } finally {
      for (const server of [allow, refused, malformed, denied]) server.close()
    }
  }, 60_000)
})

describe("the callback server", () => {
  it.scopedLive("answers only this run's token, only a well-formed call, and records writ's decisions", () =>
    Effect.gen(function*() {
      const server = yield* serve(
        "tok",
        (call) => Effect.succeed(call.tool === "Bash" ? { decision: "allow" } : { decision: "deny", reason: "no" })
      )
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+\/pre-tool$/)
      const post = (token: string, body: string) =>
        Effect.promise(() =>
          fetch(server.url, { method: "POST", body, headers: { authorization: `Bearer ${token}` } }).then(async (r) =>
            `${r.status} ${(await r.json()).decision}`
          )
        )
      const call = JSON.stringify({ tool_name: "Bash", tool_input: {}, tool_use_id: "u" })
      assert.strictEqual(yield* post("tok", call), "200 allow")
      assert.strictEqual(yield* post("wrong", call), "401 deny")
      assert.strictEqual(yield* post("tok", "{"), "400 deny")
      assert.strictEqual(yield* post("tok", JSON.stringify({ tool_name: "Read" })), "200 deny")
      assert.deepStrictEqual(server.decisions.map((d) => `${d.call.tool}:${d.decision.decision}`), [
        "Bash:allow",
        "Read:deny"
      ])
      assert.isUndefined(toolCallOf("[]"))
    }))
})

describe("NodeHarnessProcess", () => {
  it.live("an empty environment plus exactly the given variables; stdout line by line", () =>
    Effect.gen(function*() {
      const runner = yield* HarnessProcess
      const lines: Array<string> = []
      process.env.WRIT_TEST_LEAK = "leaked"
      const exit = yield* runner.run({
        command: "/usr/bin/env",
        args: [],
        env: { ONLY: "this" },
        cwd: "/",
        deadlineMillis: 10_000,
        graceMillis: 1_000,
        outputBytes: 1024,
        onLine: (line) => Effect.sync(() => lines.push(line))
      })
      delete process.env.WRIT_TEST_LEAK
      assert.deepStrictEqual(lines, ["ONLY=this"])
      assert.deepStrictEqual([exit.code, exit.killed], [0, false])
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  it.live("at the deadline: SIGTERM to the group, then SIGKILL when it is ignored, and stderr kept", () =>
    Effect.gen(function*() {
      const runner = yield* HarnessProcess
      const started = Date.now()
      const exit = yield* runner.run({
        command: "/bin/sh",
        args: ["-c", "trap '' TERM; echo begun >&2; sleep 30 & wait; sleep 30"],
        env: {},
        cwd: "/",
        deadlineMillis: 500,
        graceMillis: 500,
        outputBytes: 1024,
        onLine: () => Effect.void
      })
      assert.isTrue(exit.killed)
      assert.strictEqual(exit.signal, "SIGKILL")
      assert.strictEqual(exit.stderr, "begun\n")
      assert.isBelow(Date.now() - started, 10_000)
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  it.live("a command that does not exist is a start error, not an exit", () =>
    Effect.gen(function*() {
      const runner = yield* HarnessProcess
      const error = yield* Effect.flip(runner.run({
        command: "/nonexistent/claude",
        args: [],
        env: {},
        cwd: "/",
        deadlineMillis: 1_000,
        graceMillis: 100,
        outputBytes: 16,
        onLine: () => Effect.void
      }))
      assert.strictEqual(error._tag, "ProcessStartError")
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))
})

describe("HarnessStore", () => {
  it.live("the identity digest is computed once per (path, inode, size, mtime), and again when one changes", () =>
    Effect.gen(function*() {
      const dir = temp()
      const bin = join(dir, "bin")
      writeFileSync(bin, "aaaa")
      const mtime = new Date(1_700_000_000_000)
      utimesSync(bin, mtime, mtime)
      const first = yield* HarnessStore.make(join(dir, "data")).identity(bin)
      // Same size and mtime, different bytes: a fresh store reads the cached digest from the file, not the bytes.
      writeFileSync(bin, "bbbb")
      utimesSync(bin, mtime, mtime)
      assert.strictEqual(yield* HarnessStore.make(join(dir, "data")).identity(bin), first)
      utimesSync(bin, new Date(mtime.getTime() + 5_000), new Date(mtime.getTime() + 5_000))
      assert.notStrictEqual(yield* HarnessStore.make(join(dir, "data")).identity(bin), first)
      mkdirSync(join(dir, "data", "harness"), { recursive: true })
      writeFileSync(join(dir, "data", "harness", "verify.json"), "{not json")
      const error = yield* Effect.flip(HarnessStore.make(join(dir, "data")).verifications)
      assert.strictEqual(error.reason, "probe_failed")
      rmSync(dir, { recursive: true, force: true })
    }))

  it("the data directory: WRIT_DATA_DIR, else XDG_DATA_HOME/writ", () => {
    assert.strictEqual(HarnessStore.dataDir({ WRIT_DATA_DIR: "/d" }), "/d")
    assert.strictEqual(HarnessStore.dataDir({ XDG_DATA_HOME: "/x" }), "/x/writ")
  })
})
