import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, FastCheck as fc, Fiber, Layer, Option, Runtime, TestClock } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Canonical from "../../core/base/Canonical.ts"
import * as Digest from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import * as Invocation from "../../core/policy/InvocationContext.ts"
import type { AuthorityScope, ExecutionCaller, InvocationContext } from "../../core/policy/InvocationContext.ts"
import * as Origin from "../../core/policy/Origin.ts"
import type { OriginRestriction } from "../../core/policy/Origin.ts"

const alice = Invocation.human("local-chat", ["viewer"])
const agentA = Invocation.agent("agent-a", ["planner"])
const agentB = Invocation.agent("agent-b")
const open: AuthorityScope = {}
const t = (seconds: number) => Time.fromMicros(seconds * 1_000_000)
const everyOrigin = Origin.allowOnly("USER", "SELF", "OTHER_AGENT")

const testLayer = Layer.merge(WebCryptoDigest.layer, IdGenerator.layerSeeded("origin"))

const required = (context: InvocationContext) => [...context.origins]

describe("InvocationContext: the delegation table", () => {
  it("ingress factories set one category each", () => {
    assert.deepStrictEqual(required(Invocation.user(alice, agentA, "exec-a", open)), ["USER"])
    assert.deepStrictEqual(required(Invocation.autonomous(agentA, "exec-a", open)), ["SELF"])
    assert.deepStrictEqual(required(Invocation.otherAgent(agentB, agentA, "exec-a", open)), ["OTHER_AGENT"])
  })

  it("USER, local nested work: USER, even on another executor principal", () => {
    const root = Invocation.user(alice, agentA, "exec-a", open)
    const nested = Invocation.delegateTo(root, agentA, "exec-a2", open)
    assert.deepStrictEqual(required(nested), ["USER"])
    assert.strictEqual(nested.human?.id, "local-chat")
    assert.strictEqual(nested.calling_agent, undefined)
    assert.strictEqual(nested.executor_id, "exec-a2")
  })

  it("USER, agent A delegates to B: USER and OTHER_AGENT, sender derived from the context", () => {
    const atB = Invocation.delegateTo(Invocation.user(alice, agentA, "exec-a", open), agentB, "exec-b", open)
    assert.deepStrictEqual(required(atB), ["OTHER_AGENT", "USER"])
    assert.strictEqual(atB.executing_agent.id, "agent-b")
    assert.strictEqual(atB.calling_agent?.id, "agent-a")
    assert.strictEqual(atB.human?.id, "local-chat")
    // Each category alone is not enough: the destination must allow both at once.
    assert.isFalse(Origin.permits(Origin.allowOnly("USER"), atB.origins))
    assert.isFalse(Origin.permits(Origin.allowOnly("OTHER_AGENT"), atB.origins))
    assert.isTrue(Origin.permits(Origin.allowOnly("USER", "OTHER_AGENT"), atB.origins))
  })

  it("autonomous A delegates to B: OTHER_AGENT only (SELF never travels)", () => {
    const atB = Invocation.delegateTo(Invocation.autonomous(agentA, "exec-a", open), agentB, "exec-b", open)
    assert.deepStrictEqual(required(atB), ["OTHER_AGENT"])
    assert.strictEqual(atB.calling_agent?.id, "agent-a")
    assert.strictEqual(atB.human, undefined)
  })

  it("forwarded A -> B -> A: OTHER_AGENT remains, never SELF", () => {
    const selfRoot = Invocation.autonomous(agentA, "exec-a", open)
    const back = Invocation.delegateTo(Invocation.delegateTo(selfRoot, agentB, "exec-b", open), agentA, "exec-a", open)
    assert.deepStrictEqual(required(back), ["OTHER_AGENT"])
    assert.strictEqual(back.calling_agent?.id, "agent-b")
    const userRoot = Invocation.user(alice, agentA, "exec-a", open)
    const userBack = Invocation.delegateTo(
      Invocation.delegateTo(userRoot, agentB, "exec-b", open),
      agentA,
      "exec-a",
      open
    )
    assert.deepStrictEqual(required(userBack), ["OTHER_AGENT", "USER"])
  })

  it("B's own independent initiative: a new autonomous context, SELF", () => {
    const delegated = Invocation.delegateTo(Invocation.user(alice, agentA, "exec-a", open), agentB, "exec-b", open)
    const own = Invocation.autonomous(agentB, "exec-b", open)
    assert.deepStrictEqual(required(own), ["SELF"])
    assert.strictEqual(own.calling_agent, undefined)
    // Nesting within B keeps whatever B was asked under.
    assert.deepStrictEqual(required(Invocation.delegateTo(delegated, agentB, "exec-b", open)), ["OTHER_AGENT", "USER"])
    assert.deepStrictEqual(required(Invocation.delegateTo(own, agentB, "exec-b", open)), ["SELF"])
  })

  it.effect("an unknown context grants nothing and stays unknown when delegated", () =>
    Effect.gen(function*() {
      const unknown = yield* Invocation.unknown("exec-a")
      assert.deepStrictEqual(required(unknown), [])
      const onward = Invocation.delegateTo(unknown, agentB, "exec-b", open)
      assert.strictEqual(onward._tag, "unknown")
      assert.deepStrictEqual(required(onward), [])
      assert.strictEqual(onward.partition_id, unknown.partition_id)
    }).pipe(Effect.provide(testLayer)))

  it("contexts are frozen, built only by the factories, and validate their inputs", () => {
    const context = Invocation.user(alice, agentA, "exec-a", open)
    assert.isTrue(Object.isFrozen(context) && Object.isFrozen(context.origins))
    assert.isTrue(Object.isFrozen(context.executing_agent) && Object.isFrozen(context.executing_agent.roles))
    assert.throws(() => {
      ;(context as { origins: unknown }).origins = ["SELF"]
    })
    const Forge = Invocation.EstablishedInvocation as unknown as new(key: symbol, fields: object) => unknown
    assert.throws(() => new Forge(Symbol("writ/InvocationContext.trusted"), {}), TypeError)
    assert.throws(() => Invocation.user(alice, agentA, "  ", open))
    assert.throws(() => Invocation.autonomous(Invocation.agent(""), "exec-a", open))
    assert.isFalse(Invocation.isInvocationContext({ ...context }))
  })
})

