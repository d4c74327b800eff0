/**
 * The harness process runner against a CLI that leaves a process behind in a session of its own, ignoring SIGTERM
 * (what Codex's sandbox helper does): with the v1 `pids` controller the straggler is killed when the run ends, and
 * its group removed; without a cgroup it outlives the run, which is what the group is for. A run reclaims the group
 * of a run whose writ has ended (killing what it holds) and leaves a live writ's alone. A missing executable is still
 * a ProcessStartError, and the deadline still stops the CLI.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Cgroup from "../../adapters/node/internal/cgroup.ts"
import * as ProcessIdentity from "../../adapters/node/internal/processIdentity.ts"
import * as NodeHarnessProcess from "../../adapters/node/NodeHarnessProcess.ts"
import { HarnessProcess, type ProcessSpec } from "../../core/harness/HarnessProcess.ts"

const dir = mkdtempSync(join(tmpdir(), "writ-harness-process-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const cgroupRoot = "/sys/fs/cgroup"

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return !readFileSync(`/proc/${pid}/stat`, "utf-8").split(") ")[1]!.startsWith("Z")
  } catch {
    return false
  }
}

/**
 * A CLI that records the `pids` cgroup it runs in, starts a straggler in a new session (SIGTERM ignored, stdio closed),
 * records its pid, and exits 0.
 */
const cliLeaving = (name: string) => {
  const cli = join(dir, `${name}.sh`)
  const pidFile = join(dir, `${name}.pid`)
  const groupFile = join(dir, `${name}.cgroup`)
  writeFileSync(
    cli,
    `#!/bin/sh\nsed -n 's/^[0-9]*:pids://p' /proc/self/cgroup > "${groupFile}"\n` +
      `setsid sh -c 'trap "" TERM; echo $$ > "$1"; exec sleep 300' sh "${pidFile}" </dev/null >/dev/null 2>&1 &\n` +
      `while [ ! -s "${pidFile}" ]; do sleep 0.01; done\necho started\n`
  )
  chmodSync(cli, 0o755)
  return {
    cli,
    straggler: () => Number(readFileSync(pidFile, "utf-8").trim()),
    group: () => readFileSync(groupFile, "utf-8").trim()
  }
}

/** A child process once it runs, with its identity as a writ would record its own. */
const started = (child: ReturnType<typeof spawn>) =>
  new Promise<{ child: ReturnType<typeof spawn>; identity: ProcessIdentity.ProcessIdentity }>((resolve) =>
    child.once("spawn", () => resolve({ child, identity: ProcessIdentity.of(child.pid!) }))
  )

/** A run's group named `name` under the real controller, holding a detached `sleep` moved into it. */
const holding = (name: string) => {
  const group = Cgroup.track(cgroupRoot, name)
  const straggler = spawn("sleep", ["300"], { detached: true, stdio: "ignore" })
  writeFileSync(join(group.pids, "cgroup.procs"), String(straggler.pid))
  straggler.unref()
  return { group, pid: straggler.pid! }
}

const spec = (command: string, lines: Array<string>, deadlineMillis = 10_000): ProcessSpec => ({
  command,
  args: [],
  env: { PATH: "/usr/bin:/bin" },
  cwd: dir,
  deadlineMillis,
  graceMillis: 200,
  outputBytes: 4096,
  onLine: (line) => Effect.sync(() => void lines.push(line))
})

