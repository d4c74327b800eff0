/** Sequence properties: a fast-check command model of calls sent one after another to one executor and its stores. */
import { Effect } from "effect"
import fc from "fast-check"
import type { Call } from "../Calls.ts"
import { PropertyViolation } from "../Report.ts"
import { source, summary } from "../Report.ts"
import type { Prepared, Profile, Step } from "./env.ts"
import { openSession } from "./env.ts"

/** A predicate over every step so far, on one executor whose budgets, approvals and idempotency persist between calls. */
export interface SequenceProperty {
  readonly name: string
  readonly holds: (history: ReadonlyArray<Step>) => boolean
}

interface Real {
  readonly send: (call: Call) => Promise<ReadonlyArray<Step>>
  readonly history: Array<Step>
}

class Broken {
  constructor(readonly property: string) {}
}

/** One command: send a call (with its approval and replay steps) and check every sequence property after it. */
class Send implements fc.AsyncCommand<object, Real> {
  constructor(readonly call: Call, readonly properties: ReadonlyArray<SequenceProperty>) {}
  check() {
    return true
  }
  async run(_model: object, real: Real) {
    real.history.push(...(await real.send(this.call)))
    const failed = this.properties.find((p) => !p.holds(real.history))
    if (failed !== undefined) throw new Broken(failed.name)
  }
  toString() {
    return source(this.call)
  }
}

const runSequence = async (prepared: Prepared, profile: Profile, commands: Iterable<fc.AsyncCommand<object, Real>>) => {
  const session = await openSession(prepared, profile)
  try {
    const real: Real = { history: [], send: session.send }
    await fc.asyncModelRun(() => ({ model: {}, real }), commands)
    return real.history
  } finally {
    await session.dispose()
  }
}

/** Check the sequence properties on each profile; fail with the shrunk sequence as a PropertyViolation. */
export const checkSequences = (
  prepared: Prepared,
  properties: ReadonlyArray<SequenceProperty>,
  options: {
    readonly seed: number
    readonly runs: number
    readonly arbitrary: fc.Arbitrary<Call>
    readonly profiles?: ReadonlyArray<Profile>
  }
) =>
  Effect.gen(function*() {
    for (const profile of options.profiles ?? ["minimal", "governed"]) {
      const commands = fc.commands([options.arbitrary.map((call) => new Send(call, properties))], { maxCommands: 8 })
      const details = yield* Effect.promise(() =>
        fc.check(
          fc.asyncProperty(commands, (sequence) => runSequence(prepared, profile, sequence).then(() => true)),
          { numRuns: Math.max(1, Math.ceil(options.runs / 4)), seed: options.seed }
        )
      )
      if (!details.failed || details.counterexample === null) continue
      // fast-check hands back its own wrappers of the commands that ran.
      const sequence = [...details.counterexample[0]].flatMap((ran) => {
        const send = ran instanceof Send ? ran : (ran as { readonly cmd?: unknown }).cmd
        return send instanceof Send ? [send.call] : []
      })
      const history = yield* Effect.promise(() =>
        runSequence(prepared, profile, sequence.map((call) => new Send(call, []))).catch(() => [])
      )
      const error = details.errorInstance
      const name = error instanceof Broken ? error.property : String(error)
      const last = history.at(-1)
      return yield* new PropertyViolation({
        property: name,
        profile,
        seed: options.seed,
        path: details.counterexamplePath ?? "",
        call: sequence,
        step: last?.call.step ?? "call",
        outcome: summary(last?.outcome),
        trail: [],
        regression: [
          `sequence property "${name}" does not hold on the ${profile} profile (seed ${options.seed})`,
          `after ${sequence.length} call(s), shrunk; the last came to ${summary(last?.outcome)}`,
          `  const calls: ReadonlyArray<Testing.Call> = ${source(sequence, "  ")}`
        ].join("\n")
      })
    }
  })
