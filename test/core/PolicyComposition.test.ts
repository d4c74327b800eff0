import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import fc from "fast-check"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionRegistry from "../../core/action/ActionRegistry.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import * as Absence from "../../core/base/Absence.ts"
import type { Digest } from "../../core/base/Digest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { ActionExecutor, layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import * as ExecutionOutcome from "../../core/execution/ExecutionOutcome.ts"
import { ExecutionRequest } from "../../core/execution/ExecutionRequest.ts"
import { EphemeralOperation } from "../../core/execution/ExecutionScope.ts"
import * as Ingress from "../../core/execution/Ingress.ts"
import * as Origin from "../../core/policy/Origin.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import type { PermissionPolicyEncoded } from "../../core/policy/PermissionPolicy.ts"
import * as PolicyComposition from "../../core/policy/PolicyComposition.ts"
import type { PolicyInput } from "../../core/policy/PolicyEvaluator.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import * as Testing from "../../runtime/Testing.ts"

const RUNS = 100
const SLOW = 120_000

const declare = (input: Record<string, unknown>) =>
  Either.getOrThrow(PermissionPolicy.decode({ policy_id: "parent", version: "1", ...input }))
const child = (input: Record<string, unknown>) =>
  Either.getOrThrow(PolicyComposition.decodeChild({ policy_id: "child", version: "1", ...input }))
const childError = (input: Record<string, unknown>) => {
  const result = PolicyComposition.decodeChild({ policy_id: "child", version: "1", ...input })
  return Either.isLeft(result) ? result.left : undefined
}

const withDigest = <A, E>(effect: Effect.Effect<A, E, Digest>) => Effect.provide(effect, WebCryptoDigest.layer)
const attempt = <A, E>(effect: Effect.Effect<A, E, Digest>) => Effect.runPromise(Effect.either(withDigest(effect)))

const call = (action: string, args: Record<string, unknown> = {}, extra: Partial<PolicyInput> = {}): PolicyInput => ({
  action,
  effects: [],
  arguments: args,
  principal: "alice",
  now: 0,
  ...extra
})
const shell = (command: string) => call("shell.exec", { command })
const verdict = (snapshot: PolicySnapshot.PolicySnapshot) => {
  const decide = PolicyComposition.decider(snapshot)
  return (input: PolicyInput) => {
    const v = decide(input)
    return v.disposition === "allow" ? "allow" : `${v.disposition} ${v.code} @${v.gate_id}`
  }
}

describe("child declarations", () => {
  it("a literal \"inherit\" is not a preset: rejected wherever a value is expected, with its path", () => {
    const cases: ReadonlyArray<[Record<string, unknown>, string]> = [
      [{ mode: "inherit" }, "$.mode"],
      [{ principal_scope: "inherit" }, "$.principal_scope"],
      [{ principal_scope: ["team-*", "inherit"] }, "$.principal_scope.1"],
      [{ tenant_scope: [" Inherit "] }, "$.tenant_scope.0"],
      [{ approver_class: "inherit" }, "$.approver_class"],
      [{ rules: "inherit" }, "$.rules"],
      [{ rules: [{ kind: "action", effect: "allow", action_patterns: ["inherit"] }] }, "$.rules.0.action_patterns.0"],
      [{ deny: { "shell.exec": ["rm", "inherit"] } }, "$.deny.shell.exec.1"]
    ]
    for (const [input, path] of cases) {
      const error = childError(input)
      assert.strictEqual(error?._tag, "PolicyValidationError", path)
      assert.strictEqual(error?.path, path)
      assert.include(error?.message, "is not a preset")
    }
    assert.include(childError({ rules: "inherit" })?.message, "omit the field to inherit it")
    assert.include(childError({ mode: "inherit" })?.message, "never inherited")
    // A string merely containing the word is a value like any other.
    assert.deepStrictEqual(child({ principal_scope: ["inheritors"] }).principal_scope, ["inheritors"])
  })

  it("an omitted inheritable field is Unset, null is kept, and the wire form omits Unset", () => {
    const bare = child({})
    for (const field of PolicyComposition.inheritableFields) assert.isTrue(Absence.isUnset(bare[field]), field)
    assert.deepStrictEqual(PolicyComposition.encodeChild(bare), {
      policy_id: "child",
      version: "1",
      mode: "rules",
      provenance: {}
    })
    const explicit = child({ approver_class: null, rules: [], principal_scope: ["alice"] })
    assert.strictEqual(explicit.approver_class, null)
    assert.deepStrictEqual(explicit.rules, [])
    assert.isTrue(Absence.isUnset(explicit.tenant_scope))
    assert.deepStrictEqual(PolicyComposition.encodeChild(explicit), {
      policy_id: "child",
      version: "1",
      principal_scope: ["alice"],
      mode: "rules",
      approver_class: null,
      rules: [],
      provenance: {}
    })
    assert.strictEqual(childError({ colour: "blue" })?.path, "$.colour")
  })

  it("property: \"inherit\" in any inheritable field of any child fails at that field", () =>
    fc.assert(
      fc.property(Testing.childPolicy(), fc.constantFrom(...PolicyComposition.inheritableFields), (wire, field) => {
        const result = PolicyComposition.decodeChild({ ...wire, [field]: "inherit" })
        assert.isTrue(Either.isLeft(result))
        if (Either.isLeft(result)) assert.strictEqual(result.left.path, `$.${field}`)
      }),
      { numRuns: RUNS }
    ))
})

