/**
 * The `executor` benchmark: minimal-profile ActionExecutor.execute against a hand-written minimal
 * execute doing the same essential work in the same span, beside the bare Effect floor of fourteen
 * stages and the span's own cost; then the heap after 100k and after 1M executions.
 */
import { Effect, Either, Layer, ManagedRuntime, Schema } from "effect"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import * as Action from "../core/action/Action.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import * as Canonical from "../core/base/Canonical.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import { ActionRef, PrincipalRef } from "../core/base/Refs.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import { Succeeded } from "../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../core/execution/ExecutionScope.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import * as Interceptor from "../core/execution/Interceptor.ts"
import type { Benchmark } from "./internal/measure.ts"
import { collect, compare, loop, mb } from "./internal/measure.ts"

const STAGES = 14
const ITERATIONS = 10_000
const ROUNDS = 7
const WARMUP = 2
const HEAP_FIRST = 100_000
const HEAP_TOTAL = 1_000_000
const HEAP_CHUNK = 100_000

interface Sum {
  readonly a: number
  readonly b: number
}

/** The one handler both sides end in. */
const add = (input: Sum): number => input.a + input.b

const addAction = Action.make({
  name: "add",
  input: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  output: Schema.Int,
  handler: add
})

const services = ActionRegistry.layerWith([addAction]).pipe(
  Layer.provideMerge(Layer.mergeAll(NodeDigest.layer, IdGenerator.layerCrypto)),
  Layer.merge(InProcessBackend.layer)
)

const layer = ActionExecutor.layerMinimal().pipe(Layer.provideMerge(services))

/** The same executor with one allowing policy interceptor: its calls are bound to their arguments' digest. */
const evaluated = Effect.provide(
  ActionExecutor.make({ interceptors: [Interceptor.make("allow", "policy", () => Interceptor.allow())] }),
  services
)

const stage = (state: Sum): Effect.Effect<Sum> => Effect.succeed(state)

/** The bare Effect floor: fourteen no-op stages chained with flatMap, then the plain handler. */
const bare = (input: Sum): Effect.Effect<number> => {
  let pipeline = Effect.succeed(input)
  for (let i = 0; i < STAGES; i++) pipeline = Effect.flatMap(pipeline, stage)
  return Effect.map(pipeline, add)
}

// writ's execute span's options: no stack trace taken.
const executeSpan = { captureStackTrace: false } as const

const SumSchema = Schema.Struct({ a: Schema.Int, b: Schema.Int })
const decodeSum = Schema.decodeUnknownEither(SumSchema, { onExcessProperty: "error" })
const encodeSum = Schema.encodeUnknownEither(SumSchema)
const encodeResult = Schema.encodeUnknownEither(Schema.Int)

/**
 * The hand-written floor of a minimal execute, in plain TypeScript: Schema decode of the arguments, their canonical
 * digest, the handler, Schema encode of the result, an id, and the outcome value, inside the same span.
 */
const handWritten = (request: ExecutionRequest, ids: IdGenerator.IdGenerator.Service) =>
  Effect.withSpan(
    Effect.map(ids.uuid, (attempt_id) => {
      const input = Either.getOrThrow(decodeSum(request.arguments))
      const text = Either.getOrThrow(Canonical.stringify(Either.getOrThrow(encodeSum(input))))
      const arguments_digest = NodeDigest.make.sha256TextSync!(text)
      const result = Either.getOrThrow(encodeResult(add(input)))
      return Succeeded.make({
        request_id: request.request_id,
        attempt_id,
        action: request.action,
        profile: "minimal",
        stage: arguments_digest.length === 64 ? "outcome" : "invoke",
        decisions: [],
        result
      }, { disableValidation: true })
    }),
    "ActionExecutor.execute",
    executeSpan
  )

/** The request and trusted context, built once and reused by every call. */
const call = Effect.gen(function*() {
  const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
  const request = ExecutionRequest.make({
    request_id: "req-bench-add",
    action: ActionRef.make({ name: "add" }),
    arguments: { a: 1, b: 2 },
    execution_scope: scope
  })
  const context = yield* Ingress.bind({
    execution_scope: scope,
    authenticated_principal: PrincipalRef.make({ id: "bench" }),
    effect_backend: InProcessBackend.make.ref
  })
  return { request, options: { context } }
})

