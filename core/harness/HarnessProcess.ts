/**
 * The process port a harness spawns its CLI through: a whole argv and environment (nothing inherited), stdout handed
 * over line by line, stderr kept up to a bound, and writ's own deadline on the whole process group. A non-zero exit
 * is a result, not an error; only a process that could not start is one.
 */
import type { Effect } from "effect"
import { Context, Schema } from "effect"

/** One process to run. */
export interface ProcessSpec {
  readonly command: string
  readonly args: ReadonlyArray<string>
  /** The whole environment: nothing else is inherited. */
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string
  /** SIGTERM to the process group at this deadline, SIGKILL after `graceMillis` more. */
  readonly deadlineMillis: number
  readonly graceMillis: number
  /** The most bytes of stdout read line by line, and of stderr kept; the rest is read and dropped. */
  readonly outputBytes: number
  /** Each complete stdout line, in order. */
  readonly onLine: (line: string) => Effect.Effect<void>
}

/** How a process ended. */
export interface ProcessExit {
  readonly code: number | null
  readonly signal: string | null
  /** Whether writ's deadline ended it. */
  readonly killed: boolean
  readonly stderr: string
  /** Whether either stream went past its bound. */
  readonly truncated: boolean
}

/** A process that could not be started. */
export class ProcessStartError extends Schema.TaggedError<ProcessStartError>()("ProcessStartError", {
  command: Schema.String,
  detail: Schema.String
}) {}

/** Runs a harness's CLI. */
export class HarnessProcess extends Context.Tag("writ/HarnessProcess")<HarnessProcess, HarnessProcess.Service>() {}

/** The HarnessProcess service. */
export declare namespace HarnessProcess {
  /** What a process runner provides. */
  export interface Service {
    readonly run: (spec: ProcessSpec) => Effect.Effect<ProcessExit, ProcessStartError>
  }
}