describe("resolve", () => {
  it("law: an Unset field resolves to exactly the parent's, a set field stays the child's, and no Unset is left", () =>
    fc.assert(
      fc.property(Testing.policy(), Testing.childPolicy(), (parent, wire) => {
        const decoded = Either.getOrThrow(PolicyComposition.decodeChild(wire))
        const resolved = Either.getOrThrow(PolicyComposition.resolve(parent, decoded))
        for (const field of ["principal_scope", "tenant_scope", "rules"] as const) {
          if (wire[field] === undefined) assert.strictEqual(resolved[field], parent[field], field)
          else assert.deepStrictEqual(resolved[field], decoded[field], field)
        }
        const approver = wire.approver_class
        assert.strictEqual(
          resolved.approver_class,
          approver === undefined ? parent.approver_class : approver === null ? undefined : approver
        )
        assert.isFalse("approver_class" in resolved && resolved.approver_class === undefined)
        assert.isTrue(Either.isRight(Absence.strictSnapshot(resolved)))
        // The resolved declaration is a valid PermissionPolicy again.
        assert.isTrue(Either.isRight(PermissionPolicy.decode(PermissionPolicy.encode(resolved))))
      }),
      { numRuns: RUNS }
    ))

  it("a strict snapshot refuses a parent that still holds an Unset, naming the path", () => {
    const parent = declare({ rules: [{ kind: "action", effect: "allow", action_patterns: ["notes.read"] }] })
    // A parent built by hand around the Schema, as a careless caller might.
    const unresolved = {
      ...parent,
      rules: [{ ...parent.rules[0]!, operations: [Absence.Unset] }]
    } as unknown as PermissionPolicy.PermissionPolicy
    const result = PolicyComposition.resolve(unresolved, child({}))
    assert.isTrue(Either.isLeft(result))
    if (Either.isLeft(result)) {
      assert.strictEqual(result.left._tag, "UnresolvedFieldError")
      assert.strictEqual(result.left.path, "$.rules[0].operations[0]")
    }
  })
})