const caller = fc.constantFrom<ExecutionCaller>("USER", "SELF", "OTHER_AGENT")
const restriction: fc.Arbitrary<OriginRestriction> = fc.option(
  fc.subarray<ExecutionCaller>(["USER", "SELF", "OTHER_AGENT"]),
  { nil: undefined }
)
const requirement = fc.subarray<ExecutionCaller>(["USER", "SELF", "OTHER_AGENT"])

describe("Origin restrictions", () => {
  it.prop(
    "the intersection allows a category exactly when every source does (so it never adds one)",
    [fc.array(restriction, { maxLength: 5 }), caller],
    ([sources, origin]) => {
      const merged = Origin.intersectRestrictions(...sources)
      assert.strictEqual(
        Origin.permits(merged, [origin]),
        sources.every((source) => Origin.permits(source, [origin]))
      )
      for (const source of sources) {
        if (source !== undefined && merged !== undefined) {
          for (const allowed of merged) assert.include(source, allowed)
        }
      }
    }
  )

  it.prop("absent is the identity, and intersection commutes", [restriction, restriction], ([a, b]) => {
    assert.deepStrictEqual(Origin.intersectRestrictions(a, undefined), Origin.intersectRestrictions(a))
    assert.deepStrictEqual(Origin.intersectRestrictions(undefined, a), Origin.intersectRestrictions(a))
    assert.deepStrictEqual(Origin.intersectRestrictions(a, b), Origin.intersectRestrictions(b, a))
    assert.strictEqual(Origin.intersectRestrictions(undefined, undefined), undefined)
    assert.isTrue(Origin.permits(undefined, []))
  })

  it.prop("empty denies everything, whatever it meets", [fc.array(restriction), requirement], ([sources, req]) => {
    const merged = Origin.intersectRestrictions(...sources, Origin.allowOnly())
    assert.deepStrictEqual(merged, [])
    assert.isFalse(Origin.permits(merged, req))
  })

  it.prop("a restriction must allow all required categories at once", [restriction, requirement], ([r, req]) => {
    const each = req.every((origin) => Origin.permits(r, [origin]))
    assert.strictEqual(Origin.permits(r, req), r === undefined || (req.length > 0 && each))
  })
})

