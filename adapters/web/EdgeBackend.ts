/**
 * The edge effect backend: each invocation is one signed `POST /v1/execute` to a writ edge handler (runtime/edge)
 * that runs the action through its own executor under its own policy. Runtimes: every one (fetch and WebCrypto).
 *
 * Its report labels the platform's containment a `remote` claim, never verified here: the capabilities the handler
 * says its platform enforces are listed `enforced` by `remote`, `verified: "claimed"`, and every kind of containment
 * admission reads stays `unsupported`, so a call requiring containment is denied before it is sent.
 *
 * A request that may have reached the handler and whose answer did not come back (a reset connection, a timeout after
 * the request was written, a body cut short) concludes `ambiguous` (`backend.response_lost`), never `failed`, and is
 * never re-sent: the backend does not reconcile by itself. `reconcile(key)` asks the handler what it did under the
 * invocation's idempotency key (its attempt id), and the operator decides. Only a connection refused before anything
 * was sent concludes `failed` (`backend.remote_unreachable`).
 */
import { Duration, Effect, Either, Layer, Redacted, Schema } from "effect"
import { ActionError } from "../../core/action/Action.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"
import {
  ActionBackendCapabilityReport,
  ActionExecutionBackend,
  BackendMechanism,
  CapabilityClaim,
  noContainment
} from "../../core/action/ActionExecutionBackend.ts"
import type { ActionBackendError, Invocation } from "../../core/action/ActionExecutionBackend.ts"
import { issue } from "../../core/action/internal/backendFailure.ts"
import * as InvocationToken from "../../core/action/InvocationToken.ts"
import { Digest } from "../../core/base/Digest.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"
import * as StrictJson from "../../core/base/StrictJson.ts"
import * as EdgeSignature from "./EdgeSignature.ts"
import * as Wire from "./EdgeWire.ts"
import * as WebCryptoDigest from "./WebCryptoDigest.ts"

/** Where the handler is and how to sign for it. */
export interface Options {
  /** The handler's base URL (`https://edge.example/writ`); the routes are appended to its path. */
  readonly url: string
  /** The key id the handler knows this caller by. */
  readonly keyId: string
  /** The shared HMAC-SHA256 secret (at least 32 bytes of UTF-8). */
  readonly key: Redacted.Redacted<string> | string
  /** How long one request may take before its answer counts as lost (default: 30 seconds). */
  readonly timeout?: Duration.DurationInput
  /** The lifetime of a signature, in seconds (default 60; the handler accepts at most its own bound). */
  readonly lifetimeSeconds?: number
  /** The fetch to send with (default: the runtime's own). */
  readonly fetch?: typeof globalThis.fetch
}

/** The backend's identity. */
export const ref = ActionBackendRef.make({ id: "edge", version: "1" })

/** Why the backend could not learn what the handler did under a key. */
export class EdgeReconcileError extends Schema.TaggedError<EdgeReconcileError>()("EdgeReconcileError", {
  reason: Schema.Literal("unreachable", "refused", "answer_invalid"),
  detail: Schema.String
}) {}

/** The edge backend: the port, and the reconciliation of one idempotency key. */
export interface EdgeBackend extends ActionExecutionBackend.Service {
  /** What the handler did under `key` for this caller: concluded (with its outcome), in progress, or unknown. */
  readonly reconcile: (key: string) => Effect.Effect<Wire.ExecutionRecord, EdgeReconcileError>
}

const encoder = new TextEncoder()
const decodeExecuted = Schema.decodeUnknownEither(Wire.ExecuteResponse)
const decodeRecord = Schema.decodeUnknownEither(Wire.ExecutionRecord)
const decodeCapabilities = Schema.decodeUnknownEither(Wire.Capabilities)
const decodeError = Schema.decodeUnknownEither(Wire.ErrorBody)

// A connection refused means nothing was sent; any other transport failure may have followed a written request.
const refusedBeforeSending = (error: unknown): boolean => {
  for (let cause = error, depth = 0; cause !== undefined && cause !== null && depth < 4; depth++) {
    const { code, message } = cause as { readonly code?: unknown; readonly message?: unknown }
    // Node's fetch refuses some ports before connecting ("bad port"); deno says "Connection refused".
    if (code === "ECONNREFUSED" || (typeof message === "string" && /connection refused|^bad port$/i.test(message))) {
      return true
    }
    cause = (cause as { readonly cause?: unknown }).cause
  }
  return false
}

/** What one exchange with the handler ended as, before any outcome is read from it. */
type Exchange =
  | { readonly _tag: "answered"; readonly status: number; readonly body: unknown }
  | { readonly _tag: "unreachable"; readonly detail: string }
  | { readonly _tag: "lost"; readonly detail: string }

const failed = (reason: ActionBackendError["reason"], detail: string, started = false) =>
  Effect.fail(issue({ outcome: "failed", reason, started, detail }))
const ambiguous = (reason: ActionBackendError["reason"], detail: string) =>
  Effect.fail(issue({ outcome: "ambiguous", reason, started: true, detail }))