describe("compose", () => {
  it.effect("one declaration, one snapshot, one digest: parent rules in gate parent, child rules in gate child", () =>
    withDigest(Effect.gen(function*() {
      const parent = declare({ mode: "safe", approver_class: "maintainer" })
      const narrower = child({ mode: "safe", deny: { "notes.write": ["*"] }, principal_scope: ["alice"] })
      const composed = yield* PolicyComposition.compose(parent, narrower)
      const { declaration, snapshot } = composed
      assert.deepStrictEqual(
        snapshot.gate_bindings.map((g) => [g.gate_id, g.level, g.order, g.rule_ids]),
        [
          ["parent", "hard", 0, ["parent.rule-0", "parent.rule-1", "parent.rule-2"]],
          ["child", "hard", 1, ["child.rule-0", "child.rule-1", "child.rule-2", "child.rule-3"]]
        ]
      )
      assert.deepStrictEqual(snapshot.compiled_rules.map((r) => r.provenance.split(" ")[0]), [
        "parent:parent@1",
        "parent:parent@1",
        "parent:parent@1",
        "child:child@1",
        "child:child@1",
        "child:child@1",
        "child:child@1"
      ])
      assert.strictEqual(snapshot.compiled_rules[0]!.provenance, "parent:parent@1 (preset:safe)")
      assert.deepStrictEqual([snapshot.policy_id, snapshot.version], ["child", "1"])
      assert.deepStrictEqual(snapshot.principal_scope, ["alice"])
      assert.deepStrictEqual(snapshot.tenant_scope, ["*"])
      assert.strictEqual(snapshot.provenance.source, "composed parent:parent@1 + child:child@1")
      assert.deepStrictEqual(composed.widenings, [])
      // The composed declaration is an ordinary declaration: recompiling it gives the same digest.
      assert.strictEqual((yield* PolicySnapshot.compile(declaration)).digest, snapshot.digest)
      assert.strictEqual(yield* PolicySnapshot.recomputeDigest(snapshot), snapshot.digest)
      assert.strictEqual((yield* PolicyComposition.compose(parent, narrower)).snapshot.digest, snapshot.digest)
      const decide = verdict(snapshot)
      assert.strictEqual(decide(call("files.write")), "allow")
      assert.strictEqual(decide(call("notes.write")), "deny policy.denied @child")
      assert.strictEqual(decide(shell("rm -rf /")), "deny policy.denied @parent")
      assert.strictEqual(decide(shell("ls")), "escalate approval.required @parent")
      assert.strictEqual(decide(call("files.write", {}, { principal: "bob" })), "deny policy.out_of_scope @parent")
    })))

  it.effect("Unset inherits: scopes, approver class and rules come from the captured parent", () =>
    withDigest(Effect.gen(function*() {
      const parent = declare({
        principal_scope: ["team-*"],
        approver_class: "ops",
        rules: [
          { kind: "action", effect: "allow", action_patterns: ["*"] },
          { kind: "approval", effect: "require_approval", action_patterns: ["notes.delete"] }
        ]
      })
      const { child: alone, snapshot } = yield* PolicyComposition.compose(parent, child({}))
      assert.deepStrictEqual(alone.principal_scope, ["team-*"])
      assert.deepStrictEqual(snapshot.principal_scope, ["team-*"])
      const approval = alone.compiled_rules.find((r) => r.kind === "approval")
      assert.isTrue(approval?.kind === "approval" && approval.approver_class === "ops")
      const decide = verdict(snapshot)
      assert.strictEqual(decide(call("notes.read", {}, { principal: "team-a" })), "allow")
      assert.strictEqual(
        decide(call("notes.delete", {}, { principal: "team-a" })),
        "escalate approval.required @parent"
      )
      // null drops the inherited approver: the child's own escalations now deny.
      const dropped = yield* PolicyComposition.compose(parent, child({ approver_class: null }))
      assert.strictEqual(
        verdict(dropped.child)(call("notes.delete", {}, { principal: "team-a" })),
        "deny approval.no_authority @policy"
      )
    })))

  it.effect("a widening child fails loudly with the path of what widens", () =>
    withDigest(Effect.gen(function*() {
      const error = (parent: PermissionPolicy.PermissionPolicy, c: PolicyComposition.ChildPolicy) =>
        Effect.flip(PolicyComposition.compose(parent, c))
      const readOnly = declare({ mode: "read_only" })
      const everything = yield* error(readOnly, child({ mode: "allow_all" }))
      assert.strictEqual(everything._tag, "PolicyValidationError")
      assert.strictEqual(everything._tag === "PolicyValidationError" && everything.path, "$.mode")
      assert.include(everything.message, "widens the parent parent@1")
      const map = yield* error(readOnly, child({ mode: "read_only", allow: { "calc.add": ["*"] } }))
      assert.strictEqual(map._tag === "PolicyValidationError" && map.path, "$.allow.calc.add")
      const scoped = declare({ mode: "allow_all", principal_scope: ["team-*"], tenant_scope: ["acme"] })
      const wider = yield* error(scoped, child({ mode: "allow_all", principal_scope: ["team-a", "*"] }))
      assert.strictEqual(wider._tag === "PolicyValidationError" && wider.path, "$.principal_scope.1")
      const tenant = yield* error(scoped, child({ mode: "allow_all", tenant_scope: ["acme", "globex"] }))
      assert.strictEqual(tenant._tag === "PolicyValidationError" && tenant.path, "$.tenant_scope.1")
      // Dropping the parent's validity window widens it in time.
      const windowed = declare({
        mode: "allow_all",
        rules: [{ kind: "expiry", effect: "allow", expires_at: "2027-01-01T00:00:00.000000Z" }]
      })
      const forever = yield* error(windowed, child({ mode: "allow_all", rules: [] }))
      assert.include(forever.message, "policy.expired")
      // Narrowing is fine: a narrower scope, fewer allows, more denies, the same window.
      const narrowed = yield* PolicyComposition.compose(
        scoped,
        child({ mode: "read_only", principal_scope: ["team-a"], deny: { "notes.read": ["/work/secrets/*"] } })
      )
      assert.deepStrictEqual(narrowed.snapshot.principal_scope, ["team-a"])
      assert.deepStrictEqual(narrowed.snapshot.tenant_scope, ["acme"])
    })))

  it.effect("with a named authority the child widens, recorded in provenance; the parent's explicit denies still win", () =>
    withDigest(Effect.gen(function*() {
      const readOnly = declare({ mode: "read_only", deny: { "calc.div": ["*"] }, principal_scope: ["team-*"] })
      const wide = child({ mode: "allow_all", principal_scope: ["*"] })
      const composed = yield* PolicyComposition.compose(readOnly, wide, { widening: { authority: "security-review" } })
      assert.strictEqual(
        composed.snapshot.provenance.source,
        "widened by security-review: composed parent:parent@1 + child:child@1"
      )
      assert.deepStrictEqual(composed.widenings.map((w) => w.path).slice(0, 2), ["$.principal_scope.0", "$.mode"])
      const granted = composed.snapshot.compiled_rules.filter((r) => r.rule_id.startsWith("widened."))
      assert.deepStrictEqual(granted.map((r) => [r.rule_id, r.provenance]), [[
        "widened.rule-0",
        "widened by security-review: child:child@1 (preset:allow_all)"
      ]])
      assert.deepStrictEqual(composed.snapshot.principal_scope, ["*"])
      const decide = verdict(composed.snapshot)
      // What the parent refused only by default (no rule matched) is now allowed ...
      assert.strictEqual(decide(call("calc.add", {}, { principal: "bob" })), "allow")
      // ... what the parent denies explicitly stays denied.
      assert.strictEqual(decide(call("files.write")), "deny policy.denied @parent")
      assert.strictEqual(decide(shell("ls")), "deny policy.denied @parent")
      assert.strictEqual(decide(call("calc.div")), "deny policy.denied @parent")
      // An authority that is not an identifier is refused.
      const blank = yield* Effect.flip(PolicyComposition.compose(readOnly, wide, { widening: { authority: "  " } }))
      assert.strictEqual(blank._tag === "PolicyValidationError" && blank.path, "widening.authority")
    })))

  it.effect("mcp, secret and environment grants compose the same way: a child widening them needs an authority", () =>
    withDigest(Effect.gen(function*() {
      const rules = [
        { kind: "mcp", effect: "allow", server_patterns: ["github"], tool_patterns: ["search"], resource_patterns: [] },
        { kind: "mcp", effect: "deny", server_patterns: ["*"], tool_patterns: ["delete_*"], resource_patterns: [] },
        { kind: "secret_exposure", effect: "allow", secret_namespaces: ["aws/*"], exposure: "reference_only" },
        { kind: "environment", effect: "allow", variable_patterns: ["PATH"], exposure: "read" }
      ]
      const parent = declare({ mode: "allow_all", rules })
      const withRule = (rule: Record<string, unknown>) => child({ mode: "allow_all", rules: [...rules, rule] })
      const mcpAll = { kind: "mcp", effect: "allow", server_patterns: ["*"], tool_patterns: [], resource_patterns: [] }
      const inject = { kind: "secret_exposure", effect: "allow", secret_namespaces: ["aws/*"], exposure: "inject" }
      const anyVariable = { kind: "environment", effect: "allow", variable_patterns: ["*"], exposure: "read" }
      const widening: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [mcpAll, "needing mcp"],
        [inject, "needing secret aws/"],
        [anyVariable, "needing environment"]
      ]
      for (const [rule, needing] of widening) {
        const error = yield* Effect.flip(PolicyComposition.compose(parent, withRule(rule)))
        assert.include(error.message, "widens the parent parent@1")
        assert.include(error.message, needing)
      }
      const composed = yield* PolicyComposition.compose(
        parent,
        child({ mode: "allow_all", rules: [mcpAll, inject, anyVariable] }),
        { widening: { authority: "security-review" } }
      )
      const decide = verdict(composed.snapshot)
      const tool = (server: string, name: string) => call("x.y", {}, { mcp: { server, tool: name, resources: [] } })
      const secret = { secrets: [{ namespace: "aws/key", exposure: "inject" as const }] }
      assert.strictEqual(decide(tool("jira", "search")), "allow")
      assert.strictEqual(decide(tool("github", "delete_repo")), "deny mcp.denied @parent")
      assert.strictEqual(decide(call("x.y", {}, secret)), "allow")
      assert.strictEqual(decide(call("x.y", {}, { environment: [{ variable: "HOME", exposure: "read" }] })), "allow")
      // Without an authority the child only narrows, and the parent's grants still bound every call.
      const noGithub = {
        kind: "mcp",
        effect: "deny",
        server_patterns: ["github"],
        tool_patterns: [],
        resource_patterns: []
      }
      const narrowed = verdict((yield* PolicyComposition.compose(parent, withRule(noGithub))).snapshot)
      assert.strictEqual(narrowed(tool("github", "search")), "deny mcp.denied @child")
      assert.strictEqual(narrowed(tool("jira", "search")), "deny mcp.not_allowed @parent")
      assert.strictEqual(narrowed(call("x.y", {}, secret)), "deny secret.not_allowed @parent")
    })))

  it.effect("compositions nest: a grandchild composes with a composed parent", () =>
    withDigest(Effect.gen(function*() {
      const root = declare({ mode: "safe", approver_class: "maintainer" })
      const middle = yield* PolicyComposition.compose(root, child({ mode: "safe", deny: { "files.delete": ["*"] } }))
      const leaf = yield* PolicyComposition.compose(
        middle.declaration,
        child({ policy_id: "leaf", deny: { "files.write": ["/etc/*"] } })
      )
      assert.deepStrictEqual(leaf.snapshot.gate_bindings.map((g) => g.gate_id), [
        "parent.parent",
        "parent.child",
        "child"
      ])
      const decide = verdict(leaf.snapshot)
      assert.strictEqual(decide(call("files.delete", { path: "/tmp/x" })), "deny policy.denied @parent.child")
      assert.strictEqual(decide(call("files.write", { path: "/etc/passwd" })), "deny policy.denied @child")
      assert.strictEqual(decide(call("files.write", { path: "/work/a" })), "allow")
      assert.strictEqual(decide(shell("sudo ls")), "deny policy.denied @parent.parent")
    })))

  it.effect("an action no gate covers is denied policy.no_gate_binding, and a child cannot lift that without authority", () =>
    withDigest(Effect.gen(function*() {
      const shellOnly = declare({
        rules: [
          { kind: "action", effect: "allow", action_patterns: ["*"], rule_id: "allow-all" },
          { kind: "action", effect: "deny", action_patterns: ["shell.exec"], operations: ["rm *"], rule_id: "no-rm" }
        ],
        gates: [{ gate_id: "shell", level: "hard", order: 0, tool_ids: ["shell.*"] }]
      })
      const snapshot = yield* PolicySnapshot.compile(shellOnly)
      const decide = PolicyComposition.decider(snapshot)
      const uncovered = decide(call("notes.read"))
      assert.deepStrictEqual(
        [uncovered.disposition, uncovered.code, uncovered.stage, uncovered.gate_id, uncovered.matched_rules],
        ["deny", "policy.no_gate_binding", "guard", undefined, []]
      )
      assert.strictEqual(verdict(snapshot)(shell("ls")), "allow")
      assert.strictEqual(verdict(snapshot)(shell("rm -rf /")), "deny policy.denied @shell")
      // A child whose own gate covers notes.read would allow it: that widens the parent.
      const wide = child({ mode: "allow_all" })
      const refused = yield* Effect.flip(PolicyComposition.compose(shellOnly, wide))
      assert.include(refused.message, "widens the parent parent@1")
      assert.include(refused.message, "policy.no_gate_binding")
    })))
})

