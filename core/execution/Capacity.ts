/**
 * Stage 3's capacity admission: before a governed operation opens, each call takes a lease on every capacity the
 * executor is configured with, or is deferred (never a gate result, and never an `operation_started`). A lease is
 * held until the attempt concludes, however it concludes.
 */
import { Effect, Either } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import type { Timestamp } from "../base/Time.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { ExecutionRequest } from "./ExecutionRequest.ts"

/** What a capacity decides on: the request, its trusted context, the resolved action, the attempt and its pinned snapshot. */
export interface Admission {
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly descriptor: ActionDescriptor
  readonly attempt_id: string
  /** Governed profiles: the policy snapshot pinned earlier in stage 3, which the call is decided on. */
  readonly snapshot?: PolicySnapshot
}

/** Why a call is deferred: a stable reason code, and when capacity is expected back, if known. */
export interface Deferral {
  readonly code: string
  readonly detail?: string
  readonly retry_at?: Timestamp
}

/** A held share of a capacity; releasing it twice releases once. */
export interface Lease {
  readonly release: Effect.Effect<void>
}

/** A capacity: a lease for a call, or its deferral. */
export interface Capacity {
  readonly id: string
  readonly admit: (admission: Admission) => Effect.Effect<Either.Either<Lease, Deferral>>
  /** Whether it bounds this call at all (default: every call); a call no capacity bounds skips stage 3's lease step. */
  readonly applies?: (admission: Admission) => boolean
}

/** Options of a bounded capacity. */
export interface BoundedOptions {
  readonly id: string
  /** Calls that may hold a lease at once, per key. */
  readonly permits: number
  /** The key calls share permits under (default: one key for every call). */
  readonly key?: (admission: Admission) => string
  /** The actions it bounds (default: every action). */
  readonly applies?: (admission: Admission) => boolean
}

/** At most `permits` calls at once per key; a call beyond them is deferred (`capacity.unavailable`), never queued. */
export const bounded = (options: BoundedOptions): Capacity => {
  const held = new Map<string, number>()
  return {
    id: options.id,
    ...(options.applies === undefined ? {} : { applies: options.applies }),
    admit: (admission) =>
      Effect.sync(() => {
        const key = options.key?.(admission) ?? ""
        const used = held.get(key) ?? 0
        if (used >= options.permits) {
          return Either.left({
            code: "capacity.unavailable",
            detail: `${options.id}: ${used} of ${options.permits} in use`
          })
        }
        held.set(key, used + 1)
        let released = false
        return Either.right({
          release: Effect.sync(() => {
            if (released) return
            released = true
            const left = (held.get(key) ?? 1) - 1
            if (left === 0) held.delete(key)
            else held.set(key, left)
          })
        })
      })
  }
}
