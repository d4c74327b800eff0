/**
 * The child runner on a plain subprocess backend, through the real executor: arguments and results cross as
 * Schema-encoded JSON, a handler's failure keeps its public code, and a child that crashes, is killed, overruns the
 * wall clock or the request's deadline, or writes garbage, forged or oversized frames on its result channel concludes
 * as a typed outcome with a reason code, never a defect.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { Writable } from "node:stream"
import * as SubprocessBackend from "../../adapters/node/internal/subprocessBackend.ts"
import { runnerEntry } from "../../adapters/node/internal/subprocessBackend.ts"
import * as Time from "../../core/base/Time.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import * as ChildActions from "../fixtures/childActions.ts"
import { execArgv, options, plain, runOn } from "../fixtures/subprocess.ts"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-child-"))
const marker = (name: string) => path.join(dir, `${name}-${Math.random().toString(36).slice(2)}`)
const backend = plain()
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

// The pid a handler wrote to its marker is no longer a live process: the child was killed, not left running.
const assertGone = (ran: string) => {
  const pid = Number(fs.readFileSync(ran, "utf-8"))
  assert.isTrue(pid > 0)
  assert.throws(() => process.kill(pid, 0), /ESRCH/)
}

const expectOutcome = (outcome: ExecutionOutcome, tag: ExecutionOutcome["_tag"], code: string) => {
  assert.strictEqual(outcome._tag, tag, JSON.stringify(outcome))
  assert.strictEqual(reasonCode(outcome), code)
}

describe("child runner", () => {
  it.live("runs the declared export in a child and returns its Schema-encoded result", () =>
    Effect.gen(function*() {
      const sum = yield* runOn(backend, "child.add", { a: 0.1, b: 0.2 })
      assert.strictEqual(sum._tag, "succeeded")
      assert.strictEqual(sum._tag === "succeeded" && sum.result, 0.1 + 0.2)
      const day = yield* runOn(backend, "child.next_day", { day: "2026-01-31T00:00:00.000Z" })
      assert.strictEqual(day._tag === "succeeded" && day.result, "2026-02-01T00:00:00.000Z")
    }))

  it.live("an action that declares no module is refused at admission (containment.unsupported), and nothing runs", () =>
    Effect.gen(function*() {
      const ran = marker("nowhere")
      const outcome = yield* runOn(backend, "child.nowhere", { marker: ran })
      expectOutcome(outcome, "denied", "containment.unsupported")
      assert.strictEqual(outcome.stage, "bind_context")
      assert.include(outcome._tag === "denied" ? outcome.reason.detail : "", "declares no module")
      assert.isFalse(fs.existsSync(ran))
    }))

  it.live("a handler's public failure keeps its code and message", () =>
    Effect.gen(function*() {
      const outcome = yield* runOn(backend, "child.refuse", {})
      expectOutcome(outcome, "failed", "child.refused")
      assert.strictEqual(outcome._tag === "failed" && outcome.failure.message, "no, thanks")
    }))

  it.live("a child that exits after the action started is ambiguous (child_crashed)", () =>
    Effect.gen(function*() {
      const ran = marker("crash")
      expectOutcome(yield* runOn(backend, "child.crash", { marker: ran }), "ambiguous", "backend.child_crashed")
      assert.isTrue(fs.existsSync(ran), "the handler ran before the crash")
    }))

  it.live("a child killed by a signal is ambiguous (child_killed)", () =>
    Effect.gen(function*() {
      expectOutcome(
        yield* runOn(backend, "child.kill_self", { marker: marker("kill") }),
        "ambiguous",
        "backend.child_killed"
      )
    }))

  it.live("a child past the backend's wall clock is killed and timed out", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const ran = marker("spin")
      const outcome = yield* runOn(plain("10 seconds"), "child.spin", { marker: ran })
      expectOutcome(outcome, "timed_out", "execution.deadline_exceeded")
      assert.isTrue(fs.existsSync(ran), "the handler was running when the clock ran out")
      assert.isTrue(outcome._tag === "timed_out" && outcome.call_executed)
      assertGone(ran)
      assert.isBelow(Date.now() - started, 30_000)
    }))

  it.live("a child past the request's deadline is stopped by the executor, its teardown completed", () =>
    Effect.gen(function*() {
      const deadline = Time.fromMicros((yield* Time.nowMicros) + 10_000_000)
      const ran = marker("deadline")
      const outcome = yield* runOn(backend, "child.spin", { marker: ran }, { deadline })
      expectOutcome(outcome, "timed_out", "execution.deadline_exceeded")
      assert.strictEqual(outcome._tag === "timed_out" && outcome.teardown, "completed")
      assertGone(ran)
    }))

  it.live("a runner that cannot start, or exits before it starts the action, is failed: the action never ran", () =>
    Effect.gen(function*() {
      for (
        const [command, code] of [["/nonexistent/node", "backend.spawn_failed"], ["/bin/false", "backend.child_exited"]]
      ) {
        const broken = SubprocessBackend.make({
          ...options,
          launch: (node) => Effect.succeed({ command: command!, args: node.slice(1), env: {} })
        })
        expectOutcome(yield* runOn(broken, "child.add", { a: 1, b: 2 }), "failed", code!)
      }
    }))

  it.live("garbage on the result channel is ambiguous (result_invalid)", () =>
    Effect.gen(function*() {
      expectOutcome(
        yield* runOn(backend, "child.garbage", { marker: marker("garbage") }),
        "ambiguous",
        "backend.result_invalid"
      )
    }))

  it.live("a frame under any token but the spawn's is not taken for a result (result_unauthenticated)", () =>
    Effect.gen(function*() {
      const outcome = yield* runOn(backend, "child.forge", { marker: marker("forge") })
      expectOutcome(outcome, "ambiguous", "backend.result_unauthenticated")
    }))

  it.live("a result channel past its bound is cut off and ambiguous (result_oversized)", () =>
    Effect.gen(function*() {
      expectOutcome(
        yield* runOn(backend, "child.flood", { marker: marker("flood") }),
        "ambiguous",
        "backend.result_oversized"
      )
    }))

  it.live("stdout and stderr are drained past their bound, so a chatty child still answers", () =>
    Effect.gen(function*() {
      const outcome = yield* runOn(backend, "child.chatty", {})
      assert.strictEqual(outcome._tag === "succeeded" && outcome.result, "answered")
    }))

  // The runner spawned by hand: fd 3 what the test gives it, fd 4 a pipe; its exit code and what it wrote there.
  const runnerGiven = (fd3: "pipe" | number, request: string) =>
    Effect.async<{ readonly code: number | null; readonly frames: string }>((resume) => {
      const child = spawn(process.execPath, [...execArgv, runnerEntry().pathname], {
        stdio: ["ignore", "ignore", "ignore", fd3, "pipe"],
        env: {}
      })
      let frames = ""
      child.stdio[4]!.on("data", (chunk) => (frames += chunk))
      if (fd3 === "pipe") (child.stdio[3] as Writable).end(request)
      child.on("close", (code) => resume(Effect.succeed({ code, frames })))
    })

  const requestFor = (ran: string, token: string) =>
    JSON.stringify({
      protocol: "writ.child/v1",
      token,
      module: ChildActions.crash.module,
      export: ChildActions.crash.export,
      action: ChildActions.crash.name,
      version: "1",
      descriptor_digest: "0".repeat(64),
      input: { marker: ran },
      request_id: "req",
      attempt_id: "att",
      environment: {},
      secrets: {}
    })

  it.live("a runner whose request has no well-formed one-use token refuses before importing anything", () =>
    Effect.gen(function*() {
      const ran = marker("token")
      for (const token of ["", "not-a-token", "A".repeat(64), "0".repeat(63)]) {
        const { code, frames } = yield* runnerGiven("pipe", requestFor(ran, token))
        assert.strictEqual(code, 2)
        assert.strictEqual(frames, "", "nothing is said, not even that it started")
      }
      assert.isFalse(fs.existsSync(ran))
    }))

  it.live("a runner whose fd 3 is a file, not a pipe from its parent, refuses the request it holds", () =>
    Effect.gen(function*() {
      const ran = marker("file")
      const file = path.join(dir, "request.json")
      fs.writeFileSync(file, requestFor(ran, "a".repeat(64)))
      const fd = fs.openSync(file, "r")
      const { code, frames } = yield* runnerGiven(fd, "")
      fs.closeSync(fd)
      assert.strictEqual(code, 2)
      assert.strictEqual(frames, "")
      assert.isFalse(fs.existsSync(ran))
    }))

  it.live("an export that is not the action the parent described (its descriptor digest) is refused, its handler unrun", () =>
    Effect.gen(function*() {
      const ran = marker("mismatch")
      const { code, frames } = yield* runnerGiven("pipe", requestFor(ran, "b".repeat(64)))
      assert.strictEqual(code, 0)
      const lines = frames.trim().split("\n").map((line) => JSON.parse(line))
      assert.deepStrictEqual(lines.map((frame) => frame._tag), ["started", "refused"])
      assert.strictEqual(lines[1].reason, "descriptor_mismatch")
      assert.isTrue(lines.every((frame) => frame.token === "b".repeat(64)))
      assert.isFalse(fs.existsSync(ran))
    }))
})