/** A child derived from the parent that only narrows it: more denies, maybe a narrower principal scope. */
const narrowing = (parent: PermissionPolicyEncoded) =>
  fc.record({
    extra: fc.dictionary(
      Testing.actionPattern(),
      fc.array(Testing.operationPattern, { minLength: 1, maxLength: 2 }),
      { noNullPrototype: true, maxKeys: 2 }
    ),
    inheritRules: fc.boolean(),
    scope: fc.option(fc.subarray([...(parent.principal_scope ?? ["*"])], { minLength: 1 }), { nil: undefined })
  }).map(({ extra, inheritRules, scope }): Record<string, unknown> => {
    const { approver_class, deny, gates, rules, ...rest } = parent
    const common = {
      ...rest,
      policy_id: "child",
      version: "1",
      ...(approver_class === undefined ? {} : { approver_class }),
      ...(scope === undefined ? {} : { principal_scope: scope })
    }
    if (gates !== undefined) {
      // A gated declaration names every rule, so the extra denies are named rules, bound by the gate that binds all.
      const denies = Object.entries(extra).map(([action, operations], i) => ({
        kind: "action" as const,
        effect: "deny" as const,
        action_patterns: [action],
        operations,
        rule_id: `narrow-${i}`
      }))
      const kept = denies.length === 0 && inheritRules ? {} : { rules: [...(rules ?? []), ...denies] }
      return { ...common, ...kept, gates }
    }
    const merged = { ...deny }
    for (const [key, patterns] of Object.entries(extra)) merged[key] = [...(merged[key] ?? []), ...patterns] as never
    return {
      ...common,
      ...(inheritRules || rules === undefined ? {} : { rules }),
      ...(Object.keys(merged).length === 0 ? {} : { deny: merged })
    }
  })

