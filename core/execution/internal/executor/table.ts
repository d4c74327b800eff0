/**
 * The mechanics of a stage table: typed steps over one per-call state, composed into one function per action.
 * It orders nothing itself: `run.ts` is the only module that lists stages.
 */
import { Effect } from "effect"
import type { ExecutionOutcome } from "../../ExecutionOutcome.ts"
import type { Stage } from "../../Stage.ts"
import type { Call } from "./call.ts"
import type { ExecutionError } from "./env.ts"

/** What every per-call state holds: the call's identity and progress. Stage fields are added to it by the steps. */
export interface State {
  readonly call: Call
  readonly _tag?: never
}

/** A step's answer: the fields it adds to the state (nothing, as `void`), or the outcome that concludes the call. */
export type Answer<Adds> = Adds | ExecutionOutcome

/** A synchronous step: it decodes, digests or decides, and costs no Effect operation. */
export interface SyncStep<In, Adds> {
  readonly _tag: "Sync"
  readonly stage: Stage
  readonly detail: string
  readonly run: (state: In) => Answer<Adds>
}

/**
 * A step that decides synchronously when it can (no Effect operation) and otherwise answers the Effect that decides:
 * the security stages, whose evaluators are plain decisions unless one needs I/O.
 */
export interface DecideStep<In, Adds> {
  readonly _tag: "Decide"
  readonly stage: Stage
  readonly detail: string
  readonly run: (state: In) => Answer<Adds> | Effect.Effect<Answer<Adds>, ExecutionError>
}

/** A step that does I/O or runs user code; `skip` is asked synchronously first, per call. */
export interface EffectStep<In, Adds> {
  readonly _tag: "Effect"
  readonly stage: Stage
  readonly detail: string
  readonly skip?: (state: In) => boolean
  readonly run: (state: In) => Effect.Effect<Answer<Adds>, ExecutionError>
}

/**
 * A bracket: it opens at `stage` (when set), runs the rest of its table through `inner` and closes the call, at
 * `closes` when that is set (a lease released, an operation's terminal record, a Run's commit).
 */
export interface AroundStep<In, Adds> {
  readonly _tag: "Around"
  readonly stage?: Stage
  readonly closes?: Stage
  readonly detail: string
  readonly skip?: (state: In) => boolean
  readonly run: <S extends In>(
    state: S,
    inner: (state: S & Adds) => Effect.Effect<ExecutionOutcome, ExecutionError>
  ) => Effect.Effect<ExecutionOutcome, ExecutionError>
}

/** A group of steps run under one wrapper (the deadline and cancellation of stages 5-11), then the table goes on. */
export interface WithinStep {
  readonly _tag: "Within"
  readonly detail: string
  readonly run: <A>(
    call: Call,
    steps: Effect.Effect<A | ExecutionOutcome, ExecutionError>
  ) => Effect.Effect<A | ExecutionOutcome, ExecutionError>
}

/** After a bracket closed: a step over the concluded call (stage 14's projection), entered only by a full conclusion. */
export interface AfterStep {
  readonly _tag: "After"
  readonly stage: Stage
  readonly detail: string
  readonly run: (call: Call, outcome: ExecutionOutcome) => Effect.Effect<ExecutionOutcome, ExecutionError>
}

/** One entry of a table as the runner and the plan see it. */
export type Entry =
  | SyncStep<any, any>
  | DecideStep<any, any>
  | EffectStep<any, any>
  | { readonly step: AroundStep<any, any>; readonly inner: ReadonlyArray<Entry> }
  | { readonly step: WithinStep; readonly inner: ReadonlyArray<Entry> }
  | AfterStep

type Added<A> = A extends void ? unknown : A

/** A table being built over states that now hold `Cur`. */
export class Steps<Cur> {
  declare readonly _Cur: (state: Cur) => void
  constructor(readonly entries: ReadonlyArray<Entry>) {}

