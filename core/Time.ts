/**
 * Time as UTC strings with exactly six fractional digits, read from Effect's Clock so TestClock
 * replays it.
 */
import { Clock, Effect, Schema } from "effect"

const SHAPE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/

// A text of the shape names a real instant when the date reads back unchanged (no month 13, February 30, hour 24).
const isReal = (text: string) => {
  const millis = Date.parse(text.slice(0, 23) + "Z")
  return Number.isFinite(millis) && new Date(millis).toISOString().slice(0, 23) === text.slice(0, 23)
}

/** Whether a text is a timestamp: the shape, and a real instant. */
export const isInstant = (text: string): boolean => SHAPE.test(text) && isReal(text)

/** A UTC timestamp with microseconds: `2026-11-29T18:33:51.123456Z`. */
export const Timestamp = Schema.String.pipe(
  Schema.pattern(SHAPE),
  Schema.filter((text) => isReal(text) || "not a real UTC instant"),
  Schema.brand("Timestamp")
)

/** A UTC timestamp with microseconds. */
export type Timestamp = typeof Timestamp.Type

/** The timestamp of a count of microseconds since the epoch. */
export const fromMicros = (micros: number): Timestamp => {
  const whole = Math.floor(micros / 1000)
  const fraction = String(micros - whole * 1000).padStart(3, "0")
  // For a safe integer from 1970 (up to 2255) the ISO text always has the pattern's shape; otherwise `make` checks.
  return Timestamp.make(new Date(whole).toISOString().slice(0, 23) + fraction + "Z", {
    disableValidation: Number.isSafeInteger(micros) && micros >= 0
  })
}

/** Microseconds since the epoch of a timestamp. */
export const toMicros = (timestamp: Timestamp): number =>
  Date.parse(timestamp.slice(0, 23) + "Z") * 1000 + Number(timestamp.slice(23, 26))

/** Microseconds since the epoch, from the Clock. */
export const nowMicros: Effect.Effect<number> = Effect.map(Clock.currentTimeNanos, (nanos) => Number(nanos / 1000n))

/** The current timestamp, from the Clock. */
export const now: Effect.Effect<Timestamp> = Effect.map(nowMicros, fromMicros)