const pair = fc.oneof(
  fc.tuple(Testing.permissionPolicy(), Testing.childPolicy()).map(([p, c]) =>
    [p, c as Record<string, unknown>] as const
  ),
  Testing.permissionPolicy().chain((p) => narrowing(p).map((c) => [p, c] as const))
)
const requests = fc.array(Testing.policyInput(), { minLength: 20, maxLength: 40 })

const flipExample = {
  wire: { policy_id: "flip", version: "1", allow: { "notes.write": ["*"] } } as PermissionPolicyEncoded,
  rule: { kind: "action", effect: "deny", action_patterns: ["notes.write"] } as PermissionPolicyEncoded["rules"] extends
    ReadonlyArray<infer R> | undefined ? R
    : never,
  inputs: [{ action: "notes.write", effects: [], arguments: {}, principal: "alice", now: 0 }]
}

const EXPLICIT_DENIALS = new Set([
  "policy.denied",
  "policy.expired",
  "filesystem.denied",
  "subprocess.denied",
  "network.denied",
  "mcp.denied",
  "secret.denied",
  "environment.denied",
  "shell.control_operator",
  ...Origin.OriginDenial.literals
])

describe("composition laws", () => {
  it("law: the composition allows exactly what the parent alone and the child alone both allow", async () => {
    const seen = { composed: 0, refused: 0, allowed: 0 }
    await fc.assert(
      fc.asyncProperty(pair, requests, async ([parentWire, childWire], inputs) => {
        const parent = Either.getOrThrow(PermissionPolicy.decode(parentWire))
        const result = await attempt(
          PolicyComposition.compose(parent, Either.getOrThrow(PolicyComposition.decodeChild(childWire)))
        )
        if (Either.isLeft(result)) {
          seen.refused++
          assert.strictEqual(result.left._tag, "PolicyValidationError")
          assert.include(result.left.message, "widens the parent")
          return
        }
        seen.composed++
        const composed = PolicyComposition.decider(result.right.snapshot)
        const byParent = PolicyComposition.decider(result.right.parent)
        const byChild = PolicyComposition.decider(result.right.child)
        for (const input of inputs) {
          const allowed = composed(input).disposition === "allow"
          if (allowed) seen.allowed++
          assert.strictEqual(
            allowed,
            byParent(input).disposition === "allow" && byChild(input).disposition === "allow",
            JSON.stringify(input)
          )
        }
      }),
      { numRuns: RUNS }
    )
    assert.isAbove(seen.composed, RUNS / 4)
    assert.isAbove(seen.refused, 0)
    assert.isAbove(seen.allowed, 0)
  }, SLOW)

  it(
    "law: widened by an authority, the composition still only allows what the child allows, and never what the parent denies explicitly",
    async () => {
      const seen = { explicit: 0, lifted: 0 }
      await fc.assert(
        fc.asyncProperty(
          Testing.policy(),
          Testing.childPolicy(),
          requests,
          async (parent, childWire, inputs) => {
            const composition = await attempt(
              PolicyComposition.compose(parent, Either.getOrThrow(PolicyComposition.decodeChild(childWire)), {
                widening: { authority: "law" }
              })
            )
            const { child: alone, parent: before, snapshot } = Either.getOrThrow(composition)
            const composed = PolicyComposition.decider(snapshot)
            const byParent = PolicyComposition.decider(before)
            const byChild = PolicyComposition.decider(alone)
            for (const input of inputs) {
              const allowed = composed(input).disposition === "allow"
              if (allowed) assert.strictEqual(byChild(input).disposition, "allow")
              const parentVerdict = byParent(input)
              if (parentVerdict.disposition === "deny" && EXPLICIT_DENIALS.has(parentVerdict.code)) {
                seen.explicit++
                assert.isFalse(allowed, `${parentVerdict.code}: ${JSON.stringify(input)}`)
              } else if (allowed && parentVerdict.disposition !== "allow") {
                seen.lifted++
              }
            }
          }
        ),
        { numRuns: RUNS }
      )
      assert.isAbove(seen.explicit, 0)
      assert.isAbove(seen.lifted, 0)
    },
    SLOW
  )

  it("law: adding a deny rule to a policy never turns a deny into an allow", async () => {
    const seen = { flipped: 0 }
    const denyRule = Testing.declaredRule().filter((rule) => "effect" in rule && rule.effect === "deny")
    await fc.assert(
      fc.asyncProperty(Testing.permissionPolicy(), denyRule, requests, async (wire, rule, inputs) => {
        const extended: PermissionPolicyEncoded = {
          ...wire,
          rules: [...(wire.rules ?? []), { ...rule, rule_id: "law.deny", order: 100_000 }],
          ...(wire.gates === undefined ? {} : {
            gates: wire.gates.map((gate) =>
              gate.rule_ids === undefined ? gate : { ...gate, rule_ids: [...gate.rule_ids, "law.deny"] }
            )
          })
        }
        const [before, after] = await Promise.all(
          [wire, extended].map((w) =>
            attempt(PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode(w)))).then(Either.getOrThrow)
          )
        )
        const withoutDeny = PolicyComposition.decider(before!)
        const withDeny = PolicyComposition.decider(after!)
        for (const input of inputs) {
          const allowedBefore = withoutDeny(input).disposition === "allow"
          const allowedAfter = withDeny(input).disposition === "allow"
          if (allowedAfter) assert.isTrue(allowedBefore, JSON.stringify(input))
          if (allowedBefore && !allowedAfter) seen.flipped++
        }
      }),
      // One known flip, so the law is never checked vacuously whatever the generator draws.
      { numRuns: RUNS, examples: [[flipExample.wire, flipExample.rule, flipExample.inputs]] }
    )
    assert.isAbove(seen.flipped, 0)
  }, SLOW)

  // Generated ids are positional and documented so: a gate binding `rule-1` binds whatever rule sits at position 1.
  // Adding a rules-mode entry before it renumbers (here `rule-1` was the deny of notes.write and becomes the allow);
  // a declared rule that must stay bound to one gate gets an explicit rule_id.
  it.effect("a gate binds a generated rule id by position: a map entry added before it renumbers it", () =>
    withDigest(Effect.gen(function*() {
      const gates = [
        { gate_id: "audit", level: "advisory", order: 0 },
        { gate_id: "enforce", level: "hard", order: 1, rule_ids: ["rule-1"] }
      ]
      const before = {
        allow: { "notes.write": ["*"] },
        rules: [{ kind: "action", effect: "deny", action_patterns: ["notes.write"] }],
        gates
      }
      const after = { ...before, deny: { "shell.exec": ["rm"] } }
      const bound = yield* Effect.forEach(
        [before, after],
        (input) =>
          Effect.map(PolicySnapshot.compile(declare(input)), (snapshot) => {
            const enforce = snapshot.gate_bindings.find((g) => g.gate_id === "enforce")!
            return enforce.rule_ids.map((id) => {
              const rule = snapshot.compiled_rules.find((r) => r.rule_id === id)!
              return `${id} ${rule.effect} ${rule.provenance}`
            })
          })
      )
      assert.deepStrictEqual(bound, [["rule-1 deny declared"], ["rule-1 allow rules-mode"]])
    })))

  it.effect("law, by example: with explicit rule ids, adding a deny rule before a gate's rules never turns a deny into an allow", () =>
    withDigest(Effect.gen(function*() {
      const gates = [
        { gate_id: "audit", level: "advisory", order: 0 },
        { gate_id: "enforce", level: "hard", order: 1, rule_ids: ["deny-notes-write"] }
      ]
      const rules = [
        { kind: "action", effect: "allow", action_patterns: ["notes.write"], rule_id: "allow-notes-write" },
        { kind: "action", effect: "deny", action_patterns: ["notes.write"], rule_id: "deny-notes-write" }
      ]
      const before = { rules, gates }
      const after = {
        rules: [
          { kind: "action", effect: "deny", action_patterns: ["shell.exec"], operations: ["rm"], rule_id: "deny-rm" },
          ...rules
        ],
        gates
      }
      const [was, is] = yield* Effect.forEach(
        [before, after],
        (input) => Effect.map(PolicySnapshot.compile(declare(input)), (s) => verdict(s)(call("notes.write")))
      )
      assert.strictEqual(was, "deny policy.denied @enforce")
      assert.strictEqual(is, "deny policy.denied @enforce")
    })))

  it("law: a composition's snapshot is deterministic and its declaration recompiles to the same digest", async () => {
    await fc.assert(
      fc.asyncProperty(Testing.policy(), Testing.childPolicy(), async (parent, childWire) => {
        const c = Either.getOrThrow(PolicyComposition.decodeChild(childWire))
        const options = { widening: { authority: "law" } }
        const [one, two] = await Promise.all([1, 2].map(() => attempt(PolicyComposition.compose(parent, c, options))))
        const first = Either.getOrThrow(one!)
        assert.strictEqual(first.snapshot.digest, Either.getOrThrow(two!).snapshot.digest)
        const again = Either.getOrThrow(await attempt(PolicySnapshot.compile(first.declaration)))
        assert.strictEqual(again.digest, first.snapshot.digest)
        assert.isTrue(Either.isRight(Absence.strictSnapshot(first.declaration)))
      }),
      { numRuns: 50 }
    )
  }, SLOW)
})

