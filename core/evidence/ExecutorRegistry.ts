/**
 * Which governed executors have a store open: each registers for as long as its layer lives, so recovery can tell an
 * operation a crash left open from one a live executor is still running, and refuse to close the second kind.
 */
import { Context, Schema } from "effect"
import type { Effect, Scope } from "effect"

/** An executor registered on a store: its id, the process holding it (as the store can name it), and since when. */
export class RegisteredExecutor extends Schema.Class<RegisteredExecutor>("RegisteredExecutor")({
  executor_id: Schema.String,
  holder: Schema.String,
  opened_at: Schema.String
}) {}

/** Recovery refused: executors that may still be running the operations it would close have the store open. */
export class LiveExecutorsError extends Schema.TaggedError<LiveExecutorsError>()("LiveExecutorsError", {
  executors: Schema.Array(RegisteredExecutor)
}) {
  override get message() {
    const held = this.executors.map((executor) =>
      `executor ${executor.executor_id}: ${executor.holder}, since ${executor.opened_at}`
    ).join("; ")
    return `recovery refused: ${this.executors.length} executor(s) still have this store open and may be running ` +
      `the operations it would close (${held}); stop them first, forget a registration whose process is gone, ` +
      `or force recovery`
  }
}

/** The executors registered on a store. */
export class ExecutorRegistry extends Context.Tag("writ/ExecutorRegistry")<
  ExecutorRegistry,
  ExecutorRegistry.Service
>() {}

/** The ExecutorRegistry service. */
export declare namespace ExecutorRegistry {
  /** What an ExecutorRegistry layer provides; a storage failure is a defect (the port has no error for it). */
  export interface Service {
    /** Register one executor until the scope closes. */
    readonly register: Effect.Effect<RegisteredExecutor, never, Scope.Scope>
    /** Every registered executor whose process may still be running; one known to have ended is forgotten. */
    readonly live: Effect.Effect<ReadonlyArray<RegisteredExecutor>>
    /** Drop a registration its process left behind (an operator's call); false when no such executor is registered. */
    readonly forget: (executor_id: string) => Effect.Effect<boolean>
  }
}
