/**
 * The demo: a scripted agent session run through the executor, one call for each way an action
 * can end. Runtime-agnostic; the CLI renders it.
 */
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import * as InProcessBackend from "../adapters/InProcessBackend.ts"
import * as Action from "../core/Action.ts"
import * as ActionExecutor from "../core/ActionExecutor.ts"
import * as ActionRegistry from "../core/ActionRegistry.ts"
import * as ExecutionContext from "../core/ExecutionContext.ts"
import type { ExecutionOutcome } from "../core/ExecutionOutcome.ts"
import { ExecutionRequest } from "../core/ExecutionRequest.ts"
import { EphemeralOperation } from "../core/ExecutionScope.ts"
import * as IdGenerator from "../core/IdGenerator.ts"
import { ActionRef, PrincipalRef } from "../core/Refs.ts"
import * as Time from "../core/Time.ts"

const notes: Record<string, string> = { todo: "ship the executor", ideas: "policy snapshots" }

/** The demo's tool set. */
export const actions: ReadonlyArray<Action.ActionDefinition> = [
  Action.make({
    name: "notes.read",
    description: "Read a note by id",
    input: Schema.Struct({ id: Schema.String }),
    output: Schema.NullOr(Schema.String),
    effects: ["memory.read"],
    handler: ({ id }) => notes[id] ?? null
  }),
  Action.make({
    name: "calc.add",
    aliases: ["add"],
    description: "Add two integers",
    input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
    output: Schema.Int,
    handler: ({ a, b }) => a + b
  }),
  Action.make({
    name: "weather.fetch",
    description: "Fetch the weather (its upstream is down, and its error holds a token)",
    input: Schema.Struct({ city: Schema.String }),
    output: Schema.String,
    effects: ["network.connect"],
    handler: async () => {
      throw new Error("upstream 503 (api_key=sk-demo-not-a-real-key)")
    }
  }),
  Action.make({
    name: "report.compile",
    description: "Compile a report: 100 ms a page",
    input: Schema.Struct({ pages: Schema.Int }),
    output: Schema.String,
    handler: ({ pages }) => Effect.as(Effect.sleep(pages * 100), `${pages} pages`)
  }),
  Action.make({
    name: "index.rebuild",
    description: "Rebuild the search index (slow)",
    input: Schema.Struct({}),
    output: Schema.Void,
    handler: () => Effect.sleep("10 seconds")
  }),
  Action.make({
    name: "files.write",
    description: "Write a file; requires filesystem containment",
    input: Schema.Struct({ path: Schema.String, text: Schema.String }),
    output: Schema.Void,
    effects: ["filesystem.write"],
    containment: ["filesystem"],
    handler: () => undefined
  })
]

/** One scripted step: what the agent asked for, and how. */
export interface Step {
  readonly action: string
  readonly arguments: Record<string, unknown>
  readonly note: string
  readonly deadlineMillis?: number
  readonly cancelAfterMillis?: number
}

/** The scripted session. */
export const script: ReadonlyArray<Step> = [
  { action: "notes.read", arguments: { id: "todo" }, note: "an allowed call" },
  { action: "add", arguments: { a: 2, b: 40 }, note: "an alias resolves to calc.add" },
  { action: "calc.add", arguments: { a: "two", b: 40 }, note: "schema-invalid arguments" },
  { action: "weather.fetch", arguments: { city: "Oslo" }, note: "a handler failure, redacted" },
  { action: "report.compile", arguments: { pages: 50 }, note: "a deadline of 200 ms", deadlineMillis: 200 },
  { action: "index.rebuild", arguments: {}, note: "cancelled by the agent after 100 ms", cancelAfterMillis: 100 },
  { action: "files.write", arguments: { path: "/etc/motd", text: "hi" }, note: "containment the backend cannot prove" },
  { action: "shell.exec", arguments: { command: "ls" }, note: "an action nobody registered" }
]

/** A step and the outcome the executor gave it. */
export interface Row {
  readonly step: Step
  readonly outcome: ExecutionOutcome
}

/** The demo's layers: registry with the demo actions, the in-process backend, a minimal executor. */
export const layer = Layer.provideMerge(
  ActionExecutor.layerMinimal(),
  Layer.merge(ActionRegistry.layerWith(actions), InProcessBackend.layer)
)

const principal = PrincipalRef.make({ id: "demo-user" })

/** Run one step as the demo agent, through the executor. */
export const runStep = (step: Step, index: number) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
    const context = yield* ExecutionContext.bind({
      execution_scope: scope,
      authenticated_principal: principal,
      effect_backend: InProcessBackend.make.ref
    })
    const now = yield* Time.nowMicros
    const request = ExecutionRequest.make({
      request_id: `demo-${index + 1}`,
      action: ActionRef.make({ name: step.action }),
      arguments: step.arguments,
      execution_scope: scope,
      principal_claim: principal,
      ...(step.deadlineMillis === undefined ? {} : { deadline: Time.fromMicros(now + step.deadlineMillis * 1000) })
    })
    if (step.cancelAfterMillis === undefined) return yield* executor.execute(request, { context })
    const cancel = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(executor.execute(request, { context, cancel }))
    yield* Effect.sleep(step.cancelAfterMillis)
    yield* Deferred.succeed(cancel, undefined)
    return yield* Fiber.join(fiber)
  })

/** Run the whole scripted session. */
export const session: Effect.Effect<
  ReadonlyArray<Row>,
  never,
  ActionExecutor.ActionExecutor | IdGenerator.IdGenerator
> = Effect.forEach(script, (step, index) => Effect.map(runStep(step, index), (outcome) => ({ step, outcome })))