let made = 0
const actions = [
  Action.make({
    name: "shell.exec",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => {
      if (command === "make") made++
      return `ran ${command}`
    }
  }),
  Action.make({ name: "notes.write", input: Schema.Struct({}), output: Schema.String, handler: () => "written" }),
  Action.make({ name: "notes.read", input: Schema.Struct({}), output: Schema.String, handler: () => "note" })
]

const executorLayer = layerPolicyGated().pipe(
  Layer.provideMerge(
    Layer.mergeAll(ActionRegistry.layerWith(actions), MemoryPolicySnapshotStore.layer, MemoryApprovalQueue.layer)
  ),
  Layer.provideMerge(Testing.layerTest(11))
)

/** Install and activate a composed snapshot; return a runner of calls pinned to it. */
const installed = (snapshot: PolicySnapshot.PolicySnapshot) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    yield* store.put(snapshot)
    yield* store.activate(snapshot.policy_id, snapshot.version, "ops", Time.fromMicros(0))
    const executor = yield* ActionExecutor
    return (action: string, args: Record<string, unknown> = {}, approval_id?: IdGenerator.Uuid) =>
      Effect.gen(function*() {
        const scope = EphemeralOperation.make({ scope_id: yield* IdGenerator.uuid })
        const context = yield* Ingress.bind({
          execution_scope: scope,
          authenticated_principal: { id: "alice" },
          effect_backend: InProcessBackend.make.ref,
          policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest }
        })
        const request = ExecutionRequest.make({
          request_id: `r-${yield* IdGenerator.uuid}`,
          action: { name: action },
          arguments: args,
          execution_scope: scope,
          ...(approval_id === undefined ? {} : { approval_id })
        })
        return yield* executor.execute(request, { context })
      })
  })

