/**
 * One spawn of the child runner, from the parent's side: the request written on fd 3 and closed, the result channel
 * on fd 4 read within its bound, stdout and stderr drained and kept only up to a bound, the whole process group
 * killed at the wall clock or on interruption (and waited for), and what came back classified: the child's answer, or
 * an ActionBackendError saying whether the action's code had started.
 */
import { Duration, Effect, Either, Exit } from "effect"
import { spawn } from "node:child_process"
import { timingSafeEqual } from "node:crypto"
import type { Duplex, Readable, Writable } from "node:stream"
import type { ActionBackendError } from "../../../core/action/ActionExecutionBackend.ts"
import { issue } from "../../../core/action/internal/backendFailure.ts"
import * as Wire from "./childWire.ts"

/**
 * How to start the runner: a command, its whole argv and its whole environment, and where its wire runs (`fds`: the
 * request on fd 3 and frames on fd 4; `stdio`: the request on stdin and frames on stdout, for a runtime that opens no
 * other inherited descriptor).
 */
export interface Launch {
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly channels?: "fds" | "stdio"
  /**
   * What the command inherits on descriptors from `Wire.filesFd` on: bytes (a pipe each, written and closed), or a
   * descriptor of this process's, passed as it is.
   */
  readonly files?: ReadonlyArray<Uint8Array | number>
  /** Variables the launch adds to the request's environment (a proxy's address), set before the module loads. */
  readonly environment?: Readonly<Record<string, string>>
  /**
   * Set up around the started command before its request is written (a bridge into its network namespace): `pipes`
   * more pipes follow the files, handed to `run`; when `run` fails the group is killed and the call never started.
   */
  readonly setup?: {
    readonly pipes: number
    readonly run: (pipes: ReadonlyArray<Duplex>) => Effect.Effect<void, string>
  }
  /** Checked when the runner died without answering: the failure renamed for the limit it hit (its memory). */
  readonly exceeded?: (failure: ActionBackendError) => ActionBackendError | undefined
}

/** The bounds of one spawn. */
export interface Bounds {
  readonly wallClock: Duration.Duration
  /** The most bytes of stdout and of stderr kept; the rest is read and dropped. */
  readonly outputBytes: number
}

/** The child's answer: the frame that concluded its invocation. */
export type Answer = Exclude<Wire.Frame, { readonly _tag: "started" }>

/** What a spawn ended with, before classification. */
interface Ended {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly result: string
  readonly oversized: boolean
  readonly overran: boolean
  readonly spawnError?: string
}

/** The bounded start of a stream, the rest read and dropped so the child never blocks on a full pipe. */
const drain = (stream: Readable | null, bound: number) => {
  const kept: Array<Buffer> = []
  let size = 0
  stream?.on("data", (chunk: Buffer) => {
    if (size >= bound) return
    kept.push(chunk.subarray(0, bound - size))
    size += Math.min(chunk.length, bound - size)
  })
  return () => Buffer.concat(kept).toString("utf-8")
}

const killGroup = (pid: number | undefined) => {
  if (pid === undefined) return
  try {
    process.kill(-pid, "SIGKILL")
  } catch {
    // The group is gone already.
  }
}

