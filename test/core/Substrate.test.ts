import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema, TestClock } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"

const take = (n: number) => Effect.all(Array.from({ length: n }, () => IdGenerator.uuid))

describe("IdGenerator", () => {
  it.effect("a seeded generator replays the same UUIDs, and different seeds differ", () =>
    Effect.gen(function*() {
      const a = yield* take(5).pipe(Effect.provide(IdGenerator.layerSeeded(1)))
      const b = yield* take(5).pipe(Effect.provide(IdGenerator.layerSeeded(1)))
      const c = yield* take(5).pipe(Effect.provide(IdGenerator.layerSeeded(2)))
      assert.deepStrictEqual(a, b)
      assert.notDeepEqual(a, c)
      assert.strictEqual(new Set(a).size, 5)
      for (const id of [...a, ...c]) assert.isTrue(Schema.is(IdGenerator.Uuid)(id), id)
    }))

  it.effect("the crypto generator yields lowercase v7 UUIDs: the Clock's milliseconds in the first 48 bits, then random", () =>
    Effect.gen(function*() {
      const ms = Date.UTC(2026, 11, 5, 8, 0, 0, 123)
      yield* TestClock.setTime(ms)
      const ids = yield* IdGenerator.IdGenerator.pipe(
        Effect.flatMap((generator) =>
          Effect.gen(function*() {
            const now = yield* take(1000).pipe(Effect.provideService(IdGenerator.IdGenerator, generator))
            yield* TestClock.adjust("1 millis")
            const later = yield* take(1000).pipe(Effect.provideService(IdGenerator.IdGenerator, generator))
            return { now, later }
          })
        ),
        Effect.provide(IdGenerator.layerCrypto)
      )
      const all = [...ids.now, ...ids.later]
      assert.strictEqual(new Set(all).size, all.length)
      const stampOf = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16)
      for (const id of all) {
        assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
        assert.isTrue(Schema.is(IdGenerator.Uuid)(id), id)
      }
      assert.deepStrictEqual(new Set(ids.now.map(stampOf)), new Set([ms]))
      assert.deepStrictEqual(new Set(ids.later.map(stampOf)), new Set([ms + 1]))
      // Minted later sorts later: what keeps the stores' id indexes appending.
      for (const later of ids.later) assert.isTrue(ids.now.every((now) => now < later))
      // The random bits vary: each hex digit after the version takes many values.
      for (const at of [15, 16, 17, 20, 21, 22, 24, 30, 35]) assert.isAbove(new Set(all.map((id) => id[at])).size, 8)
    }))
})

describe("Time", () => {
  it.effect("reads microsecond UTC strings from the Clock", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* Time.now, "1970-01-01T00:00:00.000000Z")
      yield* TestClock.adjust("1500 millis")
      assert.strictEqual(yield* Time.now, "1970-01-01T00:00:01.500000Z")
    }))

  it("round-trips microseconds", () => {
    const micros = 1_795_977_231_123_456
    const stamp = Time.fromMicros(micros)
    assert.strictEqual(stamp, "2026-11-29T18:33:51.123456Z")
    assert.strictEqual(Time.toMicros(stamp), micros)
  })

  it("a timestamp is a real instant: month 13, February 30 and hour 24 are refused, as is a wrong shape", () => {
    const is = Schema.is(Time.Timestamp)
    for (const valid of ["2026-11-29T18:33:51.123456Z", "2024-02-29T23:59:59.999999Z", "1970-01-01T00:00:00.000000Z"]) {
      assert.isTrue(is(valid), valid)
    }
    for (
      const invalid of [
        "2020-13-01T00:00:00.000000Z",
        "2023-02-29T00:00:00.000000Z",
        "2026-02-30T00:00:00.000000Z",
        "2026-01-01T24:00:00.000000Z",
        "2026-01-01T00:60:00.000000Z",
        "2026-01-01T00:00:00.000Z",
        "yesterday"
      ]
    ) {
      assert.isFalse(is(invalid), invalid)
    }
  })
})

describe("Digest", () => {
  it.effect("sha256-v1 is SHA-256 over canonical bytes", () =>
    Effect.gen(function*() {
      assert.strictEqual(
        yield* Digest.canonical({ b: 1, a: "x" }),
        yield* Digest.sha256Text("{\"a\":\"x\",\"b\":1}")
      )
      assert.strictEqual(
        yield* Digest.sha256Text("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
      )
    }).pipe(Effect.provide(WebCryptoDigest.layer)))
})