const summary = (outcome: ExecutionOutcome.ExecutionOutcome) =>
  `${outcome._tag} ${ExecutionOutcome.reasonCode(outcome)}`

describe("a composition in the executor", () => {
  const parent = declare({ mode: "safe", approver_class: "maintainer" })

  it.effect("the executor enforces the composed snapshot: the child narrows, the parent's denies hold", () =>
    Effect.gen(function*() {
      const { snapshot } = yield* PolicyComposition.compose(
        parent,
        child({ mode: "safe", deny: { "notes.write": ["*"] } })
      )
      const run = yield* installed(snapshot)
      assert.strictEqual(summary(yield* run("notes.read")), "succeeded ok")
      assert.strictEqual(summary(yield* run("notes.write")), "denied policy.denied")
      assert.strictEqual(summary(yield* run("shell.exec", { command: "rm -rf /" })), "denied policy.denied")
      assert.strictEqual(summary(yield* run("shell.exec", { command: "ls" })), "escalated approval.required")
    }).pipe(Effect.provide(executorLayer)))

  // A regression test: before PolicyGate's `reduce` let a hard deny outrank an escalation from an earlier gate,
  // the parent gate's escalation hid the child gate's deny here, and approving it ran `make`.
  it.effect("deny dominates across gates: approving the parent's escalation never lifts the child's deny", () =>
    Effect.gen(function*() {
      const { snapshot } = yield* PolicyComposition.compose(
        parent,
        child({ mode: "safe", deny: { "shell.exec": ["make"] } })
      )
      const run = yield* installed(snapshot)
      const before = made
      let outcome = yield* run("shell.exec", { command: "make" })
      if (outcome._tag === "escalated" && outcome.approval !== undefined) {
        const queue = yield* ApprovalQueue
        yield* queue.approve(outcome.approval.approval_id, { id: "maya", approver_class: "maintainer" })
        outcome = yield* run("shell.exec", { command: "make" }, outcome.approval.approval_id)
      }
      assert.strictEqual(made, before)
      assert.strictEqual(summary(outcome), "denied policy.denied")
    }).pipe(Effect.provide(executorLayer)))
})

describe("gates over a preset and rules-mode maps in the executor", () => {
  // rule-0..2 are the safe preset's (deny dangerous shell, escalate shell, allow all), rule-3 is the deny map's entry.
  const gated = declare({
    mode: "safe",
    approver_class: "maintainer",
    deny: { "notes.write": ["*"] },
    gates: [
      { gate_id: "shell", level: "hard", order: 0, tool_ids: ["shell.*"], rule_ids: ["rule-0", "rule-1", "rule-2"] },
      { gate_id: "notes", level: "soft", order: 1, tool_ids: ["notes.*"], rule_ids: ["rule-2", "rule-3"] }
    ]
  })

  it.effect("gates referencing the generated rule-N compile and govern those rules: a soft gate escalates its deny", () =>
    Effect.gen(function*() {
      const snapshot = yield* PolicySnapshot.compile(gated)
      const decide = verdict(snapshot)
      assert.strictEqual(decide(shell("rm -rf /")), "deny policy.denied @shell")
      assert.strictEqual(decide(call("notes.write")), "escalate approval.required @notes")
      const run = yield* installed(snapshot)
      const before = made
      assert.strictEqual(summary(yield* run("shell.exec", { command: "make" })), "escalated approval.required")
      assert.strictEqual(summary(yield* run("shell.exec", { command: "rm -rf /" })), "denied policy.denied")
      assert.strictEqual(made, before)
      assert.strictEqual(summary(yield* run("notes.read")), "succeeded ok")
      // Without gates the map's deny is hard; bound to the soft gate it escalates to the approver instead.
      assert.strictEqual(summary(yield* run("notes.write")), "escalated approval.required")
      const { gates: _gates, ...ungated } = gated
      const hard = yield* installed(yield* PolicySnapshot.compile({ ...ungated, version: "2" }))
      assert.strictEqual(summary(yield* hard("notes.write")), "denied policy.denied")
    }).pipe(Effect.provide(executorLayer)))
})

