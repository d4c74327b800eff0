/**
 * The trusted origin of an invocation: who asked (a human, the agent itself, another agent), built
 * only by the host's ingress factories, derived on delegation, and carried by the running fiber.
 */
import type { Fiber } from "effect"
import { Effect, FiberRef, Option, Schema } from "effect"
import { dual } from "effect/Function"
import { compareCodePoints } from "../base/Canonical.ts"
import * as IdGenerator from "../base/IdGenerator.ts"
import { Identifier } from "../base/Refs.ts"
import { Timestamp } from "../base/Time.ts"

/** USER: a human (or work planned on one's behalf); SELF: the agent's own initiative; OTHER_AGENT: another agent asked. */
export const ExecutionCaller = Schema.Literal("USER", "SELF", "OTHER_AGENT")

/** An execution origin category. */
export type ExecutionCaller = typeof ExecutionCaller.Type

/** A human subject: an interaction category (e.g. a local chat), not necessarily a verified account. */
export const HumanSubject = Schema.Struct({
  kind: Schema.Literal("human"),
  id: Identifier,
  roles: Schema.Array(Identifier)
})

/** A human subject. */
export type HumanSubject = typeof HumanSubject.Type

/** An agent subject: the actual agent that executes or asks, distinct from any principal it runs as. */
export const AgentSubject = Schema.Struct({
  kind: Schema.Literal("agent"),
  id: Identifier,
  roles: Schema.Array(Identifier)
})

/** An agent subject. */
export type AgentSubject = typeof AgentSubject.Type

/** A subject taking part in an invocation: a human or an agent, with its roles. */
export const AccessSubject = Schema.Union(HumanSubject, AgentSubject)

/** A subject taking part in an invocation. */
export type AccessSubject = typeof AccessSubject.Type

/** Bounds on what an invocation may do; an absent field is unbounded, an empty list allows nothing. */
export const AuthorityScope = Schema.Struct({
  expires_at: Schema.optional(Timestamp),
  action_types: Schema.optional(Schema.Array(Identifier)),
  target_systems: Schema.optional(Schema.Array(Identifier))
})

/** Bounds on what an invocation may do. */
export type AuthorityScope = typeof AuthorityScope.Type

/** Why an authority scope does not cover a call. */
export type AuthorityDenial = "authority.expired" | "authority.action_type" | "authority.target_system"

const byCodePoint = compareCodePoints

const sortedSet = (values: Iterable<string>): ReadonlyArray<string> =>
  Object.freeze([...new Set(values)].sort(byCodePoint))

const intersectList = (
  a: ReadonlyArray<string> | undefined,
  b: ReadonlyArray<string> | undefined
): ReadonlyArray<string> | undefined => {
  if (a === undefined) return b === undefined ? undefined : sortedSet(b)
  if (b === undefined) return sortedSet(a)
  const other = new Set(b)
  return sortedSet(a.filter((value) => other.has(value)))
}

const scope = (
  expires_at: Timestamp | undefined,
  action_types: ReadonlyArray<string> | undefined,
  target_systems: ReadonlyArray<string> | undefined
): AuthorityScope =>
  Object.freeze({
    ...(expires_at === undefined ? {} : { expires_at }),
    ...(action_types === undefined ? {} : { action_types }),
    ...(target_systems === undefined ? {} : { target_systems })
  })

/** The intersection of two scopes: the earlier expiry and the common action types and target systems. */
export const intersectAuthority = (a: AuthorityScope, b: AuthorityScope): AuthorityScope =>
  scope(
    // Timestamps are fixed-width UTC strings, so string order is time order.
    a.expires_at === undefined || (b.expires_at !== undefined && b.expires_at < a.expires_at)
      ? b.expires_at
      : a.expires_at,
    intersectList(a.action_types, b.action_types),
    intersectList(a.target_systems, b.target_systems)
  )

/** Why a scope does not cover a call at `now`, or undefined when it does; a bounded field needs the call's value. */
export const checkAuthority = (
  authority: AuthorityScope,
  call: {
    readonly now: Timestamp
    readonly action_type?: string | undefined
    readonly target_system?: string | undefined
  }
): AuthorityDenial | undefined => {
  if (authority.expires_at !== undefined && call.now >= authority.expires_at) return "authority.expired"
  if (
    authority.action_types !== undefined &&
    (call.action_type === undefined || !authority.action_types.includes(call.action_type))
  ) return "authority.action_type"
  if (
    authority.target_systems !== undefined &&
    (call.target_system === undefined || !authority.target_systems.includes(call.target_system))
  ) return "authority.target_system"
  return undefined
}

