/**
 * Stage 3's capacity admission: before a governed operation opens, each call takes a lease on every capacity the
 * executor is configured with, or is deferred at once with when to retry (never a gate result, never an
 * `operation_started`, never a wait). A lease is held until the attempt concludes, however it concludes, and a call
 * still running when a lease expires is stopped then, its share freed once it has stopped.
 */
import { Effect, Either, Option } from "effect"
import type { ActionDescriptor } from "../action/ActionDescriptor.ts"
import { IdGenerator } from "../base/IdGenerator.ts"
import * as Time from "../base/Time.ts"
import type { Timestamp } from "../base/Time.ts"
import type { Pending } from "../policy/BudgetLedger.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import type { ExecutionContext } from "./ExecutionContext.ts"
import type { ExecutionRequest } from "./ExecutionRequest.ts"

/** What a capacity decides on: the request, its trusted context, the resolved action, the attempt and its pinned snapshot. */
export interface Admission {
  readonly request: ExecutionRequest
  readonly context: ExecutionContext
  readonly descriptor: ActionDescriptor
  readonly attempt_id: string
  /** Governed profiles: the policy snapshot pinned earlier in stage 3, which the call is decided on. */
  readonly snapshot?: PolicySnapshot
}

/** Why a call is deferred: a stable reason code, and when capacity is expected back, if known. */
export interface Deferral {
  readonly code: string
  readonly detail?: string
  readonly retry_at?: Timestamp
}

/** A held share of a capacity; releasing it twice releases once. */
export interface Lease {
  /** Its identity (the built-in capacities mint one per lease). */
  readonly lease_id?: string
  /** When it lapses: the call is stopped then, as at its deadline, and its share freed once it has stopped. */
  readonly expires_at?: Timestamp
  readonly release: Effect.Effect<void>
  /** Governed: budget places the call takes in the commit of its operation's start, or is deferred as `spent` says. */
  readonly admissions?: Pending<Deferral>
}

/** A capacity: a lease for a call, or its deferral. */
export interface Capacity {
  readonly id: string
  readonly admit: (admission: Admission) => Effect.Effect<Either.Either<Lease, Deferral>>
  /** Whether it bounds this call at all (default: every call); a call no capacity bounds skips stage 3's lease step. */
  readonly applies?: (admission: Admission) => boolean
}

/** What a capacity's calls share its limit by: the action's name, the authenticated principal, the tenant. */
export type Partition = "action" | "principal" | "tenant"

const partOf: Record<Partition, (admission: Admission) => string> = {
  action: (admission) => admission.descriptor.name,
  principal: (admission) => admission.context.authenticated_principal.id,
  tenant: (admission) => admission.context.tenant?.id ?? ""
}

/** What a built-in capacity counts a call under: its own `key`, else its `per` parts, else one key for every call. */
interface Keyed {
  readonly key?: (admission: Admission) => string
  readonly per?: ReadonlyArray<Partition>
}

// Each part prefixed by its length, so no part can forge a separator.
const keyWith = ({ key, per }: Keyed): (admission: Admission) => string =>
  key ?? (per === undefined || per.length === 0
    ? () => ""
    : (admission) => per.map((part) => partOf[part](admission)).map((value) => `${value.length}:${value}`).join(""))

type Admitted = Either.Either<Lease, Deferral>

// A built-in capacity: `decide` answers a call, by its key, at the Clock's time in microseconds, with a lease id from
// the IdGenerator in context (a count of this capacity's leases where there is none).
const keyedCapacity = (
  options: Keyed & { readonly id: string; readonly applies?: (admission: Admission) => boolean },
  decide: (key: string, now: number, leaseId: () => string) => Admitted
): Capacity => {
  const keyOf = keyWith(options)
  let leases = 0
  const counted = () => `${options.id}/${++leases}`
  return {
    id: options.id,
    ...(options.applies === undefined ? {} : { applies: options.applies }),
    admit: (admission) =>
      Effect.flatMap(Effect.serviceOption(IdGenerator), (ids) =>
        Effect.clockWith((clock) => {
          const now = Number(clock.unsafeCurrentTimeNanos() / 1000n)
          const decideWith = (leaseId: () => string) => Effect.sync(() => decide(keyOf(admission), now, leaseId))
          if (Option.isNone(ids)) return decideWith(counted)
          const sync = ids.value.uuidSync
          return sync !== undefined ? decideWith(sync) : Effect.flatMap(ids.value.uuid, (id) => decideWith(() => id))
        }))
  }
}

/** Options of a bounded capacity. */
export interface BoundedOptions extends Keyed {
  readonly id: string
  /** Calls that may hold a lease at once, per key. */
  readonly permits: number
  /** How long a lease lasts (default 60 s): a call still running then is stopped, and its permit freed once it is. */
  readonly lease_microseconds?: number
  /** The actions it bounds (default: every action). */
  readonly applies?: (admission: Admission) => boolean
}