describe("writ/testing arbitraries (runtime/Testing.ts), which the laws above rely on", () => {
  it.effect("declarations decode and compile, and cover every mode, every rule kind and every gate level", () =>
    withDigest(Effect.gen(function*() {
      const modes = new Set<string>()
      const kinds = new Set<string>()
      const levels = new Set<string>()
      for (const wire of fc.sample(Testing.permissionPolicy(), { numRuns: 300, seed: 42 })) {
        const policy = Either.getOrThrow(PermissionPolicy.decode(wire))
        const snapshot = yield* PolicySnapshot.compile(policy)
        modes.add(policy.mode)
        snapshot.compiled_rules.forEach((rule) => kinds.add(rule.kind))
        snapshot.gate_bindings.forEach((gate) => levels.add(gate.level))
      }
      assert.deepStrictEqual([...modes].sort(), ["allow_all", "deny_all", "read_only", "rules", "safe"])
      assert.strictEqual(kinds.size, 11)
      assert.deepStrictEqual([...levels].sort(), ["advisory", "hard", "soft"])
    })))

  it.effect("sampled policies and inputs reach each guard's explicit and default denials, new kinds included", () =>
    withDigest(Effect.gen(function*() {
      const codes = new Set<string>()
      const pairs = fc.tuple(Testing.policy(), fc.array(Testing.policyInput(), { minLength: 20, maxLength: 20 }))
      for (const [policy, inputs] of fc.sample(pairs, { numRuns: 300, seed: 9 })) {
        const decide = PolicyComposition.decider(yield* PolicySnapshot.compile(policy))
        for (const input of inputs) codes.add(decide(input).code)
      }
      for (const kind of ["network", "mcp", "secret", "environment"]) {
        assert.isTrue(codes.has(`${kind}.denied`) && codes.has(`${kind}.not_allowed`), kind)
      }
      assert.isTrue(codes.has("network.invalid_destination"))
    })))

  it.effect("recipes build contexts of every origin through the host factories, replayably", () =>
    Effect.gen(function*() {
      const origins = new Map<string, Set<string>>()
      for (const recipe of fc.sample(Testing.invocationRecipe(), { numRuns: 300, seed: 7 })) {
        const context = yield* Testing.buildInvocation(recipe)
        const key = recipe._tag
        origins.set(key, (origins.get(key) ?? new Set()).add(context.origins.join("+")))
        if (recipe._tag === "user") assert.deepStrictEqual(context.origins, ["USER"])
        if (recipe._tag === "autonomous") assert.deepStrictEqual(context.origins, ["SELF"])
        if (recipe._tag === "otherAgent") assert.deepStrictEqual(context.origins, ["OTHER_AGENT"])
        if (recipe._tag === "unknown") assert.strictEqual(context._tag, "unknown")
      }
      assert.deepStrictEqual([...origins.keys()].sort(), ["autonomous", "delegated", "otherAgent", "unknown", "user"])
      assert.isTrue(origins.get("delegated")!.has("OTHER_AGENT+USER"))
      const unknown = { _tag: "unknown", executorId: "alice" } as const
      const partition = (seed: number) =>
        Effect.map(
          Effect.provide(Testing.buildInvocation(unknown), Testing.layerTest(seed)),
          (context) => context._tag === "unknown" && context.partition_id
        )
      assert.strictEqual(yield* partition(1), yield* partition(1))
      assert.notStrictEqual(yield* partition(1), yield* partition(2))
    }).pipe(Effect.provide(Testing.layerTest(3))))

  it.effect("requests, bindings and contexts are valid Schema values that bind through the trusted ingress", () =>
    Effect.gen(function*() {
      const encode = Schema.encodeSync(ExecutionRequest)
      const decode = Schema.decodeUnknownSync(ExecutionRequest)
      for (const request of fc.sample(Testing.executionRequest(["notes.read", "shell.exec"]), 100)) {
        assert.include(["notes.read", "shell.exec"], request.action.name)
        assert.deepStrictEqual(decode(encode(request)), request)
      }
      for (const binding of fc.sample(Testing.binding, 50)) {
        const context = yield* Ingress.bind(binding)
        assert.strictEqual(context.authenticated_principal.id, binding.authenticated_principal.id)
      }
      const contexts = fc.sample(Testing.executionContext, 50)
      assert.strictEqual(new Set(contexts.map((c) => c.context_id)).size, 50)
      for (const input of fc.sample(Testing.policyInput(["notes.read"]), 100)) {
        assert.strictEqual(input.action, "notes.read")
      }
    }).pipe(Effect.provide(Testing.layerTest(5))))
})