/** A human subject with its roles. */
export const human = (id: string, roles: ReadonlyArray<string> = []): HumanSubject =>
  HumanSubject.make({ kind: "human", id, roles })

/** An agent subject with its roles. */
export const agent = (id: string, roles: ReadonlyArray<string> = []): AgentSubject =>
  AgentSubject.make({ kind: "agent", id, roles })

const ORDER: ReadonlyArray<ExecutionCaller> = ["OTHER_AGENT", "SELF", "USER"]

/** Origin categories deduplicated in one fixed (sorted) order. */
export const sortOrigins = (origins: Iterable<ExecutionCaller>): ReadonlyArray<ExecutionCaller> => {
  const present = new Set(origins)
  return Object.freeze(ORDER.filter((origin) => present.has(origin)))
}

const trusted: unique symbol = Symbol("writ/InvocationContext.trusted")
// Type-only brand: a structural look-alike object does not type-check as a context.
declare const Brand: unique symbol

const validHuman = Schema.validateSync(HumanSubject)
const validAgent = Schema.validateSync(AgentSubject)
const validAuthority = Schema.validateSync(AuthorityScope)
const validIdentifier = Schema.validateSync(Schema.typeSchema(Identifier))

const freezeHuman = (subject: HumanSubject): HumanSubject =>
  Object.freeze({ kind: "human", id: subject.id, roles: sortedSet(subject.roles) })

const freezeAgent = (subject: AgentSubject): AgentSubject =>
  Object.freeze({ kind: "agent", id: subject.id, roles: sortedSet(subject.roles) })

const freezeAuthority = (authority: AuthorityScope): AuthorityScope => intersectAuthority(validAuthority(authority), {})

/** An invocation whose origin the host established: the executing agent, who asked, and with what authority. */
export class EstablishedInvocation {
  declare readonly [Brand]: "EstablishedInvocation"
  /** The discriminator. */
  readonly _tag = "established"
  /** The executor (principal) the invocation runs as. */
  readonly executor_id: string
  /** The actual agent executing. */
  readonly executing_agent: AgentSubject
  /** The human the work is for, when a USER chain began with one. */
  readonly human: HumanSubject | undefined
  /** The agent that asked, when another agent did. */
  readonly calling_agent: AgentSubject | undefined
  /** The authority bounds, intersected along the chain. */
  readonly authority: AuthorityScope
  /** The origin categories a destination must allow, all at once, sorted. */
  readonly origins: ReadonlyArray<ExecutionCaller>

  constructor(key: typeof trusted, fields: Omit<EstablishedInvocation, "_tag" | typeof Brand>) {
    if (key !== trusted) throw new TypeError("invocation contexts are built by the host factories")
    this.executor_id = fields.executor_id
    this.executing_agent = fields.executing_agent
    this.human = fields.human
    this.calling_agent = fields.calling_agent
    this.authority = fields.authority
    this.origins = fields.origins
    Object.freeze(this)
  }
}

/** An invocation whose origin nobody established: it grants no category and has a random idempotency partition. */
export class UnknownInvocation {
  declare readonly [Brand]: "UnknownInvocation"
  /** The discriminator. */
  readonly _tag = "unknown"
  /** The executor (principal) the invocation runs as. */
  readonly executor_id: string
  /** The random partition that keeps its idempotency entries apart from everyone's. */
  readonly partition_id: IdGenerator.Uuid
  /** No origin category at all. */
  readonly origins: ReadonlyArray<ExecutionCaller> = Object.freeze([])

  constructor(key: typeof trusted, executor_id: string, partition_id: IdGenerator.Uuid) {
    if (key !== trusted) throw new TypeError("invocation contexts are built by the host factories")
    this.executor_id = executor_id
    this.partition_id = partition_id
    Object.freeze(this)
  }
}

/** The trusted origin of an invocation: established by a host factory, or unknown. */
export type InvocationContext = EstablishedInvocation | UnknownInvocation

/** Whether a value is a context built by this module's factories (a structural look-alike is not). */
export const isInvocationContext = (value: unknown): value is InvocationContext =>
  value instanceof EstablishedInvocation || value instanceof UnknownInvocation

