import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Equal, Hash } from "effect"
import { readFileSync } from "node:fs"
import * as PolicyFormat from "../../adapters/memory/PolicyFormat.ts"
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
        "$.gates.0.rule_ids.1: gate \"g\" references rule \"b\", which does not exist (the rules are a; " +
          "a rule without a rule_id is rule-N, N its position)"
      )
      assert.strictEqual(
        yield* error({ ...base, gates: [] }),
        "$.gates: at least one gate must bind the rules (no gate would allow everything)"
      )
      assert.strictEqual(
        yield* error({ ...base, rules: [rule("a"), rule("b")], gates: [gate("g", 0, ["a"])] }),
        "$.gates: rule \"b\" (declared at $.rules.1) is bound to no gate"
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

  // The ids a declaration leaves to the compiler are positional (`rule-N`): gates may bind them, so every error about
  // them must say which gate, which id and where it was declared, never a field the author did not write.
  it.effect("gates bind generated rule-N ids; a dangling or unbound one is named with its gate and declaration", () =>
    Effect.gen(function*() {
      const error = (input: unknown) => Effect.map(Effect.flip(compile(input)), (e) => [e._tag, e.message])
      const gate = (gate_id: string, order: number, rule_ids: Array<string>) => ({
        gate_id,
        level: "hard",
        order,
        rule_ids
      })
      const preset = { ...base, mode: "read_only", deny: { "files.write": ["/etc/*"] } }
      const bound = yield* compile({
        ...preset,
        gates: [gate("editors", 0, ["rule-0"]), gate("rest", 1, ["rule-1", "rule-2"])]
      })
      assert.deepStrictEqual(
        bound.gate_bindings.map((g) => [g.gate_id, g.rule_ids]),
        [["editors", ["rule-0"]], ["rest", ["rule-1", "rule-2"]]]
      )
      assert.deepStrictEqual(
        yield* error({ ...preset, gates: [gate("editors", 0, ["rule-0", "rule-1", "rule-2", "rule-3"])] }),
        [
          "PolicyValidationError",
          "$.gates.0.rule_ids.3: gate \"editors\" references rule \"rule-3\", which does not exist " +
          "(the rules are rule-0, rule-1, rule-2; a rule without a rule_id is rule-N, N its position)"
        ]
      )
      assert.deepStrictEqual(yield* error({ ...preset, gates: [gate("editors", 0, ["rule-0", "rule-1"])] }), [
        "PolicyValidationError",
        "$.gates: rule \"rule-2\" (declared at $.deny.files.write) is bound to no gate"
      ])
      assert.deepStrictEqual(yield* error({ ...preset, gates: [gate("editors", 0, ["rule-2"])] }), [
        "PolicyValidationError",
        "$.gates: rule \"rule-0\" (declared at $.mode) is bound to no gate"
      ])
      // An explicit id that is also a generated one is blamed where it was written.
      const rule = { kind: "action", effect: "allow", action_patterns: ["x"] }
      assert.deepStrictEqual(yield* error({ ...base, rules: [{ ...rule, rule_id: "rule-1" }, rule] }), [
        "PolicyValidationError",
        "$.rules.0.rule_id: rule id \"rule-1\" is also the id the compiler gives $.rules.1"
      ])
      assert.deepStrictEqual(yield* error({ ...base, rules: [rule, { ...rule, rule_id: "rule-0" }] }), [
        "PolicyValidationError",
        "$.rules.1.rule_id: duplicate rule id \"rule-0\" (first at $.rules.0, its generated id)"
      ])
      assert.deepStrictEqual(
        yield* error({ ...base, approver_class: "ops", rules: [{ ...rule, rule_id: "approver_class" }] }),
        [
          "PolicyValidationError",
          "$.rules.0.rule_id: rule id \"approver_class\" is also the id the compiler gives $.approver_class"
        ]
      )
    }))

  // Regression guard: computed before gates could bind generated ids. Letting them must not renumber or re-digest
  // any declaration that compiled before (ids stay `rule-N` by position).
  it.effect("the example agent policy (test/fixtures/policies/agent.yaml) keeps its digest and rule ids", () =>
    Effect.gen(function*() {
      const text = readFileSync(new URL("../fixtures/policies/agent.yaml", import.meta.url), "utf-8")
      const snapshot = yield* PolicySnapshot.compile(Either.getOrThrow(PolicyFormat.parse(text, "yaml")))
      assert.strictEqual(snapshot.digest, "549ce046de1ec3cd2e9ffc67f5203e5bae19c7b20fa339b6f50b4dd33a87f4e4")
      assert.deepStrictEqual(snapshot.gate_bindings.map((g) => [g.gate_id, g.rule_ids]), [[
        "policy",
        ["rule-0", "rule-1", "rule-2", "rule-3", "rule-4", "rule-5"]
      ]])
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it.effect("a gate's on_error: deny (the default) digests as a gate that declares none; escalate is bound and digested", () =>
    Effect.gen(function*() {
      const gated = (on_error?: string) => ({
        ...base,
        allow: { "notes.read": ["*"] },
        gates: [{ gate_id: "base", level: "hard", order: 0, ...(on_error === undefined ? {} : { on_error }) }]
      })
      const [none, deny, escalate] = yield* Effect.all([
        compile(gated()),
        compile(gated("deny")),
        compile(gated("escalate"))
      ])
      assert.strictEqual(deny.digest, none.digest)
      assert.isFalse(Object.hasOwn(deny.gate_bindings[0]!, "on_error"))
      assert.strictEqual(escalate.gate_bindings[0]!.on_error, "escalate")
      assert.notStrictEqual(escalate.digest, none.digest)
      assert.strictEqual(
        yield* PolicySnapshot.recomputeDigest(escalate).pipe(Effect.provide(WebCryptoDigest.layer)),
        escalate.digest
      )
      assert.strictEqual(rejection(gated("ignore")).split(":")[0], "$.gates.0.on_error")
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
