/** What a case runs under besides its stores: a fixed clock, and an evidence store that fails one commit on purpose. */
import { Clock, Duration, Effect, Either } from "effect"
import * as Time from "../../../core/base/Time.ts"
import type { EvidenceStore } from "../../../core/evidence/EvidenceStore.ts"
import { EvidenceUnavailableError } from "../../../core/evidence/EvidenceStore.ts"

/**
 * A clock stopped at `now`: what a test clock never adjusted gives, without building one per case. A sleep of no time
 * returns at once; any other never ends (as on a test clock nobody adjusts), so a deadline never fires.
 */
export const fixedClock = (now: Time.Timestamp): Clock.Clock => {
  const micros = Time.toMicros(now)
  const millis = Math.floor(micros / 1000)
  const nanos = BigInt(micros) * 1000n
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => millis,
    unsafeCurrentTimeNanos: () => nanos,
    currentTimeMillis: Effect.succeed(millis),
    currentTimeNanos: Effect.succeed(nanos),
    sleep: (duration) => (Duration.toMillis(duration) <= 0 ? Effect.void : Effect.never)
  }
}

/**
 * One case's evidence fault: once armed (after the case's boundary is open), the store's commit number `at` (0 the
 * first; an `append` or an `appendAll` is one commit) fails with EvidenceUnavailableError, as a full disk or a dropped
 * connection would, and later commits succeed again.
 */
export interface Fault {
  readonly at: number
  armed: boolean
  commits: number
  fired: boolean
}

/** A fault not yet armed, to fail commit `at`. */
export const fault = (at: number): Fault => ({ at, armed: false, commits: 0, fired: false })

const injected = () => new EvidenceUnavailableError({ detail: "writ.testing: an injected evidence store fault" })

/** Whether this commit is the one that fails; counts it. */
const strikes = (state: Fault) => {
  if (!state.armed) return false
  const hit = state.commits === state.at
  state.commits++
  if (hit) state.fired = true
  return hit
}

/** An evidence store that fails the commit the fault names, and otherwise is `store`. */
export const faulty = (store: EvidenceStore.Service, state: Fault): EvidenceStore.Service => {
  const now = store.appendAll.now
  const appendAll: EvidenceStore.AppendAll = Object.assign(
    (records: Parameters<EvidenceStore.AppendAll>[0]) =>
      Effect.suspend(() => (strikes(state) ? Effect.fail(injected()) : store.appendAll(records))),
    now === undefined ? {} : {
      now: (records: Parameters<EvidenceStore.AppendAll>[0]) => strikes(state) ? Either.left(injected()) : now(records)
    }
  )
  return {
    ...store,
    append: (record) => Effect.suspend(() => (strikes(state) ? Effect.fail(injected()) : store.append(record))),
    appendAll
  }
}
