/**
 * effect's Schema arbitraries are fast-check 3 arbitraries (effect bundles fast-check 3); writ/testing runs fast-check 4.
 * Their values and shrinks pass between the two as they are, but their random source does not: fast-check 4's `Random`
 * has no `nextArrayInt`, which fast-check 3's `anything`, `object` and 64-bit integers draw from (so `Schema.Unknown`,
 * `Schema.Any` and `Schema.Object` fields threw `mrng.nextArrayInt is not a function` mid-run). This hands them
 * fast-check 3's interface over fast-check 4's source: the same draws, so seeded runs replay, and shrinking intact.
 */
import fc from "fast-check"

/** pure-rand's array integer: a sign and 32-bit digits, most significant first. */
interface ArrayInt {
  readonly sign: -1 | 1
  readonly data: ReadonlyArray<number>
}

const toBigInt = (value: ArrayInt): bigint => {
  let magnitude = 0n
  for (const digit of value.data) magnitude = (magnitude << 32n) + BigInt(digit >>> 0)
  return value.sign === -1 ? -magnitude : magnitude
}

const fromBigInt = (value: bigint): ArrayInt => {
  let magnitude = value < 0n ? -value : value
  const data: Array<number> = []
  do {
    data.unshift(Number(magnitude & 0xffffffffn))
    magnitude >>= 32n
  } while (magnitude > 0n)
  return { sign: value < 0n ? -1 : 1, data }
}

/** fast-check 3's Random, drawing from fast-check 4's. */
const random3 = (source: fc.Random): object => ({
  clone: () => random3(source.clone()),
  next: (bits: number) => source.next(bits),
  nextBoolean: () => source.nextBoolean(),
  nextInt: (min?: number, max?: number) => source.nextInt(min ?? -0x80000000, max ?? 0x7fffffff),
  nextBigInt: (min: bigint, max: bigint) => source.nextBigInt(min, max),
  nextArrayInt: (min: ArrayInt, max: ArrayInt) => fromBigInt(source.nextBigInt(toBigInt(min), toBigInt(max))),
  nextDouble: () => source.nextDouble(),
  getState: () => source.getState()
})

/** What writ/testing calls on a fast-check 3 arbitrary. */
interface Arbitrary3<T> {
  readonly generate: (random: object, biasFactor: number | undefined) => fc.Value<T>
  readonly canShrinkWithoutContext: (value: unknown) => value is T
  readonly shrink: (value: T, context: unknown) => fc.Stream<fc.Value<T>>
}

class Bridged<T> extends fc.Arbitrary<T> {
  constructor(private readonly inner: Arbitrary3<T>) {
    super()
  }
  generate(random: fc.Random, biasFactor: number | undefined): fc.Value<T> {
    return this.inner.generate(random3(random), biasFactor)
  }
  canShrinkWithoutContext(value: unknown): value is T {
    return this.inner.canShrinkWithoutContext(value)
  }
  shrink(value: T, context: unknown): fc.Stream<fc.Value<T>> {
    return this.inner.shrink(value, context)
  }
}

/** A fast-check 3 arbitrary (as effect's `Arbitrary.make` returns) as a fast-check 4 one. */
export const fromFastCheck3 = <T>(arbitrary: unknown): fc.Arbitrary<T> => new Bridged(arbitrary as Arbitrary3<T>)
