/**
 * The in-memory ExecutorRegistry: the executors of this process on its in-memory stores, each live until its scope
 * closes. Runtimes: every one.
 */
import { Effect, Layer } from "effect"
import * as Time from "../../core/base/Time.ts"
import { ExecutorRegistry, RegisteredExecutor } from "../../core/evidence/ExecutorRegistry.ts"

/** A fresh in-memory registry. */
export const make = Effect.sync((): ExecutorRegistry.Service => {
  const registered = new Map<string, RegisteredExecutor>()
  let next = 0
  return {
    register: Effect.acquireRelease(
      Effect.map(Time.now, (opened_at) => {
        const executor = new RegisteredExecutor({
          executor_id: `executor-${++next}`,
          holder: "this process",
          opened_at
        })
        registered.set(executor.executor_id, executor)
        return executor
      }),
      (executor) => Effect.sync(() => registered.delete(executor.executor_id))
    ),
    live: Effect.sync(() => [...registered.values()]),
    forget: (executor_id) => Effect.sync(() => registered.delete(executor_id))
  }
})

/** A fresh in-memory registry as a layer. */
export const layer = Layer.effect(ExecutorRegistry, make)