const stamp = fc.integer({ min: 0, max: 4_000_000_000 }).map((s) => Time.fromMicros(s * 1_000_000))
const names = (values: ReadonlyArray<string>) => fc.option(fc.subarray([...values]), { nil: undefined })
const authority: fc.Arbitrary<AuthorityScope> = fc.record(
  {
    expires_at: stamp,
    action_types: fc.subarray(["read", "write", "deploy"]),
    target_systems: fc.subarray(["github", "jira", "mail"])
  },
  { requiredKeys: [] }
)
const probe = fc.record({
  now: stamp,
  action_type: fc.option(fc.constantFrom("read", "write", "deploy"), { nil: undefined }),
  target_system: fc.option(fc.constantFrom("github", "jira", "mail"), { nil: undefined })
})

describe("AuthorityScope", () => {
  it("intersects to the earlier expiry and the common types and systems; absent is unbounded", () => {
    const root: AuthorityScope = { expires_at: t(100), action_types: ["write", "read"] }
    const next: AuthorityScope = { expires_at: t(50), action_types: ["read", "deploy"], target_systems: ["jira"] }
    assert.deepStrictEqual(Invocation.intersectAuthority(root, next), {
      expires_at: t(50),
      action_types: ["read"],
      target_systems: ["jira"]
    })
    assert.deepStrictEqual(Invocation.intersectAuthority({}, {}), {})
    assert.deepStrictEqual(Invocation.intersectAuthority({ expires_at: t(9) }, {}), { expires_at: t(9) })
  })

  it.prop("a later, narrower scope never widens an earlier one", [authority, authority, probe], ([a, b, call]) => {
    const both = Invocation.intersectAuthority(a, b)
    if (Invocation.checkAuthority(both, call) === undefined) {
      assert.isUndefined(Invocation.checkAuthority(a, call))
      assert.isUndefined(Invocation.checkAuthority(b, call))
    }
    const chained = Invocation.delegateTo(Invocation.autonomous(agentA, "exec-a", a), agentB, "exec-b", b)
    assert.deepStrictEqual(chained.authority, both)
    assert.deepStrictEqual(Invocation.intersectAuthority(both, a), both)
  })

  it.prop("names lists intersect as sets", [names(["x", "y", "z"]), names(["x", "y", "z"])], ([a, b]) => {
    const scopeA: AuthorityScope = a === undefined ? {} : { action_types: a }
    const scopeB: AuthorityScope = b === undefined ? {} : { action_types: b }
    const merged = Invocation.intersectAuthority(scopeA, scopeB).action_types
    if (a === undefined || b === undefined) assert.deepStrictEqual(merged, (a ?? b)?.slice().sort())
    else assert.deepStrictEqual(merged, a.filter((x) => b.includes(x)).sort())
  })
})

