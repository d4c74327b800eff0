/**
 * Time as UTC strings with exactly six fractional digits, read from Effect's Clock so TestClock
 * replays it.
 */
import { Clock, Effect, Schema } from "effect"

const SHAPE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/

const isLeap = (year: number) => year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)

const daysInMonth = (year: number, month: number) =>
  month === 2 ? (isLeap(year) ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31

// The number written by the ASCII digits of `text` from `start` to `end`.
const digits = (text: string, start: number, end: number) => {
  let value = 0
  for (let i = start; i < end; i++) value = value * 10 + text.charCodeAt(i) - 48
  return value
}

// A text of the shape names a real instant when every field is in range (no month 13, February 30, hour 24).
const isReal = (text: string) => {
  const month = digits(text, 5, 7)
  const day = digits(text, 8, 10)
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(digits(text, 0, 4), month) &&
    digits(text, 11, 13) < 24 && digits(text, 14, 16) < 60 && digits(text, 17, 19) < 60
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

const pad = (value: number, width: number) => String(value).padStart(width, "0")

const MICROS_PER_DAY = 86_400_000_000

// The text of a safe integer count of microseconds from 1970 (up to 2255), by Hinnant's civil-from-days.
const format = (micros: number) => {
  const days = Math.floor(micros / MICROS_PER_DAY)
  const time = micros - days * MICROS_PER_DAY
  const z = days + 719_468
  const era = Math.floor(z / 146_097)
  const dayOfEra = z - era * 146_097
  const yearOfEra = Math.floor(
    (dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365
  )
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100))
  const shifted = Math.floor((5 * dayOfYear + 2) / 153)
  const day = dayOfYear - Math.floor((153 * shifted + 2) / 5) + 1
  const month = shifted < 10 ? shifted + 3 : shifted - 9
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
  const seconds = Math.floor(time / 1_000_000)
  return `${pad(year, 4)}-${pad(month, 2)}-${pad(day, 2)}T${pad(Math.floor(seconds / 3600), 2)}:${
    pad(Math.floor(seconds / 60) % 60, 2)
  }:${pad(seconds % 60, 2)}.${pad(time - seconds * 1_000_000, 6)}Z`
}

/** The timestamp of a count of microseconds since the epoch. */
export const fromMicros = (micros: number): Timestamp => {
  // For a safe integer from 1970 the text always has the pattern's shape; otherwise `make` checks.
  if (Number.isSafeInteger(micros) && micros >= 0) return Timestamp.make(format(micros), { disableValidation: true })
  const whole = Math.floor(micros / 1000)
  const fraction = String(micros - whole * 1000).padStart(3, "0")
  return Timestamp.make(new Date(whole).toISOString().slice(0, 23) + fraction + "Z")
}

/** Microseconds since the epoch of a timestamp. */
export const toMicros = (timestamp: Timestamp): number =>
  Date.parse(timestamp.slice(0, 23) + "Z") * 1000 + Number(timestamp.slice(23, 26))

/** Microseconds since the epoch, from the Clock. */
export const nowMicros: Effect.Effect<number> = Effect.map(Clock.currentTimeNanos, (nanos) => Number(nanos / 1000n))

/** The current timestamp on a Clock, synchronously. */
export const ofClock = (clock: Clock.Clock): Timestamp => fromMicros(Number(clock.unsafeCurrentTimeNanos() / 1000n))

/** The current timestamp, from the Clock. */
export const now: Effect.Effect<Timestamp> = Effect.map(nowMicros, fromMicros)