const spawnOnce = (launch: Launch, request: string, bounds: Bounds) =>
  Effect.async<Ended & { readonly stderr: string }>((resume) => {
    const stdio = launch.channels === "stdio"
    const files = launch.files ?? []
    const extra = files.length + (launch.setup?.pipes ?? 0)
    const child = spawn(launch.command, [...launch.args], {
      stdio: [
        ...(stdio ? ["pipe", "pipe", "pipe"] as const : ["ignore", "pipe", "pipe", "pipe", "pipe"] as const),
        ...(extra > 0 ? Array(Wire.filesFd - (stdio ? 3 : 5)).fill("ignore") : []),
        ...files.map((file) => typeof file === "number" ? file : "pipe" as const),
        ...Array(launch.setup?.pipes ?? 0).fill("pipe" as const)
      ],
      env: { ...launch.env },
      // Its own process group, so a kill reaches whatever it started.
      detached: true
    })
    const stderr = drain(child.stderr, bounds.outputBytes)
    if (!stdio) drain(child.stdout, bounds.outputBytes)
    const chunks: Array<Buffer> = []
    let size = 0
    let oversized = false
    let overran = false
    let done = false
    const results = child.stdio[stdio ? 1 : 4] as Readable
    results.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > Wire.maxResultBytes) {
        oversized = true
        killGroup(child.pid)
      } else chunks.push(chunk)
    })
    const requests = child.stdio[stdio ? 0 : 3] as Writable
    // A child that exits without reading its request breaks the pipe: that is its exit, not an error here.
    requests.on("error", () => undefined)
    files.forEach((bytes, index) => {
      if (typeof bytes === "number") return
      const file = child.stdio[Wire.filesFd + index] as Writable
      file.on("error", () => undefined)
      file.end(bytes)
    })
    let setupError: string | undefined
    let stopSetup: (() => void) | undefined
    if (launch.setup === undefined) requests.end(request)
    else {
      const pipes = Array.from({ length: launch.setup.pipes }, (_, index) => {
        const pipe = child.stdio[Wire.filesFd + files.length + index] as Duplex
        pipe.on("error", () => undefined)
        return pipe
      })
      const cancel = Effect.runCallback(launch.setup.run(pipes), {
        onExit: (exit) => {
          stopSetup = undefined
          if (Exit.isSuccess(exit)) return void requests.end(request)
          setupError = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : "its setup was stopped"
          killGroup(child.pid)
        }
      })
      stopSetup = () => cancel()
    }
    const timer = setTimeout(() => {
      overran = true
      killGroup(child.pid)
    }, Duration.toMillis(bounds.wallClock))
    const finish = (ended: Ended) => {
      if (done) return
      done = true
      clearTimeout(timer)
      stopSetup?.()
      resume(
        Effect.succeed({ ...ended, ...(setupError === undefined ? {} : { spawnError: setupError }), stderr: stderr() })
      )
    }
    child.on("error", (error) => {
      finish({ code: null, signal: null, result: "", oversized, overran, spawnError: error.message })
    })
    child.on("exit", (code, signal) => {
      // Whatever the runner left behind in its group goes with it; the streams then close within a moment.
      killGroup(child.pid)
      const close = setTimeout(() => results.destroy(), 1000)
      const concluded = () => {
        clearTimeout(close)
        finish({ code, signal, result: Buffer.concat(chunks).toString("utf-8"), oversized, overran })
      }
      if (results.closed) concluded()
      else results.once("close", concluded)
    })
    // Interrupted (the executor's deadline or a cancel): kill the group and wait for the exit, so teardown completes.
    return Effect.async<void>((stopped) => {
      if (done || child.exitCode !== null || child.signalCode !== null) return stopped(Effect.void)
      child.once("exit", () => stopped(Effect.void))
      killGroup(child.pid)
    })
  })

const sameToken = (a: string, b: string) =>
  a.length === b.length && timingSafeEqual(Buffer.from(a, "utf-8"), Buffer.from(b, "utf-8"))

/** Classify how a spawn ended: the answer the child gave with this spawn's token, or the backend failure it was. */
const classify = (ended: Ended, token: string): Either.Either<Answer, ActionBackendError> => {
  const fail =
    (outcome: ActionBackendError["outcome"], reason: ActionBackendError["reason"], started: boolean) =>
    (detail: string) => Either.left(issue({ outcome, reason, started, detail }))
  if (ended.spawnError !== undefined) {
    return fail("failed", "spawn_failed", false)(`the runner could not be started: ${ended.spawnError}`)
  }
  if (ended.oversized) {
    return fail("ambiguous", "result_oversized", true)(`the result channel passed ${Wire.maxResultBytes} bytes`)
  }
  const frames = Wire.parseFrames(ended.result)
  const parsed = Either.getOrElse(frames, () => [])
  const started = parsed.length > 0 && parsed[0]!._tag === "started"
  if (ended.overran) {
    return fail("timed_out", "deadline_exceeded", started || ended.result !== "")("the wall clock ran out")
  }
  if (Either.isLeft(frames)) return fail("ambiguous", "result_invalid", true)(frames.left)
  if (parsed.some((frame) => !sameToken(frame.token, token))) {
    return fail("ambiguous", "result_unauthenticated", true)("a frame does not carry this spawn's token")
  }
  const how = ended.signal !== null ? `was killed by ${ended.signal}` : `exited with code ${ended.code}`
  if (parsed.length === 0) return fail("failed", "child_exited", false)(`the runner ${how} before it started`)
  const [first, answer, ...rest] = parsed
  if (first!._tag !== "started" || rest.length > 0 || answer?._tag === "started") {
    return fail("ambiguous", "result_invalid", true)("the frames are not one start and one answer")
  }
  if (answer === undefined) {
    return ended.signal !== null
      ? fail("ambiguous", "child_killed", true)(`the runner ${how} after the action started`)
      : fail("ambiguous", "child_crashed", true)(`the runner ${how} after the action started`)
  }
  return Either.right(answer)
}

/** Spawn the runner once for `request` and conclude: its answer, or the backend failure. */
export const run = (
  launch: Launch,
  request: Wire.ChildRequest,
  bounds: Bounds
): Effect.Effect<{ readonly answer: Answer; readonly stderr: string }, ActionBackendError> =>
  Effect.flatMap(
    spawnOnce(launch, Wire.encodeRequest(request), bounds),
    (ended) =>
      Either.match(classify(ended, request.token), {
        onLeft: (error) =>
          Effect.fail(
            ["child_killed", "child_crashed", "child_exited"].includes(error.reason)
              ? launch.exceeded?.(error) ?? error
              : error
          ),
        onRight: (answer) => Effect.succeed({ answer, stderr: ended.stderr })
      })
  )
