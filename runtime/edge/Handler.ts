/**
 * writ's edge handler: a standard `fetch(Request) -> Promise<Response>` that runs actions through its own executor
 * under writ's policy, in-process on the platform whose containment the operator claims (EdgePlatformBackend), for
 * `deno serve`, a Node HTTP server or an edge platform. Web standard APIs only (WebCrypto, fetch types): no Node
 * module. It serves three signed routes (adapters/web/EdgeSignature.ts): `POST /v1/execute`,
 * `GET /v1/executions/{idempotency_key}` (what it did under that key: reconciliation) and `GET /v1/capabilities` (the
 * platform's containment claims). A request that is unsigned, expired, replayed or mis-signed is refused (401, a typed
 * `EdgeRequestRefused`) before its body is parsed, any policy is read or any action runs.
 */
import { Effect, Either, Layer, ManagedRuntime, Schema } from "effect"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryNonceStore from "../../adapters/memory/MemoryNonceStore.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as ExecutionLog from "../../adapters/web/EdgeExecutionLog.ts"
import * as EdgePlatformBackend from "../../adapters/web/EdgePlatformBackend.ts"
import * as EdgeSignature from "../../adapters/web/EdgeSignature.ts"
import * as Wire from "../../adapters/web/EdgeWire.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import type { NonceStore } from "../../core/base/NonceStore.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as StrictJson from "../../core/base/StrictJson.ts"
import * as Time from "../../core/base/Time.ts"
import * as ActionExecutor from "../../core/execution/ActionExecutor.ts"
import { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import { ContainmentOptIns } from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"

/** A caller's key: its id, its secret (at least 32 bytes) and the principal its requests run for. */
export interface CallerKey extends EdgeSignature.Key {
  readonly principal: string
}

/** How a handler is built. */
export interface Options extends EdgeSignature.Bounds {
  /** The actions it serves. */
  readonly actions: ReadonlyArray<ActionDefinition>
  /** The policy every call runs under (compiled, stored and activated once, at the first request). */
  readonly policy: PermissionPolicy.PermissionPolicyEncoded
  /** The callers' keys. */
  readonly keys: ReadonlyArray<CallerKey>
  /** The nonce store its workers share (default: a fresh in-memory one). */
  readonly nonces?: NonceStore.Service
  /** The execution log its workers share (default: a fresh in-memory one). */
  readonly log?: ExecutionLog.ExecutionLog
  /**
   * The platform's containment claims, as the operator declares them (default: none): the handler's own backend
   * reports them `remote` and `claimed`, and its executor admits a required kind they cover only where `policy` opts
   * in with `containment.remote_claims`.
   */
  readonly claims?: ReadonlyArray<typeof Wire.PlatformClaim.Type>
  /** What the claims rest on, in words (the platform, its isolation). */
  readonly platform?: string
  /** The largest request body read, in bytes (default 1 MiB). */
  readonly maxBodyBytes?: number
  /** The executor's configuration. */
  readonly config?: ActionExecutor.Config
}

/** A fetch handler and its release. */
export interface EdgeHandler {
  readonly fetch: (request: Request) => Promise<Response>
  readonly dispose: () => Promise<void>
}

/** The handler's own version, reported with its capabilities. */
export const version = "1"

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } })

const invalid = (reason: typeof Wire.InvalidReason.Type, detail: string) =>
  json(Wire.statusOf[reason], { _tag: "EdgeRequestInvalid", reason, detail })

const runtimeName = () => {
  const host = globalThis as { Deno?: { version?: { deno?: string } }; process?: { versions?: { node?: string } } }
  if (typeof host.Deno?.version?.deno === "string") return `deno ${host.Deno.version.deno}`
  if (typeof host.process?.versions?.node === "string") return `node ${host.process.versions.node}`
  return "unknown"
}

const encodeOutcome = Schema.encodeSync(ExecutionOutcome)
// A field the wire does not define (a caller's claimed preflight or containment) refuses the body: nothing is ignored.
const decodeRequest = Schema.decodeUnknownEither(Wire.ExecuteRequest, { onExcessProperty: "error" })
const decoder = new TextDecoder("utf-8", { fatal: true })