const established = (
  executorId: string,
  executing_agent: AgentSubject,
  human: HumanSubject | undefined,
  calling_agent: AgentSubject | undefined,
  authority: AuthorityScope,
  origins: ReadonlyArray<ExecutionCaller>
): EstablishedInvocation =>
  new EstablishedInvocation(trusted, {
    executor_id: validIdentifier(executorId),
    executing_agent: freezeAgent(validAgent(executing_agent)),
    human: human === undefined ? undefined : freezeHuman(validHuman(human)),
    calling_agent: calling_agent === undefined ? undefined : freezeAgent(validAgent(calling_agent)),
    authority,
    origins: sortOrigins(origins)
  })

/** Host ingress: a human asked `agent` (USER); throws a ParseError on an invalid subject, id or scope. */
export const user = (
  human: HumanSubject,
  agent: AgentSubject,
  executorId: string,
  authority: AuthorityScope
): EstablishedInvocation => established(executorId, agent, human, undefined, freezeAuthority(authority), ["USER"])

/** Host ingress: `agent` acts on its own initiative (SELF). */
export const autonomous = (agent: AgentSubject, executorId: string, authority: AuthorityScope): EstablishedInvocation =>
  established(executorId, agent, undefined, undefined, freezeAuthority(authority), ["SELF"])

/** Host ingress: `callerAgent` asked `agent` (OTHER_AGENT). */
export const otherAgent = (
  callerAgent: AgentSubject,
  agent: AgentSubject,
  executorId: string,
  authority: AuthorityScope
): EstablishedInvocation =>
  established(executorId, agent, undefined, callerAgent, freezeAuthority(authority), ["OTHER_AGENT"])

/** Host ingress when nobody established the origin: no category, a fresh random partition. */
export const unknown = (executorId: string): Effect.Effect<UnknownInvocation, never, IdGenerator.IdGenerator> =>
  Effect.map(IdGenerator.uuid, (partition) => new UnknownInvocation(trusted, validIdentifier(executorId), partition))

/** Hand work on: the current agent is the sender, authority intersects, the same agent keeps its origin. */
export function delegateTo(
  context: EstablishedInvocation,
  nextAgent: AgentSubject,
  nextExecutorId: string,
  nextAuthority: AuthorityScope
): EstablishedInvocation
export function delegateTo(
  context: UnknownInvocation,
  nextAgent: AgentSubject,
  nextExecutorId: string,
  nextAuthority: AuthorityScope
): UnknownInvocation
export function delegateTo(
  context: InvocationContext,
  nextAgent: AgentSubject,
  nextExecutorId: string,
  nextAuthority: AuthorityScope
): InvocationContext
export function delegateTo(
  context: InvocationContext,
  nextAgent: AgentSubject,
  nextExecutorId: string,
  nextAuthority: AuthorityScope
): InvocationContext {
  if (context._tag === "unknown") {
    return new UnknownInvocation(trusted, validIdentifier(nextExecutorId), context.partition_id)
  }
  const authority = intersectAuthority(context.authority, freezeAuthority(nextAuthority))
  if (nextAgent.id === context.executing_agent.id) {
    return established(nextExecutorId, nextAgent, context.human, context.calling_agent, authority, context.origins)
  }
  const origins: Array<ExecutionCaller> = context.origins.includes("USER") ? ["USER", "OTHER_AGENT"] : ["OTHER_AGENT"]
  return established(nextExecutorId, nextAgent, context.human, context.executing_agent, authority, origins)
}

// Forked children inherit the context; joining one never changes the parent's (defence in depth: `locally` restores).
const current: FiberRef.FiberRef<InvocationContext | undefined> = FiberRef.unsafeMake<InvocationContext | undefined>(
  undefined,
  { join: (parent) => parent }
)

/** The invocation context the current fiber runs under, if any. */
export const currentInvocation: Effect.Effect<Option.Option<InvocationContext>> = Effect.map(
  FiberRef.get(current),
  Option.fromNullable
)

/** The invocation context a running fiber runs under, if any, read synchronously (what `currentInvocation` answers in it). */
export const invocationOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Option.Option<InvocationContext> =>
  Option.fromNullable(fiber.getFiberRef(current))

/** Run an effect (and the fibers it forks) under a context; other fibers, running or future, keep theirs. */
export const withInvocation: {
  (context: InvocationContext): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  <A, E, R>(effect: Effect.Effect<A, E, R>, context: InvocationContext): Effect.Effect<A, E, R>
} = dual(
  2,
  <A, E, R>(effect: Effect.Effect<A, E, R>, context: InvocationContext): Effect.Effect<A, E, R> =>
    Effect.locally(effect, current, context)
)