describe("NodeHarnessProcess", () => {
  it.live("kills a process the CLI left in a session of its own, and removes the run's group", () =>
    Effect.gen(function*() {
      assert.isTrue(
        existsSync(join(cgroupRoot, "pids", "cgroup.procs")),
        "the v1 pids controller is mounted (.ci/run runs as root)"
      )
      const { cli, group, straggler } = cliLeaving("kept")
      const lines: Array<string> = []
      const exit = yield* (yield* HarnessProcess).run(spec(cli, lines))
      assert.deepStrictEqual([exit.code, exit.killed, lines], [0, false, ["started"]])
      const pid = straggler()
      assert.isFalse(alive(pid), `straggler ${pid} outlived the run`)
      // The CLI ran in a group of writ's own for this run, which is gone with it.
      assert.match(group(), new RegExp(`^/writ/harness-(\\d+|x)-${process.pid}-\\d+-[0-9a-f-]{36}$`))
      assert.isFalse(existsSync(join(cgroupRoot, "pids", group())))
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  // A root whose `pids` is a plain directory, not a controller: no group is made there, and the run goes on without.
  const plainRoot = join(dir, "plain")
  mkdirSync(join(plainRoot, "pids"), { recursive: true })

  it.live("without a cgroup the same straggler outlives the run (the attack is real)", () =>
    Effect.gen(function*() {
      const { cli, straggler } = cliLeaving("escaped")
      const exit = yield* (yield* HarnessProcess).run(spec(cli, []))
      const pid = straggler()
      try {
        assert.strictEqual(exit.code, 0)
        assert.isTrue(alive(pid), "the straggler should escape the process group")
        assert.isFalse(
          existsSync(join(plainRoot, "pids", "writ")),
          "nothing is made under a directory that is not a controller"
        )
      } finally {
        process.kill(pid, "SIGKILL")
      }
    }).pipe(Effect.provide(NodeHarnessProcess.layerWith({ cgroupRoot: plainRoot }))))

  it.live("reclaims the group of a run whose writ has ended, killing what it holds; a live writ's group is left alone", () =>
    Effect.gen(function*() {
      // Stand-ins for two writ processes: one recorded while it ran and then ended, one still running.
      const ended = yield* Effect.promise(() => started(spawn("sleep", ["30"])))
      const running = yield* Effect.promise(() => started(spawn("sleep", ["300"])))
      ended.child.kill("SIGKILL")
      yield* Effect.promise(() => new Promise((resolve) => ended.child.once("exit", resolve)))
      // Each owns a group holding a process its CLI left behind.
      const orphaned = holding(Cgroup.ownedBy(ended.identity, randomUUID()))
      const kept = holding(Cgroup.ownedBy(running.identity, randomUUID()))
      // An owner recorded without its start time is never proven ended, even when its pid is gone.
      const unproven = holding(Cgroup.ownedBy({ ...ended.identity, started: "" }, randomUUID()))
      try {
        assert.isTrue(alive(orphaned.pid) && alive(kept.pid) && alive(unproven.pid))
        const exit = yield* (yield* HarnessProcess).run({ ...spec("echo", []), args: ["next run"] })
        assert.strictEqual(exit.code, 0)
        assert.isFalse(alive(orphaned.pid), "the ended writ's leftover is killed")
        assert.isFalse(existsSync(orphaned.group.pids), "and its group removed")
        assert.isTrue(alive(kept.pid), "a running writ's group is never touched")
        assert.isTrue(existsSync(kept.group.pids))
        assert.isTrue(alive(unproven.pid) && existsSync(unproven.group.pids), "nor one whose end is not proven")
      } finally {
        yield* Cgroup.remove(kept.group)
        yield* Cgroup.remove(unproven.group)
        running.child.kill("SIGKILL")
      }
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  it.live("a missing executable is a ProcessStartError, found on the CLI's own PATH or not at all", () =>
    Effect.gen(function*() {
      const runner = yield* HarnessProcess
      const missing = yield* Effect.flip(runner.run(spec("/nonexistent/claude", [])))
      assert.strictEqual(missing._tag, "ProcessStartError")
      const unlisted = yield* Effect.flip(runner.run({ ...spec("writ-no-such-cli", []), env: { PATH: dir } }))
      assert.strictEqual(unlisted._tag, "ProcessStartError")
      const lines: Array<string> = []
      const found = yield* runner.run({ ...spec("echo", lines), args: ["on", "path"] })
      assert.deepStrictEqual([found.code, lines], [0, ["on path"]])
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))

  it.live("the deadline still stops the CLI (SIGTERM to its group)", () =>
    Effect.gen(function*() {
      const cli = join(dir, "slow.sh")
      writeFileSync(cli, "#!/bin/sh\necho waiting\nexec sleep 30\n")
      chmodSync(cli, 0o755)
      const lines: Array<string> = []
      const exit = yield* (yield* HarnessProcess).run(spec(cli, lines, 500))
      assert.deepStrictEqual([exit.killed, lines], [true, ["waiting"]])
    }).pipe(Effect.provide(NodeHarnessProcess.layer)))
})