describe("checkOrigin", () => {
  const userAtA = Invocation.user(alice, agentA, "exec-a", {
    expires_at: t(60),
    action_types: ["read"],
    target_systems: ["github"]
  })
  const call = {
    restriction: Origin.allowOnly("USER"),
    boundAgent: agentA,
    principal: { id: "exec-a" },
    now: t(10),
    action_type: "read",
    target_system: "github"
  }
  const code = (check: Origin.OriginCheck) => check.code

  it.effect("reaches every reason code", () =>
    Effect.gen(function*() {
      const unknown = yield* Invocation.unknown("exec-a")
      assert.strictEqual(code(Origin.checkOrigin(userAtA, call)), "origin.allowed")
      assert.strictEqual(code(Origin.checkOrigin(unknown, { ...call, restriction: everyOrigin })), "origin.unknown")
      assert.strictEqual(code(Origin.checkOrigin(undefined, call)), "origin.unknown")
      assert.strictEqual(code(Origin.checkOrigin(userAtA, { ...call, boundAgent: agentB })), "origin.agent_mismatch")
      assert.strictEqual(code(Origin.checkOrigin(userAtA, { ...call, boundAgent: undefined })), "origin.agent_mismatch")
      assert.strictEqual(
        code(Origin.checkOrigin(userAtA, { ...call, principal: { id: "exec-z" } })),
        "origin.principal_mismatch"
      )
      assert.strictEqual(
        code(Origin.checkOrigin(userAtA, { ...call, restriction: Origin.allowOnly("SELF") })),
        "origin.not_allowed"
      )
      assert.strictEqual(code(Origin.checkOrigin(userAtA, { ...call, restriction: [] })), "origin.not_allowed")
      assert.strictEqual(code(Origin.checkOrigin(userAtA, { ...call, now: t(60) })), "authority.expired")
      assert.strictEqual(code(Origin.checkOrigin(userAtA, { ...call, action_type: "write" })), "authority.action_type")
      assert.strictEqual(
        code(Origin.checkOrigin(userAtA, { ...call, action_type: undefined })),
        "authority.action_type"
      )
      assert.strictEqual(
        code(Origin.checkOrigin(userAtA, { ...call, target_system: "jira" })),
        "authority.target_system"
      )
    }).pipe(Effect.provide(testLayer)))

  it.effect("an absent restriction adds none, for any context; a structural forgery is unknown", () =>
    Effect.gen(function*() {
      const unknown = yield* Invocation.unknown("exec-a")
      for (const context of [unknown, undefined, userAtA]) {
        const check = Origin.checkOrigin(context, { ...call, restriction: undefined, boundAgent: agentB })
        assert.strictEqual(check._tag === "origin_allowed" && check.code, "origin.unrestricted")
      }
      const forged = { ...userAtA } as unknown as InvocationContext
      assert.strictEqual(code(Origin.checkOrigin(forged, call)), "origin.unknown")
    }).pipe(Effect.provide(testLayer)))

  it("a delegated USER request needs USER and OTHER_AGENT declared at the destination", () => {
    const atB = Invocation.delegateTo(userAtA, agentB, "exec-b", {})
    const atBCall = { ...call, boundAgent: agentB, principal: { id: "exec-b" } }
    assert.strictEqual(code(Origin.checkOrigin(atB, atBCall)), "origin.not_allowed")
    const allowed = Origin.checkOrigin(atB, { ...atBCall, restriction: Origin.allowOnly("OTHER_AGENT", "USER") })
    assert.strictEqual(allowed._tag === "origin_allowed" && allowed.code, "origin.allowed")
    assert.deepStrictEqual(allowed._tag === "origin_allowed" && [...allowed.required], ["OTHER_AGENT", "USER"])
  })

  it.effect("authorize checks the current invocation at the Clock's now", () =>
    Effect.gen(function*() {
      const { now: _, ...options } = call
      assert.strictEqual((yield* Origin.authorize(options)).code, "origin.unknown")
      yield* TestClock.adjust("59 seconds")
      assert.strictEqual((yield* Invocation.withInvocation(Origin.authorize(options), userAtA)).code, "origin.allowed")
      yield* TestClock.adjust("1 second")
      assert.strictEqual(
        (yield* Invocation.withInvocation(Origin.authorize(options), userAtA)).code,
        "authority.expired"
      )
    }))
})

