/**
 * The live status line of `writ harness run` on a terminal: one line on stderr with the run's elapsed time and what
 * its stream and writ's callback have shown, redrawn on each event and once a second, and left as the run's summary
 * when it ends. Nothing is drawn when stderr is not a terminal, so piped output stays JSON lines and decisions.
 */
import { Effect, Schedule } from "effect"
import type { Scope } from "effect"
import type { CallbackDecision, ToolCall } from "../../../../core/harness/HarnessPolicy.ts"
import type { ProviderObservation } from "../../../../core/harness/ProviderObservation.ts"

/** What a run has shown so far. */
export interface Tally {
  readonly tools: number
  readonly results: number
  readonly streamDenials: number
  readonly allowed: number
  readonly denied: number
}

/** A run that has shown nothing yet. */
export const empty: Tally = { tools: 0, results: 0, streamDenials: 0, allowed: 0, denied: 0 }

/** The tally after one observation of the provider's stream. */
export const observed = (tally: Tally, observation: ProviderObservation): Tally =>
  observation._tag === "tool_use"
    ? { ...tally, tools: tally.tools + 1 }
    : observation._tag === "tool_result"
    ? { ...tally, results: tally.results + 1 }
    : observation._tag === "denial"
    ? { ...tally, streamDenials: tally.streamDenials + 1 }
    : tally

/** The tally after one of writ's callback decisions. */
export const decided = (tally: Tally, decision: CallbackDecision): Tally =>
  decision.decision === "allow" ? { ...tally, allowed: tally.allowed + 1 } : { ...tally, denied: tally.denied + 1 }

/** The line for a tally, `elapsed` milliseconds into the run. */
export const render = (provider: string, tally: Tally, elapsed: number): string =>
  `writ: ${provider} ${Math.floor(elapsed / 1000)}s | ${tally.tools} tool call(s), ${tally.results} result(s), ` +
  `${tally.streamDenials} denial(s) in the stream | writ allowed ${tally.allowed}, denied ${tally.denied}`

const CLEAR = "\r\u001b[K"

/** How the CLI's run reports as it goes: observations printed, decisions counted, the line kept on the terminal. */
export interface StatusLine {
  readonly print: (observation: ProviderObservation, line: string) => Effect.Effect<void>
  readonly decide: (
    decide: (call: ToolCall) => Effect.Effect<CallbackDecision>
  ) => (call: ToolCall) => Effect.Effect<CallbackDecision>
  /** Redraw the line once a second until the scope closes, then leave it, ended, as the run's summary. */
  readonly live: Effect.Effect<void, never, Scope.Scope>
}

/** A status line for `provider` on this process's stderr, drawn only when stderr is a terminal. */
export const make = (provider: string): Effect.Effect<StatusLine> =>
  Effect.sync(() => {
    const terminal = process.stderr.isTTY === true
    const started = Date.now()
    let tally = empty
    const draw = () => {
      if (terminal) process.stderr.write(`${CLEAR}${render(provider, tally, Date.now() - started)}`)
    }
    return {
      print: (observation, line) =>
        Effect.sync(() => {
          tally = observed(tally, observation)
          if (terminal) process.stderr.write(CLEAR)
          process.stdout.write(`${line}\n`)
          draw()
        }),
      decide: (decide) => (call) =>
        Effect.tap(decide(call), (decision) =>
          Effect.sync(() => {
            tally = decided(tally, decision)
            draw()
          })),
      live: terminal
        ? Effect.gen(function*() {
          // Added first, so run last: the ticker is stopped before the line is left as the summary.
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              draw()
              process.stderr.write("\n")
            })
          )
          yield* Effect.forkScoped(Effect.repeat(Effect.sync(draw), Schedule.spaced("1 second")))
        })
        : Effect.void
    }
  })
