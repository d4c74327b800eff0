/**
 * The HarnessProcess port on `@effect/platform`'s Command, in a scope: an empty environment plus exactly the given
 * variables, stdin closed, stdout read line by line and stderr kept up to a bound (both drained to the end, so the CLI
 * never blocks on a full pipe), and writ's own escalation at the deadline: SIGTERM to the process group, then SIGKILL
 * after the grace (the platform's finalizer alone would wait forever). Where the v1 `pids` controller is writable,
 * the CLI starts in a cgroup of its own, and whatever is still in it when the run ends is killed: a process the CLI
 * started in a session of its own (as Codex's sandbox helper is) escapes the group signal but not the cgroup. A run
 * first reclaims the groups of runs whose writ died mid-run. Runtimes: Node.
 */
import { Command, CommandExecutor } from "@effect/platform"
import { NodeCommandExecutor, NodeFileSystem } from "@effect/platform-node"
import { Duration, Effect, Fiber, Layer, Option, Ref, Stream } from "effect"
import { randomUUID } from "node:crypto"
import * as path from "node:path"
import type { ProcessExit, ProcessSpec } from "../../core/harness/HarnessProcess.ts"
import { HarnessProcess, ProcessStartError } from "../../core/harness/HarnessProcess.ts"
import * as Cgroup from "./internal/cgroup.ts"
import * as HostPaths from "./internal/hostPaths.ts"
import * as ProcessIdentity from "./internal/processIdentity.ts"

/** Options of the process runner. */
export interface Options {
  /** Where the v1 cgroup controllers are mounted (default: `/sys/fs/cgroup`). */
  readonly cgroupRoot?: string
}

const decoder = () => {
  const text = new TextDecoder()
  return (bytes: Uint8Array) => text.decode(bytes, { stream: true })
}

/** Bounded line splitting of stdout: each complete line to `onLine`, bytes past the bound read and dropped. */
const readLines = (stdout: Stream.Stream<Uint8Array, unknown>, spec: ProcessSpec, over: Ref.Ref<boolean>) =>
  Effect.gen(function*() {
    const decode = decoder()
    let pending = ""
    let seen = 0
    yield* Stream.runForEach(stdout, (bytes) =>
      Effect.gen(function*() {
        seen += bytes.length
        if (seen > spec.outputBytes) return yield* Ref.set(over, true)
        pending += decode(bytes)
        const lines = pending.split("\n")
        pending = lines.pop() ?? ""
        for (const line of lines) yield* spec.onLine(line)
      })).pipe(Effect.catchAll(() => Effect.void))
    if (pending !== "") yield* spec.onLine(pending)
  })

/** The first `bound` bytes of stderr, the rest read and dropped. */
const keepStderr = (stderr: Stream.Stream<Uint8Array, unknown>, bound: number, over: Ref.Ref<boolean>) =>
  Effect.gen(function*() {
    const kept: Array<Uint8Array> = []
    let size = 0
    yield* Stream.runForEach(stderr, (bytes) => {
      if (size + bytes.length > bound) return Ref.set(over, true)
      kept.push(bytes)
      size += bytes.length
      return Effect.void
    }).pipe(Effect.catchAll(() => Effect.void))
    const decode = decoder()
    return kept.map(decode).join("")
  })

/** Signal the whole group; a group already gone is fine. */
const signal = (process: CommandExecutor.Process, name: "SIGTERM" | "SIGKILL") =>
  process.kill(name).pipe(Effect.catchAll(() => Effect.void))

const exitOf = (process: CommandExecutor.Process) =>
  process.exitCode.pipe(
    Effect.map((code): { code: number | null; signal: string | null } => ({ code, signal: null })),
    Effect.catchAll((error) =>
      Effect.succeed({ code: null, signal: /signal: (\w+)/.exec(error.message)?.[1] ?? "unknown" })
    )
  )

// The file `command` names, as a spawn in the CLI's cwd with its own PATH would find it: launched through `sh`, it must
// be known to exist first.
const resolveCommand = (spec: ProcessSpec): string | undefined =>
  HostPaths.which(
    spec.command.includes("/") ? path.resolve(spec.cwd, spec.command) : spec.command,
    spec.env.PATH ?? ""
  )