describe("propagation", () => {
  const ctxA = Invocation.user(alice, agentA, "exec-a", open)
  const ctxB = Invocation.autonomous(agentB, "exec-b", open)
  const read = Effect.map(Invocation.currentInvocation, Option.getOrUndefined)

  it.effect("survives nested effects and forked children, and ends with its region", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* read, undefined)
      const seen = yield* Effect.gen(function*() {
        const nested = yield* Effect.flatMap(Effect.succeed(1), () => Effect.suspend(() => read))
        const forked = yield* Effect.fork(Effect.zipRight(Effect.yieldNow(), read)).pipe(Effect.flatMap(Fiber.join))
        const grandchild = yield* Effect.fork(Effect.fork(read).pipe(Effect.flatMap(Fiber.join))).pipe(
          Effect.flatMap(Fiber.join)
        )
        const parallel = yield* Effect.all([read, read], { concurrency: "unbounded" })
        return [nested, forked, grandchild, ...parallel]
      }).pipe(Invocation.withInvocation(ctxA))
      for (const context of seen) assert.strictEqual(context, ctxA)
      assert.strictEqual(yield* read, undefined)
    }))

  it.effect("fibers started outside do not inherit it", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const before = yield* Effect.forkDaemon(Effect.zipRight(Deferred.await(gate), read))
      const outside = yield* Effect.gen(function*() {
        yield* Deferred.succeed(gate, undefined)
        const fresh = Runtime.runFork(Runtime.defaultRuntime)(read)
        return yield* Fiber.join(fresh)
      }).pipe(Invocation.withInvocation(ctxA))
      assert.strictEqual(outside, undefined)
      assert.strictEqual(yield* Fiber.join(before), undefined)
    }))

  it.effect("a running invocation keeps its own context whatever unrelated callers do", () =>
    Effect.gen(function*() {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const running = yield* Effect.fork(
        Invocation.withInvocation(
          Effect.zipRight(
            Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)),
            Effect.all([read, read])
          ),
          ctxA
        )
      )
      yield* Deferred.await(started)
      // An unrelated caller, inside its own invocation, releases the gate and waits for the running one.
      const [seen, theirs] = yield* Effect.gen(function*() {
        yield* Deferred.succeed(gate, undefined)
        const seen = yield* Fiber.join(running)
        return [seen, yield* read] as const
      }).pipe(Invocation.withInvocation(ctxB))
      assert.deepStrictEqual(seen, [ctxA, ctxA])
      assert.strictEqual(theirs, ctxB)
    }))

  it.effect("a child's context never flows back into its parent on join", () =>
    Effect.gen(function*() {
      // Forked inside A's region, joined after it ended: the parent stays outside any invocation.
      const child = yield* Invocation.withInvocation(Effect.fork(Effect.zipRight(Effect.yieldNow(), read)), ctxA)
      assert.strictEqual(yield* Fiber.join(child), ctxA)
      assert.strictEqual(yield* read, undefined)
      // A child that switches for its own sub-work leaves the parent's context alone.
      const inner = yield* Effect.gen(function*() {
        const sub = yield* Effect.fork(Invocation.withInvocation(read, ctxB))
        assert.strictEqual(yield* Fiber.join(sub), ctxB)
        return yield* read
      }).pipe(Invocation.withInvocation(ctxA))
      assert.strictEqual(inner, ctxA)
    }))
})

