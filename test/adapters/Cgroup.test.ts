/**
 * Per-call cgroups on the host's real v1 memory and pids controllers: a pair is made with its limits, a wrapped
 * launch and everything it starts run inside both, and removal kills what is left and takes the pair away.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Cgroup from "../../adapters/node/internal/cgroup.ts"

const root = "/sys/fs/cgroup"
const limits = { memoryBytes: 64 * 1024 * 1024, processes: 16 }
const name = () => `test-${randomBytes(6).toString("hex")}`

describe("per-call cgroups", () => {
  it.effect("a pair carries its limits, and a wrapped launch and its children run in both", () =>
    Effect.gen(function*() {
      const group = Cgroup.create(root, name(), limits)
      const limit = (dir: string, file: string) => Number(fs.readFileSync(path.join(dir, file), "utf-8").trim())
      assert.strictEqual(limit(group.memory, "memory.limit_in_bytes"), limits.memoryBytes)
      assert.strictEqual(limit(group.pids, "pids.max"), limits.processes)
      const run = (command: string, args: ReadonlyArray<string>) => {
        const wrapped = Cgroup.wrap(group, command, args)
        return execFileSync(wrapped.command, wrapped.args, { env: {}, encoding: "utf-8" })
      }
      const seen = run("/bin/cat", ["/proc/self/cgroup"])
      assert.include(seen, `memory:/writ/${path.basename(group.memory)}`)
      assert.include(seen, `pids:/writ/${path.basename(group.pids)}`)
      assert.strictEqual(run("/usr/bin/env", []), "", "the launch keeps the empty environment it was given")
      assert.isAbove(Cgroup.peakMemory(group), 0)
      yield* Cgroup.remove(group)
      assert.isFalse(fs.existsSync(group.memory) || fs.existsSync(group.pids))
    }))

  it.live("removal kills what is still running in the pair first", () =>
    Effect.gen(function*() {
      const group = Cgroup.create(root, name(), limits)
      const wrapped = Cgroup.wrap(group, "/bin/sleep", ["60"])
      const child = spawn(wrapped.command, [...wrapped.args], { env: {}, stdio: "ignore" })
      const exited = new Promise<string | null>((resolve) => child.on("exit", (_, signal) => resolve(signal)))
      for (let i = 0; i < 100 && fs.readFileSync(path.join(group.pids, "cgroup.procs"), "utf-8") === ""; i++) {
        yield* Effect.sleep("20 millis")
      }
      yield* Cgroup.remove(group)
      assert.strictEqual(yield* Effect.promise(() => exited), "SIGKILL")
      assert.isFalse(fs.existsSync(group.memory) || fs.existsSync(group.pids))
    }), 30_000)

  it.live(
    "a sweep takes the empty groups a dead writ left, once stale, and never a fresh or a busy one",
    () =>
      Effect.gen(function*() {
        const left = Cgroup.create(root, name(), limits)
        const busy = Cgroup.create(root, name(), limits)
        const wrapped = Cgroup.wrap(busy, "/bin/sleep", ["60"])
        const child = spawn(wrapped.command, [...wrapped.args], { env: {}, stdio: "ignore" })
        for (let i = 0; i < 100 && fs.readFileSync(path.join(busy.pids, "cgroup.procs"), "utf-8") === ""; i++) {
          yield* Effect.sleep("20 millis")
        }
        Cgroup.sweep(root)
        assert.isTrue(fs.existsSync(left.memory) && fs.existsSync(left.pids), "a fresh group stays")
        Cgroup.sweep(root, Date.now() + 2 * Cgroup.staleAfterMs)
        assert.isFalse(fs.existsSync(left.memory) || fs.existsSync(left.pids), "a stale empty group is swept")
        assert.isTrue(fs.existsSync(busy.memory) && fs.existsSync(busy.pids), "a group with a process stays")
        const exited = new Promise<string | null>((resolve) => child.on("exit", (_, signal) => resolve(signal)))
        yield* Cgroup.remove(busy)
        assert.strictEqual(yield* Effect.promise(() => exited), "SIGKILL")
      }),
    30_000
  )

  it("a root with no controllers mounted refuses, and leaves nothing behind", () => {
    const missing = fs.mkdtempSync("/var/tmp/writ-cgroup-")
    assert.throws(() => Cgroup.create(missing, name(), limits))
    assert.deepStrictEqual(fs.readdirSync(missing), [])
    fs.rmSync(missing, { recursive: true })
  })
})