/** What one backend sends to: its key, the handler's base URL and path prefix, its fetch and its timeout. */
interface Target {
  readonly key: EdgeSignature.Key
  readonly base: URL
  readonly prefix: string
  readonly send: typeof globalThis.fetch
  readonly timeout: Duration.Duration
  readonly lifetimeSeconds: number | undefined
}

// One signed exchange: lost once the request may have been written and its answer did not fully arrive.
const exchanger =
  (config: Target) => (method: "GET" | "POST", route: string, body: Uint8Array): Effect.Effect<Exchange> =>
    Effect.gen(function*() {
      const { base, key, prefix, send, timeout } = config
      const path = prefix + route
      const headers = yield* EdgeSignature.sign(key, { method, path, body }, config.lifetimeSeconds)
      const target = new URL(path, base)
      const sent = yield* Effect.either(
        Effect.tryPromise({
          try: async (signal) => {
            const init: RequestInit = { method, headers: { ...headers, "content-type": "application/json" }, signal }
            const response = await send(target, method === "POST" ? { ...init, body: body as BodyInit } : init)
            return { status: response.status, text: await response.text() }
          },
          catch: (error) => error
        }).pipe(Effect.timeoutFail({ duration: timeout, onTimeout: () => "timeout" as const }))
      )
      if (Either.isLeft(sent)) {
        if (sent.left === "timeout") {
          return { _tag: "lost", detail: `no complete answer within ${Duration.format(timeout)}` } as const
        }
        return refusedBeforeSending(sent.left)
          ? { _tag: "unreachable", detail: `${base.host} refused the connection: nothing was sent` } as const
          : {
            _tag: "lost",
            detail: `the exchange failed, possibly after the request was sent (${String(sent.left)})`
          } as const
      }
      const parsed = StrictJson.parse(sent.right.text)
      return { _tag: "answered", status: sent.right.status, body: Either.getOrUndefined(parsed) } as const
    })

const digests = new WeakMap<ActionDefinition, string>()
const digestOf = (definition: ActionDefinition) => {
  const known = digests.get(definition)
  if (known !== undefined) return Effect.succeed(known)
  return ActionDescriptor.describe(definition).pipe(
    Effect.provideService(Digest, WebCryptoDigest.make),
    Effect.map((descriptor) => {
      digests.set(definition, descriptor.digest)
      return descriptor.digest as string
    }),
    Effect.catchAll(() => failed("input_invalid", "the action's descriptor cannot be digested"))
  )
}

// An answered execute request, as what the local executor concludes.
const concluded = (invocation: Invocation, status: number, body: unknown): Effect.Effect<unknown, unknown> => {
  if (status !== 200) {
    const error = decodeError(body)
    if (Either.isLeft(error)) {
      return ambiguous("result_invalid", `the handler answered ${status} with no typed body`)
    }
    const { _tag, detail, reason } = error.right
    if (_tag === "EdgeRequestRefused") return failed("request_refused", `the handler refused: ${reason}: ${detail}`)
    if (reason === "descriptor_mismatch") return failed("descriptor_mismatch", detail)
    if (reason === "in_progress" || reason === "executor_failed" || reason === "handler_failed") {
      return ambiguous("remote_failed", `the handler answered ${reason}: ${detail}`)
    }
    return failed("request_refused", `the handler did not serve it: ${reason}: ${detail}`)
  }
  const answer = decodeExecuted(body)
  if (Either.isLeft(answer)) return ambiguous("result_invalid", "the handler's answer is not an execute response")
  const outcome = answer.right.outcome
  const said = (reason: { readonly code: string; readonly detail?: string | undefined } | undefined) =>
    reason === undefined ? "" : `${reason.code}${reason.detail === undefined ? "" : `: ${reason.detail}`}`
  switch (outcome._tag) {
    case "succeeded": {
      const output = Schema.decodeUnknownEither(invocation.definition.output)(outcome.result)
      return Either.isLeft(output)
        ? failed("output_invalid", "the handler's result does not decode by the output Schema", true)
        : Effect.succeed(output.right)
    }
    case "denied":
    case "deferred":
    case "escalated":
      return Effect.fail(issue({
        outcome: "denied",
        reason: "remote_denied",
        started: false,
        detail: `the edge's own executor concluded ${outcome._tag} (${said(outcome.reason)})`
      }))
    case "failed": {
      const code = outcome.failure?.code ?? "handler.failed"
      return /^[a-z_]+(?:\.[a-z_]+)*$/.test(code)
        ? Effect.fail(new ActionError({ code, message: outcome.failure?.message ?? "" }))
        : failed("remote_failed", `the edge's action failed (${code})`, true)
    }
    case "timed_out":
      return Effect.fail(issue({
        outcome: "timed_out",
        reason: "remote_failed",
        started: outcome.call_executed ?? true,
        detail: "the edge's own executor timed the call out"
      }))
    case "cancelled":
    case "ambiguous":
      return ambiguous("remote_failed", `the edge's own executor concluded ${outcome._tag} ${said(outcome.reason)}`)
  }
}

/**
 * An edge backend over `options` (refused, EdgeConfigError, for a malformed key id, a secret under 32 bytes or a URL
 * that is not http(s)); its probe asks the handler for its platform's claims once, and is cached.
 */