describe("idempotency partition", () => {
  const digest = (context: InvocationContext, target?: string) => Origin.partitionDigest(context, { target })

  it("is the canonical caller object: executor, agent, sorted origins, every subject with sorted roles", () => {
    const atB = Invocation.delegateTo(
      Invocation.user(Invocation.human("local-chat", ["viewer", "admin"]), agentA, "exec-a", open),
      Invocation.agent("agent-b", ["z", "a", "z"]),
      "exec-b",
      open
    )
    const text = Canonical.stringify(Origin.idempotencyPartition(atB, { target: "github:writ/writ" }))
    assert.deepStrictEqual(
      text,
      Canonical.stringify({
        calling_agent: { id: "agent-a", kind: "agent", roles: ["planner"] },
        executing_agent: { id: "agent-b", kind: "agent", roles: ["a", "z"] },
        executor_id: "exec-b",
        human: { id: "local-chat", kind: "human", roles: ["admin", "viewer"] },
        origins: ["OTHER_AGENT", "USER"],
        target: "github:writ/writ"
      })
    )
  })

  it.effect("the same caller under a fresh context gets the same digest", () =>
    Effect.gen(function*() {
      const first = Invocation.user(Invocation.human("local-chat", ["a", "b"]), agentA, "exec-a", open)
      const retry = Invocation.user(Invocation.human("local-chat", ["b", "a"]), agentA, "exec-a", { expires_at: t(5) })
      assert.notStrictEqual(first, retry)
      assert.strictEqual(yield* digest(first, "repo:x"), yield* digest(retry, "repo:x"))
      assert.strictEqual(yield* digest(first), yield* digest(retry))
    }).pipe(Effect.provide(testLayer)))

  it.effect("any differing caller field gives a different digest", () =>
    Effect.gen(function*() {
      const base = Invocation.user(alice, agentA, "exec-a", open)
      const variants: ReadonlyArray<readonly [string, InvocationContext, string | undefined]> = [
        ["base", base, "repo:x"],
        ["agent", Invocation.user(alice, Invocation.agent("agent-c", ["planner"]), "exec-a", open), "repo:x"],
        ["executor", Invocation.user(alice, agentA, "exec-z", open), "repo:x"],
        ["human role", Invocation.user(Invocation.human("local-chat", ["owner"]), agentA, "exec-a", open), "repo:x"],
        ["agent role", Invocation.user(alice, Invocation.agent("agent-a"), "exec-a", open), "repo:x"],
        ["human", Invocation.user(Invocation.human("other-chat", ["viewer"]), agentA, "exec-a", open), "repo:x"],
        ["origin SELF", Invocation.autonomous(agentA, "exec-a", open), "repo:x"],
        ["origin OTHER_AGENT", Invocation.otherAgent(agentB, agentA, "exec-a", open), "repo:x"],
        [
          "calling agent role",
          Invocation.otherAgent(Invocation.agent("agent-b", ["x"]), agentA, "exec-a", open),
          "repo:x"
        ],
        ["target", base, "repo:y"],
        ["no target", base, undefined]
      ]
      const digests = yield* Effect.forEach(variants, ([, context, target]) => digest(context, target))
      assert.strictEqual(new Set(digests).size, variants.length, variants.map(([name]) => name).join(", "))
      // Origins alone, every subject equal, still separate partitions.
      const partition = Origin.idempotencyPartition(base)
      assert.notStrictEqual(
        yield* Digest.canonical(partition),
        yield* Digest.canonical({ ...partition, origins: ["OTHER_AGENT", "USER"] })
      )
    }).pipe(Effect.provide(testLayer)))

  it.effect("unknown contexts never share a partition", () =>
    Effect.gen(function*() {
      const first = yield* Invocation.unknown("exec-a")
      const second = yield* Invocation.unknown("exec-a")
      assert.notStrictEqual(yield* digest(first, "repo:x"), yield* digest(second, "repo:x"))
      assert.notStrictEqual(yield* digest(first), yield* digest(Invocation.autonomous(agentA, "exec-a", open)))
      assert.strictEqual(Origin.idempotencyPartition(first).unknown_partition, first.partition_id)
      const forged = { ...Invocation.autonomous(agentA, "exec-a", open) } as unknown as InvocationContext
      assert.throws(() => Origin.idempotencyPartition(forged), TypeError)
    }).pipe(Effect.provide(testLayer)))
})