  /** Append a synchronous step. */
  sync<Adds>(step: SyncStep<Cur, Adds>): Steps<Cur & Added<Adds>> {
    return new Steps([...this.entries, step])
  }

  /** Append an effectful step. */
  effect<Adds>(step: EffectStep<Cur, Adds>): Steps<Cur & Added<Adds>> {
    return new Steps([...this.entries, step])
  }

  /** Append a step of any kind. */
  step<Adds>(step: SyncStep<Cur, Adds> | DecideStep<Cur, Adds> | EffectStep<Cur, Adds>): Steps<Cur & Added<Adds>> {
    return new Steps([...this.entries, step])
  }

  /** Append a step whose fields the rest does not need, only when `present` (decided when the action is compiled). */
  when(present: boolean, step: () => SyncStep<Cur, void> | DecideStep<Cur, void> | EffectStep<Cur, void>): Steps<Cur> {
    return present ? new Steps([...this.entries, step()]) : this
  }

  /** Append the step made from `value`, only when the executor was built with one. */
  whenSome<T>(value: T | undefined, step: (value: T) => SyncStep<Cur, void> | EffectStep<Cur, void>): Steps<Cur> {
    return value === undefined ? this : new Steps([...this.entries, step(value)])
  }

  /** Run the steps `build` appends under `within`, then go on. */
  within(step: WithinStep, build: (steps: Steps<Cur>) => { readonly entries: ReadonlyArray<Entry> }): Steps<Cur> {
    return new Steps([...this.entries, { step, inner: build(new Steps([])).entries }])
  }

  /** Close the table with a bracket around the rest of it, which `build` appends and concludes. */
  around<Adds>(step: AroundStep<Cur, Adds>, build: (steps: Steps<Cur & Added<Adds>>) => Table): Table {
    return new Table([...this.entries, { step, inner: build(new Steps([])).entries }])
  }

  /** `around` when `present`; otherwise the rest follows directly. */
  aroundIf(present: boolean, step: () => AroundStep<Cur, unknown>, build: (steps: Steps<Cur>) => Table): Table {
    return present ? this.around(step(), build) : new Table([...this.entries, ...build(new Steps([])).entries])
  }

  /** Close the table with its concluding step, which always answers an outcome. */
  conclude(step: SyncStep<Cur, never> | EffectStep<Cur, never>): Table {
    return new Table([...this.entries, step])
  }
}

/** A table that concludes every call: what the runner compiles. */
export class Table {
  constructor(readonly entries: ReadonlyArray<Entry>) {}

  /** Append the step made from `value` after the bracket that concluded the call, when the executor has one. */
  afterSome<T>(value: T | undefined, step: (value: T) => AfterStep): Table {
    return value === undefined ? this : new Table([...this.entries, step(value)])
  }
}

/** An empty table over states of type `In`. */
export const steps = <In>(): Steps<In> => new Steps([])

/** Whether a step answered an outcome rather than fields. */
export const isOutcome = (answer: unknown): answer is ExecutionOutcome =>
  answer !== undefined && typeof (answer as { readonly _tag?: unknown })._tag === "string"

/** Every stage a table's entries enter, with each entry's detail, in the order they run. */
export const flatten = (
  entries: ReadonlyArray<Entry>
): ReadonlyArray<{ readonly stage: Stage; readonly detail: string }> =>
  entries.flatMap((entry) => {
    if (!("step" in entry)) return [{ stage: entry.stage, detail: entry.detail }]
    const inner = flatten(entry.inner)
    if (entry.step._tag === "Within") return inner
    const { stage, closes, detail } = entry.step
    return [
      ...(stage === undefined ? [] : [{ stage, detail }]),
      ...inner,
      ...(closes === undefined ? [] : [{ stage: closes, detail }])
    ]
  })

type Continue = (state: any) => Effect.Effect<any, ExecutionError>

const done: Continue = (state) => Effect.succeed(state)