// The body's bytes, read no further than the limit (a Content-Length over it is refused unread).
const readBody = async (request: Request, limit: number): Promise<Uint8Array | undefined> => {
  if (Number(request.headers.get("content-length") ?? "0") > limit) return undefined
  if (request.body === null) return new Uint8Array()
  const reader = request.body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.length
    if (size > limit) {
      await reader.cancel()
      return undefined
    }
    chunks.push(value)
  }
  const bytes = new Uint8Array(size)
  let offset = 0
  for (const chunk of chunks) {
    bytes.set(chunk, offset)
    offset += chunk.length
  }
  return bytes
}

// GET /v1/capabilities: the protocol, this handler's version and runtime, and the platform's claims as declared.
const capabilities = (options: Options) =>
  json(200, {
    protocol: "writ-edge-v1",
    handler_version: version,
    runtime: runtimeName(),
    claims: options.claims ?? [],
    detail: options.platform ?? "the operator declared no platform containment"
  })

/** The policy a handler pins, once installed, or why it could not be. */
type Pinned = Either.Either<PolicySnapshotRef, unknown>

// POST /v1/execute: decode, check the action, begin the key, run it through the executor, record the outcome.
const executeWith =
  (log: ExecutionLog.ExecutionLog, policy: () => Promise<Pinned>) =>
  (principal: string, body: Uint8Array, digest: string) =>
    Effect.gen(function*() {
      let text: string
      try {
        text = decoder.decode(body)
      } catch {
        return invalid("body_invalid", "the body is not UTF-8")
      }
      const parsed = StrictJson.parse(text)
      if (Either.isLeft(parsed)) return invalid("body_invalid", `the body is not strict JSON (${parsed.left.reason})`)
      const decoded = decodeRequest(parsed.right)
      if (Either.isLeft(decoded)) return invalid("body_invalid", "the body is not an execute request")
      const call = decoded.right
      const registry = yield* ActionRegistry.ActionRegistry
      const resolved = registry.resolve({ name: call.action, version: call.version })
      if (Either.isLeft(resolved)) return invalid("unknown_action", `no action ${call.action}@${call.version} here`)
      if (resolved.right.descriptor.digest !== call.descriptor_digest) {
        return invalid("descriptor_mismatch", `${call.action}@${call.version} here has another descriptor`)
      }
      const pinned = yield* Effect.promise(policy)
      if (Either.isLeft(pinned)) return invalid("policy_unavailable", "the edge's policy does not compile or activate")
      const prepared = yield* Effect.either(Ingress.prepare({
        request_id: call.request_id,
        action: call.action,
        version: call.version,
        arguments: call.arguments as Record<string, unknown>,
        idempotency_key: call.idempotency_key
      }, { principal, effect_backend: EdgePlatformBackend.ref, policy_snapshot: pinned.right }))
      if (Either.isLeft(prepared)) return invalid("body_invalid", "the call's fields do not decode")
      const begun = yield* log.begin(principal, call.idempotency_key, digest)
      if (begun !== true) {
        if (begun.digest !== digest) {
          return invalid("idempotency_conflict", "this idempotency key was used with another request")
        }
        if (begun.state !== "concluded") return invalid("in_progress", `this key's execution is ${begun.state}`)
        return json(200, { idempotency_key: call.idempotency_key, replayed: true, outcome: begun.outcome })
      }
      const executor = yield* ActionExecutor.ActionExecutor
      const outcome = yield* Effect.either(
        executor.execute(prepared.right.request, { context: prepared.right.context })
      )
      if (Either.isLeft(outcome)) {
        yield* log.abandon(principal, call.idempotency_key)
        return invalid("executor_failed", `the executor could not conclude: ${outcome.left._tag}`)
      }
      const encoded = encodeOutcome(outcome.right) as Wire.RemoteOutcome
      yield* log.conclude(principal, call.idempotency_key, encoded)
      return json(200, { idempotency_key: call.idempotency_key, replayed: false, outcome: encoded })
    })

/**
 * A handler over `options`; its executor, policy and stores are built at the first request. Throws EdgeConfigError for
 * a caller key it cannot use safely (a malformed or duplicate id, a secret under 32 bytes), so it never serves one.
 */
