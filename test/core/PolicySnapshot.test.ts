import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Equal, Hash } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const declare = (input: unknown) => Either.getOrThrow(PermissionPolicy.decode(input))
const rejection = (input: unknown) => {
  const result = PermissionPolicy.decode(input)
  return Either.isLeft(result) ? result.left.message : "accepted"
}
const compile = (input: unknown) => PolicySnapshot.compile(declare(input)).pipe(Effect.provide(WebCryptoDigest.layer))

const base = { policy_id: "repo-agent", version: "1" }

describe("PermissionPolicy declarations", () => {
  it("fails loudly with the path of the offending field", () => {
    assert.strictEqual(
      rejection({ ...base, rules: [{ kind: "teleport", effect: "allow" }] }).split(":")[0],
      "$.rules.0.kind"
    )
    assert.strictEqual(
      rejection({ ...base, rules: [{ kind: "action", effect: "deny", action_patterns: ["x"], roots: ["/"] }] }),
      "$.rules.0.roots: is not a field of this declaration (nothing is silently ignored)"
    )
    assert.strictEqual(
      rejection({ ...base, rules: [{ kind: "filesystem", effect: "allow" }] }),
      "$.rules.0.roots: is missing"
    )
    assert.strictEqual(rejection({ ...base, mode: "inherit" }).split(":")[0], "$.mode")
    assert.strictEqual(rejection({ ...base, colour: "blue" }).split(":")[0], "$.colour")
    assert.strictEqual(rejection({ policy_id: "x" }), "$.version: is missing")
  })

  it.effect("compiles presets and rules-mode maps into typed, ordered rules", () =>
    Effect.gen(function*() {
      const snapshot = yield* compile({
        ...base,
        mode: "safe",
        approver_class: "maintainer",
        deny: { "files.write": ["/etc/*"] },
        rules: [{ kind: "budget", effect: "limit", budget_kind: "calls", limit: 100, window_microseconds: 60_000_000 }]
      })
      assert.deepStrictEqual(
        snapshot.compiled_rules.map((r) => [r.rule_id, r.kind, r.provenance]),
        [
          ["rule-0", "action", "preset:safe"],
          ["rule-1", "approval", "preset:safe"],
          ["rule-2", "action", "preset:safe"],
          ["rule-3", "action", "rules-mode"],
          ["rule-4", "budget", "declared"]
        ]
      )
      const approval = snapshot.compiled_rules[1]!
      assert.isTrue(approval.kind === "approval" && approval.approver_class === "maintainer")
      assert.deepStrictEqual(snapshot.gate_bindings.map((g) => [g.gate_id, g.level, g.rule_ids.length]), [[
        "policy",
        "hard",
        5
      ]])
      assert.strictEqual(snapshot.release_state, "staged")
      assert.match(snapshot.digest, /^[0-9a-f]{64}$/)
    }))

  it.effect("rejects duplicate rule ids, duplicate gates, dangling references and unbound rules, with paths", () =>
    Effect.gen(function*() {
      const rule = (rule_id: string) => ({ kind: "action", effect: "allow", action_patterns: ["x"], rule_id })
      const error = (input: unknown) => Effect.map(Effect.flip(compile(input)), (e) => e.message)
      assert.strictEqual(
        yield* error({ ...base, rules: [rule("a"), rule("a")] }),
        "$.rules.1.rule_id: duplicate rule id \"a\" (first at $.rules.0)"
      )
      const gate = (gate_id: string, order: number, rule_ids: Array<string>) => ({
        gate_id,
        level: "hard",
        order,
        rule_ids
      })
      assert.strictEqual(
        yield* error({ ...base, rules: [rule("a")], gates: [gate("g", 0, ["a"]), gate("g", 1, ["a"])] }),
        "$.gates.1.gate_id: duplicate gate id \"g\""
      )
      assert.strictEqual(
        yield* error({ ...base, rules: [rule("a")], gates: [gate("g", 0, ["a", "b"])] }),
        "$.gates.0.rule_ids.1: no rule \"b\" exists"
      )
      assert.strictEqual(
        yield* error({ ...base, allow: { x: ["*"] }, gates: [gate("g", 0, ["rule-0"])] }),
        "$.gates.0.rule_ids.0: \"rule-0\" is a generated id that moves when rules change: give the rule an explicit rule_id"
      )
      assert.strictEqual(
        yield* error({ ...base, gates: [] }),
        "$.gates: at least one gate must bind the rules (no gate would allow everything)"
      )
      assert.strictEqual(
        yield* error({ ...base, rules: [rule("a"), rule("b")], gates: [gate("g", 0, ["a"])] }),
        "$.gates: rule \"b\" is bound to no gate"
      )
    }))

  it.effect("refuses an origin rule in a soft or advisory gate at the rule's path; a stored one cannot be activated", () =>
    Effect.gen(function*() {
      const rules = [
        { rule_id: "notes", kind: "action", effect: "allow", action_patterns: ["notes.*"] },
        { rule_id: "users-only", kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER"] }
      ]
      const declaration = (level: string) => ({
        ...base,
        approver_class: "maintainer",
        rules,
        gates: [{ gate_id: "review", level, order: 0 }]
      })
      for (const level of ["soft", "advisory"]) {
        assert.strictEqual(
          (yield* Effect.flip(compile(declaration(level)))).message,
          `$.rules.1: origin rule "users-only" is bound to ${level} gate "review": origin rules are authorization, ` +
            "which no approval lifts, and belong in hard gates"
        )
      }
      const hard = yield* compile(declaration("hard"))
      assert.isTrue(Either.isRight(PolicySnapshot.activatable(hard)))
      // What a store written before this rule may hold: it still decodes and recomputes to its digest.
      const gate_bindings = hard.gate_bindings.map((gate) => ({ ...gate, level: "soft" as const }))
      const digest = yield* PolicySnapshot.recomputeDigest({ ...hard, gate_bindings }).pipe(
        Effect.provide(WebCryptoDigest.layer)
      )
      const stored = PolicySnapshot.PolicySnapshot.make({ ...hard, gate_bindings, digest })
      const refused = PolicySnapshot.activatable(stored)
      assert.isTrue(Either.isLeft(refused))
      assert.match(
        Either.isLeft(refused) ? refused.left.message : "",
        /^\$\.compiled_rules\.1: origin rule "users-only"/
      )
    }))

  it.effect("the digest covers rules and gates but not release state or activation", () =>
    Effect.gen(function*() {
      const one = yield* compile({ ...base, allow: { "notes.read": ["*"] } })
      const same = yield* compile({ ...base, allow: { "notes.read": ["*"] } })
      const other = yield* compile({ ...base, allow: { "notes.read": ["todo"] } })
      assert.strictEqual(one.digest, same.digest)
      assert.notStrictEqual(one.digest, other.digest)
      const activated = PolicySnapshot.PolicySnapshot.make({ ...one, release_state: "active", activated_by: "ops" })
      assert.strictEqual(
        yield* PolicySnapshot.recomputeDigest(activated).pipe(Effect.provide(WebCryptoDigest.layer)),
        one.digest
      )
    }))

  it.effect("a compiled snapshot is an immutable value, sharing nothing with its declaration; hashing and equality work", () =>
    Effect.gen(function*() {
      const deepFrozen = (value: unknown): boolean =>
        typeof value !== "object" || value === null ||
        (Object.isFrozen(value) && Object.values(value).every(deepFrozen))
      const declaration = declare({
        ...base,
        principal_scope: ["team-*"],
        rules: [{ rule_id: "deny-all", kind: "action", effect: "deny", action_patterns: ["*"] }]
      })
      const snapshot = yield* PolicySnapshot.compile(declaration).pipe(Effect.provide(WebCryptoDigest.layer))
      assert.isTrue(deepFrozen(snapshot))
      assert.throws(() => {
        ;(snapshot.compiled_rules[0] as { effect: string }).effect = "allow"
      }, TypeError)
      assert.throws(() => (snapshot.gate_bindings as Array<unknown>).push({}), TypeError) // The declaration stays the caller's to change: the snapshot does not follow it.
      ;(declaration.principal_scope as unknown as Array<string>)[0] = "*"
      ;(declaration.rules[0] as unknown as { action_patterns: Array<string> }).action_patterns[0] = "notes.*"
      assert.deepStrictEqual(snapshot.principal_scope, ["team-*"])
      assert.deepStrictEqual((snapshot.compiled_rules[0] as unknown as { action_patterns: unknown }).action_patterns, [
        "*"
      ])
      assert.strictEqual(
        yield* PolicySnapshot.recomputeDigest(snapshot).pipe(Effect.provide(WebCryptoDigest.layer)),
        snapshot.digest
      )
      assert.strictEqual(Hash.hash(snapshot), Hash.hash(snapshot))
      assert.isTrue(Equal.equals(snapshot, snapshot))
      // A hand-built snapshot made immutable is a frozen copy; an immutable one is returned as it is.
      const handBuilt = PolicySnapshot.PolicySnapshot.make({ ...snapshot, principal_scope: ["team-*"] })
      const frozen = PolicySnapshot.immutable(handBuilt)
      ;(handBuilt.principal_scope as unknown as Array<string>)[0] = "*"
      assert.deepStrictEqual(frozen.principal_scope, ["team-*"])
      assert.isTrue(deepFrozen(frozen))
      assert.strictEqual(PolicySnapshot.immutable(frozen), frozen)
      assert.strictEqual(PolicySnapshot.immutable(snapshot), snapshot)
    }))
})