/**
 * Compile entries into one function. Consecutive synchronous and deciding steps are fused into one plain loop, left
 * for an Effect only where a deciding step answers one; an effectful step is one `flatMap`; a bracket calls the
 * compiled rest of its table, then the steps after it. `next` receives the state when the entries are exhausted
 * without concluding (the steps inside a `within`).
 */
export const compile = (entries: ReadonlyArray<Entry>, next: Continue = done): Continue => {
  let end = entries.length
  while (end > 0 && isAfter(entries[end - 1]!)) end--
  let run = next
  for (let i = end - 1; i >= 0;) {
    const entry = entries[i]!
    if (isInline(entry)) {
      let first = i
      while (first > 0 && isInline(entries[first - 1]!)) first--
      run = fused(entries.slice(first, i + 1) as ReadonlyArray<Inline>, run)
      i = first - 1
      continue
    }
    run = compileOne(entry, run)
    i--
  }
  const afters = entries.slice(end) as ReadonlyArray<AfterStep>
  if (afters.length === 0) return run
  const body = run
  return (state: State) =>
    afters.reduce(
      (concluded, after) =>
        Effect.flatMap(concluded, (outcome: ExecutionOutcome) => {
          if (outcome.stage === "outcome") state.call.enter(after.stage)
          return after.run(state.call, outcome)
        }),
      body(state)
    )
}

type Inline = SyncStep<any, any> | DecideStep<any, any>

const isInline = (entry: Entry): entry is Inline =>
  "_tag" in entry && (entry._tag === "Sync" || entry._tag === "Decide")

const isAfter = (entry: Entry): boolean => "_tag" in entry && entry._tag === "After"

// Run `group` from step `i` in one loop; a deciding step that answers an Effect resumes the loop after it.
const fusedFrom = (
  group: ReadonlyArray<Inline>,
  i: number,
  state: State,
  next: Continue
): Effect.Effect<any, ExecutionError> => {
  for (; i < group.length; i++) {
    const step = group[i]!
    state.call.enter(step.stage)
    const answer = step.run(state)
    if (answer === undefined) continue
    if (Effect.isEffect(answer)) {
      const rest = i + 1
      return Effect.flatMap(
        answer as Effect.Effect<unknown, ExecutionError>,
        (decided): Effect.Effect<any, ExecutionError> => {
          if (decided === undefined) return fusedFrom(group, rest, state, next)
          if (isOutcome(decided)) return Effect.succeed(decided)
          return fusedFrom(group, rest, Object.assign(state, decided), next)
        }
      )
    }
    if (isOutcome(answer)) return Effect.succeed(answer)
    Object.assign(state, answer)
  }
  return next(state)
}

const fused = (group: ReadonlyArray<Inline>, next: Continue): Continue => (state: State) =>
  fusedFrom(group, 0, state, next)

const compileOne = (entry: Entry, next: Continue): Continue => {
  if (!("step" in entry)) {
    if (entry._tag !== "Effect") throw new Error(`a ${entry._tag} step is not run here`)
    const step = entry
    return (state: State) => {
      state.call.enter(step.stage)
      if (step.skip?.(state) === true) return next(state)
      return Effect.flatMap(step.run(state), (answer) => {
        if (answer === undefined) return next(state)
        if (isOutcome(answer)) return Effect.succeed(answer)
        return next(Object.assign(state, answer))
      })
    }
  }
  const inner = compile(entry.inner)
  if (entry.step._tag === "Within") {
    const step = entry.step
    return (state: State) =>
      Effect.flatMap(
        step.run(state.call, inner(state)),
        (answer) => isOutcome(answer) ? Effect.succeed(answer) : next(answer)
      )
  }
  const step = entry.step
  return (state: State) => {
    if (step.stage !== undefined) state.call.enter(step.stage)
    return step.skip?.(state) === true ? inner(state) : step.run(state, inner)
  }
}
