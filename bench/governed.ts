/**
 * The `governed` benchmark: CPU per governed execute on in-memory stores against a hand-written floor that does the
 * same essential work in plain TypeScript: one policy decision, the arguments' and the request's canonical digests
 * (the operation's start names both), the four records
 * of one operation built, hashed and linked so that writ's own verifier accepts the chain, both hashes of each record
 * recomputed and its id and chain hash checked unused on admission as a store must (spec/evidence.md), the handler, and
 * the outcome value, in the same span.
 */
import { Chunk, Effect, Either, Layer, ManagedRuntime, Schema, Stream } from "effect"
import { hash, randomUUID } from "node:crypto"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as MemoryEvidenceStore from "../adapters/memory/MemoryEvidenceStore.ts"
import * as MemoryExecutorRegistry from "../adapters/memory/MemoryExecutorRegistry.ts"
import * as MemoryPolicySnapshotStore from "../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import * as Canonical from "../core/base/Canonical.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import { ActionRef, PrincipalRef } from "../core/base/Refs.ts"
import type { PolicySnapshotRef } from "../core/base/Refs.ts"
import * as Time from "../core/base/Time.ts"
import * as Evidence from "../core/evidence/Evidence.ts"
import { EvidenceStore } from "../core/evidence/EvidenceStore.ts"
import * as Governance from "../core/evidence/Governance.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import { Succeeded } from "../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../core/execution/ExecutionScope.ts"
import * as Governed from "../core/execution/Governed.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import * as PermissionPolicy from "../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../core/policy/PolicySnapshotStore.ts"
import { addAction, declaration } from "./internal/governedFixture.ts"
import type { Benchmark } from "./internal/measure.ts"
import { compareCpu, loop } from "./internal/measure.ts"

const ITERATIONS = 2_000
const ROUNDS = 7
const WARMUP = 2
const TARGET = 2

const Sum = Schema.Struct({ a: Schema.Int, b: Schema.Int })

const layer = Governed.layer().pipe(
  Layer.provideMerge(Layer.merge(ActionRegistry.layerWith([addAction]), InProcessBackend.layer)),
  Layer.provideMerge(Governance.layerWriter),
  Layer.provideMerge(
    Layer.mergeAll(MemoryEvidenceStore.layer, MemoryPolicySnapshotStore.layer, MemoryExecutorRegistry.layer)
  ),
  Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto))
)

const install = Effect.gen(function*() {
  const store = yield* PolicySnapshotStore
  const snapshot = yield* Effect.orDie(PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(declaration))))
  yield* store.put(snapshot)
  yield* store.activate("bench", "1", "bench", Time.fromMicros(0))
  return { policy_id: "bench", version: "1", digest: snapshot.digest } satisfies PolicySnapshotRef
})

const sha256 = (text: string) => hash("sha256", text, "hex")
const decodeSum = Schema.decodeUnknownEither(Sum, { onExcessProperty: "error" })
const encodeSum = Schema.encodeUnknownEither(Sum)
const encodeResult = Schema.encodeUnknownEither(Schema.Int)
const encodeRequest = Schema.encodeEither(ExecutionRequest)

type Payload = Record<string, unknown>

/** The floor's chain as a store holds it, with the record ids and chain hashes a store refuses to take twice. */
interface FloorChain {
  readonly chain_id: string
  readonly records: Array<Evidence.StoredRecord>
  readonly ids: Set<string>
  readonly hashes: Set<string>
}

/** One record sealed at the chain's head, then admitted as a store admits it: both hashes recomputed and compared. */
const appendFloor = (chain: FloorChain, record_type: Evidence.RecordType, operation_id: string, payload: Payload) => {
  const previous = chain.records[chain.records.length - 1]
  const payload_json = Either.getOrThrow(Canonical.stringify(payload))
  const unsealed = {
    record_id: randomUUID(),
    record_type,
    chain_id: chain.chain_id,
    operation_id,
    sequence: previous === undefined ? 0 : previous.sequence + 1,
    policy_id: "bench",
    policy_version: "1",
    payload_json,
    payload_digest: sha256(payload_json),
    previous_chain_hash: previous?.chain_hash ?? null,
    supersedes_record_id: null,
    created_at: Time.fromMicros(Date.now() * 1000),
    hash_algorithm: Evidence.hashAlgorithm
  }
  // Extended with Object.assign, not a spread: Node 20 adds a key to a spread-born object through a new map.
  const record: Evidence.StoredRecord = Object.assign(unsealed, { chain_hash: sha256(Evidence.chainInput(unsealed)!) })
  const chain_hash = record.chain_hash
  // Admission: the store recomputes both hashes, checks the link and refuses a duplicate before it keeps the record.
  if (
    sha256(record.payload_json) !== record.payload_digest || sha256(Evidence.chainInput(record)!) !== chain_hash ||
    record.previous_chain_hash !== (previous?.chain_hash ?? null) || chain.ids.has(record.record_id) ||
    chain.hashes.has(chain_hash)
  ) throw new Error("governed bench: the floor's record does not admit")
  chain.records.push(record)
  chain.ids.add(record.record_id)
  chain.hashes.add(chain_hash)
}

// writ's execute span's options: no stack trace taken.
const executeSpan = { captureStackTrace: false } as const

