/**
 * Side-by-side timing: a warm-up, then alternating rounds of a baseline and a subject in one
 * process, each side's time per op taken as the median over rounds.
 */
import { Effect } from "effect"

/** One benchmark: a name for `npm run bench -- NAME`, and a run that prints its ratio lines. */
export interface Benchmark {
  readonly name: string
  readonly run: () => Promise<void>
}

/** Runs `iterations` ops of one side once. */
export type Runner = (iterations: number) => Promise<void>

/** How much to measure. */
export interface Options {
  readonly iterations: number
  readonly rounds: number
  readonly warmup: number
}

/** Median microseconds per op of each side, per-round figures, and subject / baseline. */
export interface Comparison {
  readonly baseline: number
  readonly subject: number
  readonly ratio: number
  readonly perRound: ReadonlyArray<{ readonly baseline: number; readonly subject: number }>
}

/** The driver both sides share: one fiber yielding a fresh op `iterations` times. */
export const loop = <A, E>(op: () => Effect.Effect<A, E>, iterations: number): Effect.Effect<void, E> =>
  Effect.gen(function*() {
    for (let i = 0; i < iterations; i++) yield* op()
  })

/** The median of a non-empty list. */
export const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** Collect garbage when node runs with --expose-gc, so each timed run pays only for its own. */
export const collect = (): void => {
  globalThis.gc?.()
  globalThis.gc?.()
}

/** Microseconds of one clock (wall or CPU) per op over one run of a side. */
type Clock = (runner: Runner, iterations: number) => Promise<number>

const time: Clock = async (runner, iterations) => {
  collect()
  const start = performance.now()
  await runner(iterations)
  return ((performance.now() - start) * 1000) / iterations
}

const cpu: Clock = async (runner, iterations) => {
  collect()
  const start = process.cpuUsage()
  await runner(iterations)
  const used = process.cpuUsage(start)
  return (used.user + used.system) / iterations
}

/** Warm both sides up, then measure them by `clock` in alternating order, round by round. */
const compareBy =
  (clock: Clock) => async (baseline: Runner, subject: Runner, options: Options): Promise<Comparison> => {
    for (let i = 0; i < options.warmup; i++) {
      await baseline(options.iterations)
      await subject(options.iterations)
    }
    const perRound: Array<{ baseline: number; subject: number }> = []
    for (let i = 0; i < options.rounds; i++) {
      // Alternate which side goes first so neither always inherits the other's heap state.
      if (i % 2 === 0) {
        const b = await clock(baseline, options.iterations)
        perRound.push({ baseline: b, subject: await clock(subject, options.iterations) })
      } else {
        const s = await clock(subject, options.iterations)
        perRound.push({ baseline: await clock(baseline, options.iterations), subject: s })
      }
    }
    const b = median(perRound.map((round) => round.baseline))
    const s = median(perRound.map((round) => round.subject))
    return { baseline: b, subject: s, ratio: s / b, perRound }
  }

/** Warm both sides up, then time them in alternating order, round by round. */
export const compare = compareBy(time)

/** `compare` by the process's CPU time (user and system) per op instead of wall time. */
export const compareCpu = compareBy(cpu)

/** Bytes as megabytes, two decimals. */
export const mb = (bytes: number): string => (bytes / (1024 * 1024)).toFixed(2)