const defaultLease = 60_000_000
// A permit whose lease has lapsed is free once its call has stopped: expected within this margin.
const stopMargin = 1_000

const positive = (what: string, value: number) => {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${what} must be a positive integer (${value})`)
  return value
}

/** The permits of one key: each held lease's expiry, and the retry times already told to calls deferred. */
interface Permits {
  readonly held: Map<string, number>
  promised: Array<number>
}

/**
 * The time a deferred call is told to retry at: the earliest lease expiry not already promised to another deferred
 * call (each held permit frees at its expiry, then every lease term after), so a crowd of deferred calls retries in
 * waves of `permits`, never all at once.
 */
const retryAt = (permits: Permits, lease: number, now: number): number => {
  // Told in rising order, mostly: those due are dropped from the front.
  while (permits.promised.length > 0 && permits.promised[0]! <= now) permits.promised.shift()
  const frees = [...permits.held.values()].map((at) => Math.max(at, now) + stopMargin).sort((a, b) => a - b)
  const told = permits.promised.length
  const at = frees[told % frees.length]! + Math.floor(told / frees.length) * lease
  permits.promised.push(at)
  return at
}

/**
 * At most `permits` calls at once per key; a call beyond them is deferred at once (`capacity.unavailable`), never
 * queued, with `retry_at` the earliest lease expiry no other deferred call was told. Each lease has an id and expires
 * after `lease_microseconds`.
 */
export const bounded = (options: BoundedOptions): Capacity => {
  const limit = positive(`capacity ${options.id}: permits`, options.permits)
  const lease = positive(`capacity ${options.id}: lease_microseconds`, options.lease_microseconds ?? defaultLease)
  const keys = new Map<string, Permits>()
  return keyedCapacity(options, (key, now, leaseId): Admitted => {
    let permits = keys.get(key)
    if (permits === undefined) keys.set(key, permits = { held: new Map(), promised: [] })
    if (permits.held.size >= limit) {
      return Either.left({
        code: "capacity.unavailable",
        detail: `${options.id}: ${permits.held.size} of ${limit} in use`,
        retry_at: Time.fromMicros(retryAt(permits, lease, now))
      })
    }
    const lease_id = leaseId()
    const expires_at = now + lease
    const own = permits
    own.held.set(lease_id, expires_at)
    return Either.right({
      lease_id,
      expires_at: Time.fromMicros(expires_at),
      release: Effect.sync(() => {
        own.held.delete(lease_id)
        if (own.held.size === 0 && own.promised.length === 0 && keys.get(key) === own) keys.delete(key)
      })
    })
  })
}

/** Options of a token-bucket rate. */
export interface RateOptions extends Keyed {
  readonly id: string
  /** Calls admitted at once from a full bucket. */
  readonly burst: number
  /** One token comes back every `refill_microseconds`, up to `burst`. */
  readonly refill_microseconds: number
  /** The actions it bounds (default: every action). */
  readonly applies?: (admission: Admission) => boolean
}

/**
 * A token bucket per key: each call takes a token; an empty bucket defers the call at once (`capacity.rate_limited`)
 * with `retry_at` the next token due that no other deferred call was told. A rate holds nothing while the call runs.
 */
export const rate = (options: RateOptions): Capacity => {
  const burst = positive(`capacity ${options.id}: burst`, options.burst)
  const refill = positive(`capacity ${options.id}: refill_microseconds`, options.refill_microseconds)
  const buckets = new Map<string, { tokens: number; at: number; promised: Array<number> }>()
  // A bucket full again and owing no token is as good as absent: swept whenever the keys have doubled since the last.
  let sweepAt = 1024
  const sweep = (now: number) => {
    if (buckets.size < sweepAt) return
    for (const [key, bucket] of buckets) {
      const full = bucket.tokens + (now - bucket.at) / refill >= burst
      if (full && bucket.promised.every((at) => at <= now)) buckets.delete(key)
    }
    sweepAt = Math.max(1024, buckets.size * 2)
  }
  return keyedCapacity(options, (key, now, leaseId): Admitted => {
    sweep(now)
    const bucket = buckets.get(key) ?? { tokens: burst, at: now, promised: [] }
    const tokens = Math.min(burst, bucket.tokens + Math.max(0, now - bucket.at) / refill)
    const promised = bucket.promised
    while (promised.length > 0 && promised[0]! <= now) promised.shift()
    if (tokens < 1) {
      // Each deferred call is told the next token not already told to another.
      const at = now + Math.ceil((1 - tokens + promised.length) * refill)
      promised.push(at)
      buckets.set(key, { tokens, at: now, promised })
      return Either.left({
        code: "capacity.rate_limited",
        detail: `${options.id}: ${burst} per ${burst * refill} µs`,
        retry_at: Time.fromMicros(at)
      })
    }
    buckets.set(key, { tokens: tokens - 1, at: now, promised })
    return Either.right({ lease_id: leaseId(), release: Effect.void })
  })
}
