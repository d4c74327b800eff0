/**
 * A chain's append lock: one holder at a time, waiters served in arrival order. Taking a free lock costs no Effect
 * operation of its own; a wait can be interrupted, and a holder's body runs uninterruptibly to its end.
 */
import { Effect, Exit } from "effect"

/** Whether the lock is held, and who waits for it, first in line first. */
export interface ChainLock {
  held: boolean
  readonly waiters: Array<() => void>
}

/** A free lock. */
export const make = (): ChainLock => ({ held: false, waiters: [] })

// Hand the lock to the first waiter, or free it.
const release = (lock: ChainLock) => {
  const next = lock.waiters.shift()
  if (next === undefined) lock.held = false
  else next()
}

// Wait in line; interrupted after the lock was handed over, the waiter hands it on.
const wait = (lock: ChainLock) =>
  Effect.async<void>((resume) => {
    let handed = false
    const waiter = () => {
      handed = true
      resume(Effect.void)
    }
    lock.waiters.push(waiter)
    return Effect.sync(() => {
      if (handed) release(lock)
      else lock.waiters.splice(lock.waiters.indexOf(waiter), 1)
    })
  })

/** Run `body` holding the lock, uninterruptibly once it holds it; `onFailure` runs, still holding it, if the body fails. */
export const withLock = <A, E>(lock: ChainLock, body: Effect.Effect<A, E>, onFailure?: () => void) =>
  Effect.uninterruptibleMask((restore) => {
    const run = Effect.onExit(body, (exit) =>
      Effect.sync(() => {
        try {
          if (Exit.isFailure(exit)) onFailure?.()
        } finally {
          release(lock)
        }
      }))
    if (!lock.held) {
      lock.held = true
      return run
    }
    return Effect.zipRight(restore(wait(lock)), run)
  })