export const make = (options: Options): EdgeHandler => {
  // The policy's containment opt-ins are the executor's: a required kind the platform claims is admitted only where
  // the policy accepts remote claims for it, as on the caller's side.
  const optIns = Schema.decodeUnknownEither(ContainmentOptIns)(options.policy.containment ?? {})
  const layer = ActionExecutor.layerPolicyGated({
    ...options.config,
    ...(Either.isRight(optIns) ? { containment: optIns.right } : {})
  }).pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        ActionRegistry.layerWith(options.actions),
        EdgePlatformBackend.layer({
          claims: options.claims ?? [],
          platform: options.platform ?? "the operator declared no platform containment",
          runtime: runtimeName(),
          version
        }),
        MemoryPolicySnapshotStore.layer,
        MemoryApprovalQueue.layer
      )
    ),
    Layer.provideMerge(Layer.merge(WebCryptoDigest.layer, IdGenerator.layerCrypto))
  )
  const runtime = ManagedRuntime.make(layer)
  const keys = new Map<string, CallerKey>()
  for (const key of options.keys) {
    const issue = EdgeSignature.keyIssue(key)
    if (issue !== undefined) throw issue
    if (keys.has(key.keyId)) {
      throw new EdgeSignature.EdgeConfigError({
        reason: "duplicate_key_id",
        detail: `two keys have the id ${key.keyId}`
      })
    }
    keys.set(key.keyId, key)
  }
  const verifier: EdgeSignature.Verifier = {
    keys,
    nonces: options.nonces ?? MemoryNonceStore.make(),
    ...(options.clockSkewSeconds === undefined ? {} : { clockSkewSeconds: options.clockSkewSeconds }),
    ...(options.maxLifetimeSeconds === undefined ? {} : { maxLifetimeSeconds: options.maxLifetimeSeconds })
  }
  const log = options.log ?? ExecutionLog.memory()
  const limit = options.maxBodyBytes ?? 1_048_576

  // --- The policy: compiled, stored and activated once; every call pins it.
  const install = Effect.either(Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const snapshot = yield* PolicySnapshot.compile(yield* PermissionPolicy.decode(options.policy))
    yield* store.put(snapshot)
    yield* store.activate(snapshot.policy_id, snapshot.version, "edge", yield* Time.now)
    return { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
  }))
  let installed: Promise<Effect.Effect.Success<typeof install>> | undefined
  const policy = () => (installed ??= runtime.runPromise(install))

  const execute = executeWith(log, policy)

  // --- GET /v1/executions/{key}: what this handler did for the caller under the key.
  const reconcile = (principal: string, key: string) =>
    Effect.map(log.get(principal, key), (entry) =>
      json(200, {
        idempotency_key: key,
        state: entry?.state ?? "unknown",
        ...(entry?.state === "concluded" ? { outcome: entry.outcome } : {})
      }))

  // --- Routing: size, then signature, then the route; nothing past the signature check runs for a refused request.
  const route = async (request: Request): Promise<Response> => {
    const url = new URL(request.url)
    const body = await readBody(request, limit)
    if (body === undefined) return invalid("body_too_large", `a request body is at most ${limit} bytes`)
    const verified = await runtime.runPromise(Effect.either(EdgeSignature.verify(verifier, {
      method: request.method,
      path: url.pathname + url.search,
      get: (name) => request.headers.get(name)
    }, body)))
    if (Either.isLeft(verified)) {
      return json(401, { _tag: "EdgeRequestRefused", reason: verified.left.reason, detail: verified.left.detail })
    }
    const principal = keys.get(verified.right.keyId)!.principal
    const path = url.pathname
    if (path === Wire.routes.execute) {
      if (request.method !== "POST") return invalid("method_not_allowed", `${path} takes POST`)
      const digest = request.headers.get(EdgeSignature.headers.contentSha256)!
      return runtime.runPromise(execute(principal, body, digest))
    }
    if (path.startsWith(Wire.routes.executions)) {
      if (request.method !== "GET") return invalid("method_not_allowed", `${path} takes GET`)
      const key = path.slice(Wire.routes.executions.length)
      if (!Schema.is(Wire.IdempotencyKey)(key)) return invalid("body_invalid", "the path names no idempotency key")
      return runtime.runPromise(reconcile(principal, key))
    }
    if (path === Wire.routes.capabilities) {
      if (request.method !== "GET") return invalid("method_not_allowed", `${path} takes GET`)
      return capabilities(options)
    }
    return invalid("not_found", `no route ${path}`)
  }

  // Whatever escapes a route (a defect) is still a typed answer, never an untyped 500.
  const fetch = (request: Request) =>
    route(request).catch(() => invalid("handler_failed", "the handler failed while serving this request"))

  return { fetch, dispose: () => runtime.dispose() }
}
