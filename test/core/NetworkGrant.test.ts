import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as NetworkGrant from "../../core/policy/NetworkGrant.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const snapshotOf = (declaration: Record<string, unknown>) =>
  PolicySnapshot.compile(
    Either.getOrThrow(PermissionPolicy.decode({ policy_id: "network", version: "1", ...declaration }))
  ).pipe(Effect.provide(WebCryptoDigest.layer), Effect.orDie)

const allowAll = { kind: "action", effect: "allow", action_patterns: ["*"] }
const network = (effect: "allow" | "deny", destinations: ReadonlyArray<string>, modes = ["connect"]) => ({
  kind: "network",
  effect,
  destinations,
  modes
})

describe("NetworkGrant", () => {
  it.effect("a policy with no network rule grants nothing; connect rules grant their destinations, deny dominates", () =>
    Effect.gen(function*() {
      const bare = yield* snapshotOf({ rules: [allowAll] })
      assert.deepStrictEqual(NetworkGrant.of(bare, "tool.call"), NetworkGrant.none)
      assert.isFalse(NetworkGrant.permits(NetworkGrant.of(bare, "tool.call"), "127.0.0.1:80"))

      const snapshot = yield* snapshotOf({
        rules: [
          allowAll,
          network("allow", ["API.example.com:443", "*.writ.test:8080", "127.0.0.1:9000"]),
          network("deny", ["evil.writ.test:*"]),
          network("allow", ["listen.example.com:443"], ["listen", "resolve"])
        ]
      })
      const grant = NetworkGrant.of(snapshot, "tool.call")
      assert.strictEqual(NetworkGrant.of(snapshot, "tool.call"), grant, "computed once per snapshot and action")
      assert.isTrue(NetworkGrant.grantsAny(grant))
      assert.isTrue(NetworkGrant.permits(grant, "api.example.com:443"))
      assert.isTrue(NetworkGrant.permits(grant, "a.writ.test:8080"))
      assert.isTrue(NetworkGrant.permits(grant, "127.0.0.1:9000"))
      assert.isFalse(NetworkGrant.permits(grant, "api.example.com:80"))
      assert.isFalse(NetworkGrant.permits(grant, "evil.writ.test:8080"), "deny dominates")
      assert.isFalse(NetworkGrant.permits(grant, "listen.example.com:443"), "only connect rules grant a connection")
      assert.isFalse(NetworkGrant.loopbackOnly(grant))
    }))

  it.effect("a host the glob would match is refused when it is no DNS name or IP literal: a NUL byte, a space, a port past 65535", () =>
    Effect.gen(function*() {
      const grant = NetworkGrant.of(yield* snapshotOf({ rules: [allowAll, network("allow", ["*.writ.test:*"])] }), "x")
      const smuggled = "127.0.0.3\0.writ.test:80"
      assert.isTrue(new RegExp("^.*\\.writ\\.test:.*$", "s").test(smuggled), "the pattern alone would match it")
      assert.isFalse(NetworkGrant.permits(grant, smuggled))
      assert.isFalse(NetworkGrant.permits(grant, "a b.writ.test:80"))
      assert.isFalse(NetworkGrant.permits(grant, "a.writ.test:99999"))
      assert.isTrue(NetworkGrant.permits(grant, "a.writ.test:80"))
    }))

  it.effect("every enforcing gate covering the action must grant; an advisory gate or one for other tools grants nothing", () =>
    Effect.gen(function*() {
      const snapshot = yield* snapshotOf({
        rules: [
          { rule_id: "all", ...allowAll },
          { rule_id: "wide", ...network("allow", ["127.0.0.1:*", "[::1]:8080", "localhost:1"]) },
          { rule_id: "narrow", ...network("allow", ["127.0.0.1:80", "[::1]:8080"]) },
          { rule_id: "other", ...network("allow", ["example.com:443"]) }
        ],
        gates: [
          { gate_id: "hard", level: "hard", order: 0, rule_ids: ["all", "wide"] },
          { gate_id: "soft", level: "soft", order: 1, rule_ids: ["narrow"], tool_ids: ["tool.*"] },
          { gate_id: "advice", level: "advisory", order: 2, rule_ids: ["other"] }
        ]
      })
      const tool = NetworkGrant.of(snapshot, "tool.call")
      assert.deepStrictEqual(tool.gates.map((gate) => gate.gate_id), ["hard", "soft"])
      assert.isTrue(NetworkGrant.permits(tool, "127.0.0.1:80"))
      assert.isTrue(NetworkGrant.permits(tool, "[::1]:8080"))
      assert.isFalse(NetworkGrant.permits(tool, "127.0.0.1:81"), "the soft gate does not grant it")
      assert.isFalse(NetworkGrant.permits(tool, "example.com:443"), "an advisory gate grants nothing")
      assert.isTrue(NetworkGrant.loopbackOnly(tool))
      const other = NetworkGrant.of(snapshot, "other.call")
      assert.isTrue(NetworkGrant.permits(other, "127.0.0.1:81"), "the soft gate covers tool.* only")
      assert.isTrue(NetworkGrant.loopbackOnly(other))
    }))
})