/** The hand-written governed execute. */
const floorExecute = (chain: FloorChain, request: ExecutionRequest, templates: ReadonlyArray<Payload>) =>
  Effect.withSpan(
    Effect.sync(() => {
      const allowed = request.action.name.startsWith("bench.") && request.action.name !== "bench.purge"
      const input = Either.getOrThrow(decodeSum(request.arguments))
      const arguments_digest = sha256(Either.getOrThrow(Canonical.stringify(Either.getOrThrow(encodeSum(input)))))
      const request_digest = sha256(Either.getOrThrow(Canonical.stringify(Either.getOrThrow(encodeRequest(request)))))
      const operation_id = randomUUID()
      const attempt_id = IdGenerator.Uuid.make(randomUUID())
      const [bound, started, gate, completed] = templates
      appendFloor(chain, "policy_bound", operation_id, bound!)
      appendFloor(
        chain,
        "operation_started",
        operation_id,
        Object.assign({}, started, { attempt_id, arguments_digest, request_digest })
      )
      appendFloor(
        chain,
        "gate_evaluated",
        operation_id,
        Object.assign({}, gate, {
          result_id: randomUUID(),
          decision: allowed ? "allow" : "deny",
          operation_id,
          arguments_digest,
          evaluated_at: Time.fromMicros(Date.now() * 1000)
        })
      )
      const result = Either.getOrThrow(encodeResult(input.a + input.b))
      const result_digest = sha256(Either.getOrThrow(Canonical.stringify(result)))
      appendFloor(
        chain,
        "callable_completed",
        operation_id,
        Object.assign({}, completed, { attempt_id, arguments_digest, result_digest })
      )
      return Succeeded.make({
        request_id: request.request_id,
        attempt_id,
        action: request.action,
        profile: "governed",
        stage: "outcome",
        decisions: [],
        result
      }, { disableValidation: true })
    }),
    "ActionExecutor.execute",
    executeSpan
  )

const run = async (): Promise<void> => {
  const runtime = ManagedRuntime.make(layer)
  try {
    const ref = await runtime.runPromise(install)
    const executor = await runtime.runPromise(ActionExecutor.ActionExecutor)
    const boundary = await runtime.runPromise(Governance.openBoundary(ref))
    const scope = EphemeralOperation.make({ scope_id: IdGenerator.Uuid.make(randomUUID()) })
    const context = await runtime.runPromise(Ingress.bind({
      execution_scope: scope,
      authenticated_principal: PrincipalRef.make({ id: "bench" }),
      effect_backend: InProcessBackend.make.ref,
      policy_snapshot: ref
    }))
    const request = ExecutionRequest.make({
      request_id: "req-bench-governed",
      action: ActionRef.make({ name: "bench.add" }),
      arguments: { a: 1, b: 2 },
      execution_scope: scope
    })
    const execute = () => executor.execute(request, { context, boundary })
    const first = await runtime.runPromise(execute())
    if (first._tag !== "succeeded" || first.result !== 3) throw new Error(`governed bench: got ${first._tag}`)
    const written = await runtime.runPromise(
      Effect.flatMap(EvidenceStore, (store) => Stream.runCollect(store.read(boundary.chain_id)))
    )
    const records = Chunk.toReadonlyArray(written) as ReadonlyArray<Evidence.StoredRecord>
    const types = records.map((record) => record.record_type).join(",")
    if (types !== "policy_bound,operation_started,gate_evaluated,callable_completed") {
      throw new Error(`governed bench: writ's operation is ${types}, not the floor's four records`)
    }
    const templates = records.map((record) => JSON.parse(record.payload_json) as Payload)
    const chain: FloorChain = { chain_id: randomUUID(), records: [], ids: new Set(), hashes: new Set() }

    const measured = (op: () => Effect.Effect<unknown, unknown>) => (n: number) => runtime.runPromise(loop(op, n))
    const result = await compareCpu(
      measured(() => floorExecute(chain, request, templates)),
      measured(execute),
      { iterations: ITERATIONS, rounds: ROUNDS, warmup: WARMUP }
    )
    const verified = await runtime.runPromise(
      Evidence.verify(chain.chain_id, Stream.fromIterable(chain.records)).pipe(Effect.provide(NodeDigest.layer))
    )
    if (!verified.valid || verified.checked_records !== chain.records.length) {
      throw new Error(`governed bench: writ's verifier refused the floor's chain (${verified.failure_code})`)
    }
    console.log(`governed: ${ROUNDS} alternating rounds of ${ITERATIONS} actions per side, median CPU per action`)
    console.log(`  hand-written governed floor (4 records, 1 decision, same span):  ${result.baseline.toFixed(1)} µs`)
    console.log(`  Governed ActionExecutor.execute on in-memory stores:             ${result.subject.toFixed(1)} µs`)
    console.log(
      `  per round (floor / execute µs): ${
        result.perRound.map((r) => `${r.baseline.toFixed(0)}/${r.subject.toFixed(0)}`).join(" ")
      }`
    )
    console.log(`  the floor's chain: ${verified.checked_records} records, accepted by writ's verifier`)
    console.log(`governed-floor: ${result.ratio.toFixed(2)}x (target <= ${TARGET}x)`)
  } finally {
    await runtime.dispose()
  }
}

/** Governed execute on memory stores against its hand-written floor, CPU per action. */
export const benchmark: Benchmark = { name: "governed", run }