/**
 * The run's own `pids` group, named for this process and removed (whatever is left in it killed) with the run; none
 * where cgroups are not writable. The groups of runs whose writ has ended are reclaimed first.
 */
const runGroup = (root: string) =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const self = ProcessIdentity.current()
      return Effect.zipRight(
        Cgroup.reclaim(root, self),
        Effect.sync(() => {
          try {
            return Cgroup.track(root, Cgroup.ownedBy(self, randomUUID()))
          } catch {
            return undefined
          }
        })
      )
    }),
    (group) => group === undefined ? Effect.void : Cgroup.remove(group)
  )

/** Run one process to its end, or to writ's deadline. */
export const run = (executor: CommandExecutor.CommandExecutor, options: Options = {}) => (spec: ProcessSpec) =>
  Effect.scoped(Effect.gen(function*() {
    const file = resolveCommand(spec)
    if (file === undefined) {
      return yield* new ProcessStartError({ command: spec.command, detail: "no such executable file" })
    }
    const group = yield* runGroup(options.cgroupRoot ?? "/sys/fs/cgroup")
    const launch = group === undefined ? { command: file, args: spec.args } : Cgroup.wrap(group, file, spec.args)
    const command = Command.make(launch.command, ...launch.args).pipe(
      Command.env(spec.env, { extendEnv: false }),
      Command.workingDirectory(spec.cwd),
      Command.feed("")
    )
    const process = yield* executor.start(command).pipe(
      Effect.mapError((error) => new ProcessStartError({ command: spec.command, detail: error.message }))
    )
    const over = yield* Ref.make(false)
    const out = yield* Effect.fork(readLines(process.stdout, spec, over))
    const err = yield* Effect.fork(keepStderr(process.stderr, spec.outputBytes, over))
    const deadline = yield* exitOf(process).pipe(Effect.timeout(Duration.millis(spec.deadlineMillis)), Effect.option)
    const killed = Option.isNone(deadline)
    if (killed) {
      // SIGTERM to the group and wait out the grace; a group still there gets SIGKILL.
      const termed = yield* signal(process, "SIGTERM").pipe(
        Effect.timeout(Duration.millis(spec.graceMillis)),
        Effect.option
      )
      if (Option.isNone(termed)) yield* signal(process, "SIGKILL")
    }
    const exit = yield* exitOf(process)
    // Both streams end when the last holder of the pipes exits: a straggler in the group is killed after the grace.
    const drained = yield* Fiber.join(Fiber.zip(out, err)).pipe(
      Effect.timeout(Duration.millis(spec.graceMillis)),
      Effect.option
    )
    if (Option.isNone(drained)) {
      yield* Effect.try(() => globalThis.process.kill(-process.pid, "SIGKILL")).pipe(Effect.catchAll(() => Effect.void))
      yield* Fiber.interrupt(out)
    }
    const stderr = Option.isSome(drained)
      ? drained.value[1]
      : yield* Fiber.join(err).pipe(Effect.timeout(Duration.millis(spec.graceMillis)), Effect.orElseSucceed(() => ""))
    return {
      code: exit.code,
      signal: exit.signal,
      killed,
      stderr,
      truncated: yield* Ref.get(over)
    } satisfies ProcessExit
  }))

/** The service over a CommandExecutor. */
export const makeWith = (options: Options) =>
  Effect.map(CommandExecutor.CommandExecutor, (executor): HarnessProcess.Service => ({
    run: run(executor, options)
  }))

/** The service over a CommandExecutor, with cgroups where they are mounted by default. */
export const make = makeWith({})

/** The HarnessProcess port on Node's child processes, with `options`. */
export const layerWith = (options: Options): Layer.Layer<HarnessProcess> =>
  Layer.effect(HarnessProcess, makeWith(options)).pipe(
    Layer.provide(NodeCommandExecutor.layer),
    Layer.provide(NodeFileSystem.layer)
  )

/** The HarnessProcess port on Node's child processes. */
export const layer: Layer.Layer<HarnessProcess> = layerWith({})
