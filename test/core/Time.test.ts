import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import * as Time from "../../core/base/Time.ts"

// The ISO text Date gives for the millisecond, with the microseconds appended.
const viaDate = (micros: number) =>
  new Date(Math.floor(micros / 1000)).toISOString().slice(0, 23) + String(micros % 1000).padStart(3, "0") + "Z"

const field = (max: number, width: number) => fc.nat(max).map((n) => String(n).padStart(width, "0"))

// Texts of the timestamp shape whose fields run past their ranges (month 13, day 32, hour 24, second 60).
const shaped = fc.tuple(
  fc.oneof(field(9999, 4), fc.constantFrom("1900", "2000", "2023", "2024", "2100")),
  field(13, 2),
  field(32, 2),
  field(24, 2),
  field(60, 2),
  field(60, 2),
  field(999_999, 6)
).map(([y, mo, d, h, mi, s, f]) => `${y}-${mo}-${d}T${h}:${mi}:${s}.${f}Z`)

describe("Time", () => {
  it.prop("fromMicros writes the instant Date writes", [fc.maxSafeNat()], ([micros]) => {
    assert.strictEqual(Time.fromMicros(micros), viaDate(micros))
  })

  it.prop("a shaped text is an instant exactly when Date reads it back unchanged", [shaped], ([text]) => {
    const millis = Date.parse(text.slice(0, 23) + "Z")
    const real = Number.isFinite(millis) && new Date(millis).toISOString().slice(0, 23) === text.slice(0, 23)
    assert.strictEqual(Time.isInstant(text), real)
  })

  it("knows the leap days", () => {
    assert.isTrue(Time.isInstant("2024-02-29T00:00:00.000000Z"))
    assert.isTrue(Time.isInstant("2000-02-29T23:59:59.999999Z"))
    assert.isFalse(Time.isInstant("1900-02-29T00:00:00.000000Z"))
    assert.isFalse(Time.isInstant("2023-02-29T00:00:00.000000Z"))
    assert.isFalse(Time.isInstant("2024-04-31T00:00:00.000000Z"))
    assert.isFalse(Time.isInstant("2024-12-31T24:00:00.000000Z"))
  })
})