export const make = (options: Options): Effect.Effect<EdgeBackend, EdgeSignature.EdgeConfigError> =>
  Effect.gen(function*() {
    const key: EdgeSignature.Key = {
      keyId: options.keyId,
      secret: typeof options.key === "string" ? Redacted.make(options.key) : options.key
    }
    const unusable = EdgeSignature.keyIssue(key)
    if (unusable !== undefined) return yield* unusable
    if (!URL.canParse(options.url) || !/^https?:$/.test(new URL(options.url).protocol)) {
      return yield* new EdgeSignature.EdgeConfigError({
        reason: "bad_url",
        detail: `${options.url} is not an http(s) URL`
      })
    }
    const base = new URL(options.url)
    const prefix = base.pathname.replace(/\/+$/, "")
    const send = options.fetch ?? globalThis.fetch
    const timeout = Duration.decode(options.timeout ?? "30 seconds")

    const exchange = exchanger({ key, base, prefix, send, timeout, lifetimeSeconds: options.lifetimeSeconds })

    const invoke = (token: InvocationToken.InvocationToken, invocation: Invocation): Effect.Effect<unknown, unknown> =>
      Effect.suspend(() => {
        const redeemed = InvocationToken.redeem(token, invocation.definition)
        if (Either.isLeft(redeemed)) return redeemed
        return Effect.gen(function*() {
          const { definition } = invocation
          const input = Schema.encodeEither(definition.input)(invocation.input)
          if (Either.isLeft(input) || StrictJson.violation(input.right) !== undefined) {
            return yield* failed("input_invalid", "the arguments do not encode to JSON by the input Schema")
          }
          const key = invocation.context.attempt_id
          const body = encoder.encode(JSON.stringify({
            idempotency_key: key,
            request_id: invocation.context.request_id,
            action: definition.name,
            version: definition.version,
            descriptor_digest: yield* digestOf(definition),
            arguments: input.right
          }))
          const result = yield* exchange("POST", Wire.routes.execute, body)
          switch (result._tag) {
            case "unreachable":
              return yield* failed("remote_unreachable", result.detail)
            case "lost":
              return yield* ambiguous("response_lost", `${result.detail}; reconcile idempotency key ${key}`)
            case "answered":
              return yield* concluded(invocation, result.status, result.body)
          }
        })
      })

    const reconcile = (idempotencyKey: string) =>
      Effect.gen(function*() {
        if (!Schema.is(Wire.IdempotencyKey)(idempotencyKey)) {
          return yield* new EdgeReconcileError({ reason: "refused", detail: "not an idempotency key" })
        }
        const result = yield* exchange("GET", Wire.routes.executions + idempotencyKey, new Uint8Array())
        if (result._tag !== "answered") return yield* new EdgeReconcileError({ reason: "unreachable", ...result })
        if (result.status !== 200) {
          const detail = `the handler answered ${result.status}: ${JSON.stringify(result.body)}`
          return yield* new EdgeReconcileError({ reason: "refused", detail })
        }
        const record = decodeRecord(result.body)
        if (Either.isLeft(record)) {
          return yield* new EdgeReconcileError({ reason: "answer_invalid", detail: "not an execution record" })
        }
        return record.right
      })

    const probe = yield* Effect.cached(
      Effect.map(exchange("GET", Wire.routes.capabilities, new Uint8Array()), (result) => {
        const answered = result._tag === "answered" && result.status === 200
          ? decodeCapabilities(result.body)
          : Either.left(undefined)
        if (Either.isLeft(answered)) {
          const why = result._tag === "answered" ? `it answered ${result.status}` : result.detail
          return reportOf(`probe failed: no capabilities from the handler at ${base.origin} (${why})`)
        }
        return reportOf(
          `remote claim, not verified here: the handler at ${base.origin} (${answered.right.runtime}) says: ` +
            answered.right.detail,
          answered.right
        )
      })
    )

    return { ref, probe, invoke, reconcile }
  })

/** The report: admission's containment all unsupported, the platform's claims listed as remote and claimed. */
const reportOf = (verified_by: string, capabilities?: Wire.Capabilities) =>
  ActionBackendCapabilityReport.make({
    backend: ref,
    containment: noContainment,
    verified_by,
    report_version: 1,
    ...(capabilities === undefined ? {} : {
      mechanism: BackendMechanism.make({
        name: "writ-edge",
        version: capabilities.handler_version,
        platform: capabilities.runtime
      })
    }),
    capabilities: (capabilities?.claims ?? []).map((claim) =>
      CapabilityClaim.make(
        claim.level === "enforced"
          ? { name: claim.name, level: "enforced", by: "remote", verified: "claimed" }
          : { name: claim.name, level: "unsupported", verified: "claimed" }
      )
    )
  })

/** The edge backend as a Layer. */
export const layer = (options: Options): Layer.Layer<ActionExecutionBackend, EdgeSignature.EdgeConfigError> =>
  Layer.effect(ActionExecutionBackend, make(options))

/** The edge backend's layer, under the name a backend selection uses. */
export const layerEdge = layer