const run = async (): Promise<void> => {
  const runtime = ManagedRuntime.make(layer)
  try {
    const executor = await runtime.runPromise(ActionExecutor.ActionExecutor)
    const ids = await runtime.runPromise(IdGenerator.IdGenerator)
    const { options, request } = await runtime.runPromise(call)
    const outcome = await runtime.runPromise(executor.execute(request, options))
    const floor = await runtime.runPromise(handWritten(request, ids))
    for (const concluded of [outcome, floor]) {
      if (concluded._tag !== "succeeded" || concluded.result !== 3) {
        throw new Error(`executor bench: expected a succeeded outcome with result 3, got ${concluded._tag}`)
      }
    }
    const input: Sum = { a: 1, b: 2 }
    const execute = () => executor.execute(request, options)
    const withInterceptor = await runtime.runPromise(evaluated)
    const executeEvaluated = () => withInterceptor.execute(request, options)
    const options_ = { iterations: ITERATIONS, rounds: ROUNDS, warmup: WARMUP }
    const measured = (op: () => Effect.Effect<unknown, unknown>) => (n: number) => runtime.runPromise(loop(op, n))

    const result = await compare(measured(() => handWritten(request, ids)), measured(execute), options_)
    const evaluatedResult = await compare(
      measured(() => handWritten(request, ids)),
      measured(executeEvaluated),
      options_
    )
    const spanned = () => Effect.withSpan(bare(input), "ActionExecutor.execute", executeSpan)
    const bareResult = await compare(measured(spanned), measured(execute), options_)
    const span = await compare(measured(() => bare(input)), measured(spanned), options_)
    console.log(`executor: ${ROUNDS} alternating rounds of ${ITERATIONS} ops per side, median per op`)
    console.log(
      `  hand-written minimal execute (decode, digest, handler, encode, id, outcome, span): ${
        result.baseline.toFixed(3)
      } µs/op`
    )
    console.log(
      `  ActionExecutor.execute (minimal profile):                                        ${
        result.subject.toFixed(3)
      } µs/op`
    )
    console.log(
      `  per round (floor / execute µs): ${
        result.perRound.map((r) => `${r.baseline.toFixed(2)}/${r.subject.toFixed(2)}`).join(" ")
      }`
    )
    console.log(
      `  ActionExecutor.execute with one allowing interceptor (digest-bound): ${
        evaluatedResult.subject.toFixed(3)
      } µs/op`
    )
    console.log(
      `  bare Effect floor (${STAGES} flatMap stages + handler, same span): ${bareResult.baseline.toFixed(3)} µs/op`
    )
    console.log(`  the span alone: ${(span.subject - span.baseline).toFixed(3)} µs/op (no tracer configured)`)

    if (globalThis.gc === undefined) throw new Error("executor bench: run node with --expose-gc")
    const started = performance.now()
    await runtime.runPromise(loop(execute, HEAP_FIRST))
    collect()
    const first = process.memoryUsage().heapUsed
    for (let done = HEAP_FIRST; done < HEAP_TOTAL; done += HEAP_CHUNK) {
      await runtime.runPromise(loop(execute, Math.min(HEAP_CHUNK, HEAP_TOTAL - done)))
    }
    collect()
    const last = process.memoryUsage().heapUsed
    const seconds = (performance.now() - started) / 1000
    const growth = ((last - first) / first) * 100
    console.log(`  heap after ${HEAP_FIRST} executions: ${mb(first)} MB (after GC)`)
    console.log(`  heap after ${HEAP_TOTAL} executions: ${mb(last)} MB (after GC; ${seconds.toFixed(1)} s for all)`)
    console.log(`executor: ${result.ratio.toFixed(2)}x (target <= 2x)`)
    console.log(`executor-evaluated: ${evaluatedResult.ratio.toFixed(2)}x (one interceptor, for information)`)
    console.log(`executor-bare-floor: ${bareResult.ratio.toFixed(2)}x (for information)`)
    console.log(`executor-heap-growth: ${growth.toFixed(1)}% (target <= 10%)`)
  } finally {
    await runtime.dispose()
  }
}

/** Minimal-profile execute vs its hand-written floor and the bare Effect floor, and heap growth over 1M executions. */
export const benchmark: Benchmark = { name: "executor", run }
