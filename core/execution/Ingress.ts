/**
 * The trusted ingress every surface shares (the CLI, the Promise facade and the demo today; the MCP server and the
 * HTTP handler next): a request and its context from operator input, a Run's terminal state from its one call's
 * outcome, the Run ended when the work around its call fails, and a task boundary closed, verified and certified.
 * The host that calls `prepare` is the one that authenticated the principal it names.
 *
 * It is the only place contexts are minted (`bind`, `resolve`, `prepare`): the executor refuses a context it did not
 * mint (`context.untrusted`), so no other code can choose the principal or pin the policy version a call runs under.
 */
import type { Deferred, Effect, Option, ParseResult } from "effect"
import type { IdGenerator } from "../base/IdGenerator.ts"
import type { AmbiguousPolicyError, PolicyNotFoundError, PolicySnapshotStore } from "../policy/PolicySnapshotStore.ts"
import type { Run, RunTerminal } from "../state/StateStore.ts"
import type { Binding, ExecutionContext } from "./ExecutionContext.ts"
import type { ExecutionOutcome } from "./ExecutionOutcome.ts"
import type { ExecutionRequest } from "./ExecutionRequest.ts"
import type { Call, Resolving, Trust } from "./internal/ingress.ts"
import * as internal from "./internal/ingress.ts"
import * as mint from "./internal/mint.ts"

export type {
  /** One call as operator input names it: untrusted, decoded by `prepare`. */
  Call,
  /** What a binding offers the store's resolution beyond its tenant: the principal's roles, the resource it is on. */
  Resolving,
  /** What the host authenticated and chose for the call: its principal, backend, policy and scope. */
  Trust
} from "./internal/ingress.ts"

/** Mint a context for what the host authenticated, with a fresh id; it pins the snapshot the host names, if any. */
export const bind: (binding: Binding) => Effect.Effect<ExecutionContext, never, IdGenerator> = internal.bind

/**
 * Mint a context pinned to the active snapshot the store binds for the call (resource, then role, then global; the
 * context's tenant's binding before one for every tenant), or to
 * none when nothing is bound (a bound snapshot the store refuses as tampered fails, `refused`); a snapshot the host
 * names explicitly is pinned as named.
 */
export const resolve: (
  binding: Resolving
) => Effect.Effect<
  ExecutionContext,
  AmbiguousPolicyError | PolicyNotFoundError,
  IdGenerator | PolicySnapshotStore
> = internal.resolve

/** Whether a context was minted by this ingress: the executor runs no other. */
export const isMinted: (context: unknown) => boolean = mint.isMinted

/**
 * A request decoded from a call (a bad field is a ParseError naming it) and the trusted context bound for it, pinned to
 * the snapshot the host names or, with a PolicySnapshotStore in context, to the one its bindings resolve (as `resolve`).
 */
export const prepare: (
  call: Call,
  trust: Trust
) => Effect.Effect<
  { readonly request: ExecutionRequest; readonly context: ExecutionContext },
  ParseResult.ParseError | AmbiguousPolicyError | PolicyNotFoundError,
  IdGenerator
> = internal.prepare

/** The Run terminal the outcome of its one call gives: no one judged it, and its cost is unknown (null). */
export const terminalOf: (outcome: ExecutionOutcome) => RunTerminal = internal.terminalOf

/** The Run the executor created for an admitted call, if it created one. */
export const createdRun: (created: Deferred.Deferred<Run>) => Effect.Effect<Option.Option<Run>> = internal.createdRun

/**
 * End the Run a call was admitted into, when the work around it does not conclude it: failed (`PREFIX.<error tag>`)
 * on an error, cancelled (`PREFIX.interrupted`) when interrupted; then end as the work did.
 */
export const endRunOnError = internal.endRunOnError

/** Close a boundary, verify its chain against the closing head, and (when `certify`) mint and re-verify its certificate. */
export const closeAndCertify = internal.closeAndCertify

/** What `closeAndCertify` found. */
export type Certified = Effect.Effect.Success<ReturnType<typeof closeAndCertify>>
