import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import * as MemoryPolicySnapshotStore from "../../adapters/memory/MemoryPolicySnapshotStore.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Action from "../../core/action/Action.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"
import type { PolicySnapshotRef } from "../../core/base/Refs.ts"
import * as Time from "../../core/base/Time.ts"
import { layerPolicyGated } from "../../core/execution/ActionExecutor.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import type { PolicyInput } from "../../core/policy/PolicyEvaluator.ts"
import * as PolicyGate from "../../core/policy/PolicyGate.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../core/policy/PolicySnapshotStore.ts"
import { base, run as execute } from "../fixtures/layers.ts"

const snapshotOf = (version: string, declaration: Record<string, unknown>) =>
  PolicySnapshot.compile(
    Either.getOrThrow(PermissionPolicy.decode({ policy_id: "grants", version, mode: "allow_all", ...declaration }))
  ).pipe(Effect.provide(WebCryptoDigest.layer), Effect.orDie)

/** "allow", or "<disposition> <code> [matched rules]" as the executor reduces guards then policy. */
const decider = (rules: ReadonlyArray<Record<string, unknown>>) =>
  Effect.map(snapshotOf("1", { rules }), (snapshot) => {
    const pinned = PolicyGate.pinned(snapshot)
    return (input: Partial<PolicyInput>) => {
      const verdict = PolicyGate.explain(pinned, {
        action: "tool.call",
        effects: [],
        arguments: {},
        principal: "alice",
        now: 0,
        ...input
      })
      if (verdict.disposition === "allow") return "allow"
      const matched = (verdict.gates ?? []).flatMap((gate) => gate.matched_rules)
      return `${verdict.disposition} ${verdict.code}${matched.length > 0 ? ` [${matched.join(",")}]` : ""}`
    }
  })

const mcp = (server: string, tool: string, resources: ReadonlyArray<string> = []) => ({
  mcp: { server, tool, resources }
})
const secrets = (...needs: ReadonlyArray<readonly [string, "reference_only" | "inject"]>) => ({
  secrets: needs.map(([namespace, exposure]) => ({ namespace, exposure }))
})
const environment = (...needs: ReadonlyArray<readonly [string, "read" | "inject"]>) => ({
  environment: needs.map(([variable, exposure]) => ({ variable, exposure }))
})
const listen = (address?: string) => ({
  effects: ["network.listen"],
  arguments: address === undefined ? {} : { address }
})
const resolve = (host?: string) => ({ effects: ["network.resolve"], arguments: host === undefined ? {} : { host } })

const define = (name: string, extra: Partial<Action.Spec<object, object, string, string>>) =>
  Action.make({ name, input: Schema.Struct({}), output: Schema.String, handler: () => "ok", ...extra })

describe("declared needs on an action", () => {
  it.effect("an MCP tool, secrets and environment variables are declared, frozen and pinned by the digest", () =>
    Effect.gen(function*() {
      const plain = define("github.search", {})
      const tool = define("github.search", {
        mcp: { server: "github", tool: "search" },
        secrets: [{ namespace: "github/token", exposure: "reference_only" }],
        environment: [{ variable: "HOME", exposure: "read" }]
      })
      assert.strictEqual(tool.source.kind, "mcp")
      assert.deepStrictEqual(tool.mcp, { server: "github", tool: "search", resources: [] })
      assert.isTrue(Object.isFrozen(tool.mcp) && Object.isFrozen(tool.mcp!.resources) && Object.isFrozen(tool.secrets))
      assert.isTrue(Object.isFrozen(tool.secrets![0]) && Object.isFrozen(tool.environment![0]))
      const [a, b] = yield* Effect.forEach([plain, tool], ActionDescriptor.describe)
      assert.isFalse("mcp" in a! || "secrets" in a! || "environment" in a!)
      assert.deepStrictEqual(b!.mcp, tool.mcp)
      assert.deepStrictEqual(b!.secrets, tool.secrets)
      assert.notStrictEqual(a!.digest, b!.digest)
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it("an invalid declaration fails with the field it names", () => {
    const field = (extra: Partial<Action.Spec<object, object, string, string>>) => {
      try {
        define("x.y", extra)
      } catch (error) {
        return error instanceof Action.ActionDefinitionError ? `${error.field}: ${error.detail}` : String(error)
      }
      return "accepted"
    }
    const local = Action.Provenance.make({ kind: "local" })
    assert.match(field({ mcp: { server: "github", tool: "search" }, source: local }), /^source: an MCP action/)
    assert.match(field({ source: Action.Provenance.make({ kind: "mcp" }) }), /^mcp: an MCP action/)
    assert.match(field({ mcp: { server: "*", tool: "search" } }), /^mcp: .*no \*/s)
    assert.match(field({ mcp: { server: "github", tool: "search", resources: ["repo://*"] } }), /^mcp: .*no \*/s)
    assert.match(field({ mcp: { server: "github", tool: "search", extra: 1 } as never }), /^mcp: .*extra/s)
    assert.match(field({ secrets: [{ namespace: "aws/*", exposure: "inject" }] }), /^secrets\[0\]: /)
    assert.match(field({ secrets: [{ namespace: "aws", exposure: "forbid" as never }] }), /^secrets\[0\]: /)
    assert.match(field({ environment: [{ variable: "AWS_*", exposure: "read" }] }), /^environment\[0\]: /)
    assert.strictEqual(
      field({ environment: [{ variable: "HOME", exposure: "read" }, { variable: "HOME", exposure: "inject" }] }),
      "environment: names HOME twice"
    )
    assert.strictEqual(field({ mcp: { server: "github", tool: "search" }, secrets: [], environment: [] }), "accepted")
  })
})

describe("mcp rules", () => {
  const rules = [
    {
      rule_id: "gh",
      kind: "mcp",
      effect: "allow",
      server_patterns: ["github"],
      tool_patterns: ["search", "create_*"],
      resource_patterns: ["repo://*"]
    },
    {
      rule_id: "no-release",
      kind: "mcp",
      effect: "deny",
      server_patterns: ["github"],
      tool_patterns: ["create_release"],
      resource_patterns: []
    },
    {
      rule_id: "no-secrets",
      kind: "mcp",
      effect: "deny",
      server_patterns: ["*"],
      tool_patterns: [],
      resource_patterns: ["repo://secret*"]
    },
    {
      rule_id: "jira",
      kind: "mcp",
      effect: "allow",
      server_patterns: ["jira"],
      tool_patterns: [],
      resource_patterns: []
    },
    {
      rule_id: "evil",
      kind: "mcp",
      effect: "deny",
      server_patterns: ["evil*"],
      tool_patterns: [],
      resource_patterns: []
    }
  ]

  it.effect("allow, deny and no match: a call needs its tool and every resource granted on its server", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      assert.strictEqual(d(mcp("github", "search")), "allow")
      assert.strictEqual(d(mcp("github", "create_issue", ["repo://writ", "repo://docs"])), "allow")
      assert.strictEqual(d(mcp("github", "create_release")), "deny mcp.denied [no-release]")
      assert.strictEqual(d(mcp("github", "search", ["issue://1"])), "deny mcp.not_allowed")
      assert.strictEqual(d(mcp("github", "delete_repo")), "deny mcp.not_allowed")
      assert.strictEqual(d(mcp("gitlab", "search")), "deny mcp.not_allowed")
      // A rule naming no tool and no resource covers its whole server.
      assert.strictEqual(d(mcp("jira", "anything", ["issue://1"])), "allow")
      assert.strictEqual(d(mcp("evil-corp", "search")), "deny mcp.denied [evil]")
      // Only MCP actions are subject to mcp rules.
      assert.strictEqual(d({}), "allow")
    }))

  it.effect("deny dominates: a denied resource refuses the call whatever else is granted or missing", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      assert.strictEqual(d(mcp("github", "search", ["repo://secrets"])), "deny mcp.denied [no-secrets]")
      assert.strictEqual(
        d(mcp("jira", "search", ["repo://secret-plan"])),
        "deny mcp.denied [no-secrets]"
      )
      assert.strictEqual(
        d(mcp("github", "create_release", ["issue://1", "repo://secrets"])),
        "deny mcp.denied [no-release,no-secrets]"
      )
    }))

  it.effect("a specific allow never outranks a wildcard deny, as for action rules", () =>
    Effect.gen(function*() {
      const d = yield* decider([
        {
          rule_id: "exact",
          kind: "mcp",
          effect: "allow",
          server_patterns: ["github"],
          tool_patterns: ["create_release"],
          resource_patterns: []
        },
        {
          rule_id: "wild",
          kind: "mcp",
          effect: "deny",
          server_patterns: ["*"],
          tool_patterns: ["create_*"],
          resource_patterns: []
        }
      ])
      assert.strictEqual(d(mcp("github", "create_release")), "deny mcp.denied [wild]")
    }))
})

describe("secret_exposure rules", () => {
  const rules = [
    { rule_id: "gh", kind: "secret_exposure", effect: "allow", secret_namespaces: ["github/*"], exposure: "inject" },
    {
      rule_id: "aws",
      kind: "secret_exposure",
      effect: "allow",
      secret_namespaces: ["aws/*"],
      exposure: "reference_only"
    },
    { rule_id: "root", kind: "secret_exposure", effect: "deny", secret_namespaces: ["aws/root"], exposure: "inject" },
    {
      rule_id: "admin",
      kind: "secret_exposure",
      effect: "deny",
      secret_namespaces: ["github/admin"],
      exposure: "reference_only"
    },
    { rule_id: "vault", kind: "secret_exposure", effect: "allow", secret_namespaces: ["vault/*"], exposure: "forbid" }
  ]

  it.effect("an allow grants its exposure and below; a deny refuses its exposure and above; no match denies", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      assert.strictEqual(d(secrets(["github/token", "inject"])), "allow")
      assert.strictEqual(d(secrets(["github/token", "reference_only"])), "allow")
      assert.strictEqual(d(secrets(["aws/deploy", "reference_only"])), "allow")
      assert.strictEqual(d(secrets(["aws/deploy", "inject"])), "deny secret.not_allowed")
      assert.strictEqual(d(secrets(["aws/root", "reference_only"])), "allow")
      assert.strictEqual(d(secrets(["aws/root", "inject"])), "deny secret.denied [root]")
      assert.strictEqual(d(secrets(["github/admin", "inject"])), "deny secret.denied [admin]")
      assert.strictEqual(d(secrets(["vault/db", "reference_only"])), "deny secret.denied [vault]")
      assert.strictEqual(d(secrets(["slack/webhook", "reference_only"])), "deny secret.not_allowed")
      assert.strictEqual(d({}), "allow")
    }))

  it.effect("deny dominates across an action's needs, and over a more specific allow", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      assert.strictEqual(
        d(secrets(["slack/webhook", "inject"], ["github/token", "inject"], ["vault/db", "reference_only"])),
        "deny secret.denied [vault]"
      )
      const specific = yield* decider([
        { rule_id: "one", kind: "secret_exposure", effect: "allow", secret_namespaces: ["aws/ci"], exposure: "inject" },
        { rule_id: "all", kind: "secret_exposure", effect: "deny", secret_namespaces: ["aws/*"], exposure: "inject" }
      ])
      assert.strictEqual(specific(secrets(["aws/ci", "inject"])), "deny secret.denied [all]")
    }))
})

describe("environment rules", () => {
  it.effect("read and inject grants, deny dominates, forbid refuses, no match denies", () =>
    Effect.gen(function*() {
      const d = yield* decider([
        {
          rule_id: "basics",
          kind: "environment",
          effect: "allow",
          variable_patterns: ["PATH", "HOME"],
          exposure: "read"
        },
        { rule_id: "lang", kind: "environment", effect: "allow", variable_patterns: ["LANG"], exposure: "inject" },
        { rule_id: "any-aws", kind: "environment", effect: "allow", variable_patterns: ["*"], exposure: "read" },
        { rule_id: "no-aws", kind: "environment", effect: "deny", variable_patterns: ["AWS_*"], exposure: "read" },
        {
          rule_id: "token",
          kind: "environment",
          effect: "allow",
          variable_patterns: ["GITHUB_TOKEN"],
          exposure: "forbid"
        }
      ])
      assert.strictEqual(d(environment(["PATH", "read"], ["LANG", "inject"], ["LANG", "read"])), "allow")
      assert.strictEqual(d(environment(["TERM", "read"])), "allow")
      assert.strictEqual(d(environment(["PATH", "inject"])), "deny environment.not_allowed")
      assert.strictEqual(d(environment(["AWS_SECRET_ACCESS_KEY", "read"])), "deny environment.denied [no-aws]")
      assert.strictEqual(d(environment(["AWS_REGION", "inject"])), "deny environment.denied [no-aws]")
      assert.strictEqual(d(environment(["GITHUB_TOKEN", "read"])), "deny environment.denied [token]")
      assert.strictEqual(d({}), "allow")
    }))
})

describe("network listen and resolve rules", () => {
  const rules = [
    {
      rule_id: "local",
      kind: "network",
      effect: "allow",
      destinations: ["127.0.0.1:8080", "localhost:*"],
      modes: ["listen"]
    },
    { rule_id: "no-ssh", kind: "network", effect: "deny", destinations: ["*:22"], modes: ["listen"] },
    { rule_id: "names", kind: "network", effect: "allow", destinations: ["*.example.com"], modes: ["resolve"] },
    { rule_id: "evil", kind: "network", effect: "deny", destinations: ["Evil.example.com:*"], modes: ["resolve"] },
    { rule_id: "odd", kind: "network", effect: "deny", destinations: ["odd.example.com:4*"], modes: ["resolve"] },
    { rule_id: "api", kind: "network", effect: "allow", destinations: ["api.example.com:443"], modes: ["connect"] }
  ]

  it.effect("a declared listen is checked on its address, a declared resolve on its host", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      assert.strictEqual(d(listen("127.0.0.1:8080")), "allow")
      assert.strictEqual(d(listen("LOCALHOST:3000")), "allow")
      assert.strictEqual(d(listen("0.0.0.0:8080")), "deny network.not_allowed")
      assert.strictEqual(d(listen("localhost:22")), "deny network.denied [no-ssh]")
      assert.strictEqual(d(listen("api.example.com:443")), "deny network.not_allowed")
      assert.strictEqual(d(resolve("api.example.com")), "allow")
      assert.strictEqual(d(resolve("Evil.Example.com.")), "deny network.denied [evil]")
      assert.strictEqual(d(resolve("example.org")), "deny network.not_allowed")
      // A deny's host matches whatever its case or port glob.
      assert.strictEqual(d(resolve("evil.example.com")), "deny network.denied [evil]")
      assert.strictEqual(d(resolve("odd.example.com")), "deny network.denied [odd]")
      assert.strictEqual(d({ arguments: { url: "https://api.example.com/v1" } }), "allow")
      // Without the declared effect the argument is not a network target.
      assert.strictEqual(d({ arguments: { address: "0.0.0.0:22", host: "example.org" } }), "allow")
    }))

  it.effect("a declared listen or resolve without a valid target is denied, and deny dominates across modes", () =>
    Effect.gen(function*() {
      const d = yield* decider(rules)
      for (const address of [undefined, "127.0.0.1", "127.0.0.1:99999", "a b:80", "x/y:80"]) {
        assert.strictEqual(d(listen(address)), "deny network.invalid_destination", String(address))
      }
      for (const host of [undefined, "", "a b", "a/b", "user@host"]) {
        assert.strictEqual(d(resolve(host)), "deny network.invalid_destination", String(host))
      }
      // A declared connect names its destination in `url`; without one there is nothing a grant could cover.
      assert.strictEqual(d({ effects: ["network.connect"], arguments: {} }), "deny network.invalid_destination")
      assert.strictEqual(d({ effects: ["network.connect"], arguments: { url: "https://api.example.com/v1" } }), "allow")
      assert.strictEqual(
        d({
          effects: ["network.listen", "network.resolve"],
          arguments: { address: "10.0.0.1:80", host: "evil.example.com" }
        }),
        "deny network.denied [evil]"
      )
    }))
})

let calls = 0
const count = () => {
  calls++
  return "ok"
}
const actions = [
  Action.make({
    name: "github.search",
    input: Schema.Struct({}),
    output: Schema.String,
    mcp: { server: "github", tool: "search", resources: ["repo://writ"] },
    handler: count
  }),
  Action.make({
    name: "github.release",
    input: Schema.Struct({}),
    output: Schema.String,
    mcp: { server: "github", tool: "create_release" },
    handler: count
  }),
  Action.make({
    name: "deploy",
    input: Schema.Struct({}),
    output: Schema.String,
    secrets: [{ namespace: "aws/deploy", exposure: "inject" }],
    environment: [{ variable: "AWS_REGION", exposure: "read" }],
    handler: count
  }),
  Action.make({
    name: "serve",
    input: Schema.Struct({ address: Schema.String }),
    output: Schema.String,
    effects: ["network.listen"],
    handler: count
  }),
  Action.make({
    name: "lookup",
    input: Schema.Struct({ host: Schema.String }),
    output: Schema.String,
    effects: ["network.resolve"],
    handler: count
  }),
  Action.make({
    name: "contained",
    input: Schema.Struct({}),
    output: Schema.String,
    secrets: [{ namespace: "aws/deploy", exposure: "reference_only" }],
    containment: ["secrets"],
    handler: count
  })
]

const layer = layerPolicyGated().pipe(
  Layer.provideMerge(MemoryPolicySnapshotStore.layer.pipe(Layer.provideMerge(base(actions))))
)

const install = (version: string, rules: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function*() {
    const store = yield* PolicySnapshotStore
    const snapshot = yield* snapshotOf(version, { rules })
    yield* store.put(snapshot)
    yield* store.activate("grants", version, "ops", Time.fromMicros(0))
    return { policy_id: "grants", version, digest: snapshot.digest }
  })

const run = (ref: PolicySnapshotRef, action: string, args = {}) =>
  Effect.gen(function*() {
    const before = calls
    const outcome = yield* execute(action, args, {}, { policy_snapshot: ref })
    const ran = calls > before ? " (ran)" : ""
    return outcome._tag === "denied" ? `denied ${outcome.reason.code} @${outcome.stage}${ran}` : `${outcome._tag}${ran}`
  })

const grants = [
  {
    kind: "mcp",
    effect: "allow",
    server_patterns: ["github"],
    tool_patterns: ["search"],
    resource_patterns: ["repo://*"]
  },
  { kind: "secret_exposure", effect: "allow", secret_namespaces: ["aws/*"], exposure: "reference_only" },
  { kind: "environment", effect: "allow", variable_patterns: ["AWS_REGION"], exposure: "read" },
  { kind: "network", effect: "allow", destinations: ["127.0.0.1:*"], modes: ["listen"] },
  { kind: "network", effect: "allow", destinations: ["*.example.com"], modes: ["resolve"] }
]

describe("the executor enforces mcp, secret, environment and listen/resolve grants at the guard stage", () => {
  it.effect("a snapshot holding these rules is enforced, not refused; only granted declarations reach the callable", () =>
    Effect.gen(function*() {
      const ref = yield* install("1", grants)
      assert.strictEqual(yield* run(ref, "github.search"), "succeeded (ran)")
      assert.strictEqual(yield* run(ref, "github.release"), "denied mcp.not_allowed @guard")
      assert.strictEqual(yield* run(ref, "deploy"), "denied secret.not_allowed @guard")
      assert.strictEqual(yield* run(ref, "serve", { address: "127.0.0.1:8080" }), "succeeded (ran)")
      assert.strictEqual(yield* run(ref, "serve", { address: "0.0.0.0:8080" }), "denied network.not_allowed @guard")
      assert.strictEqual(yield* run(ref, "lookup", { host: "api.example.com" }), "succeeded (ran)")
      assert.strictEqual(yield* run(ref, "lookup", { host: "example.org" }), "denied network.not_allowed @guard")
    }).pipe(Effect.provide(layer)))

  it.effect("each kind denies on its own: with the secret granted the environment check still refuses", () =>
    Effect.gen(function*() {
      const secret = { kind: "secret_exposure", effect: "allow", secret_namespaces: ["aws/*"], exposure: "inject" }
      const withSecret = yield* install("2", [secret])
      assert.strictEqual(yield* run(withSecret, "deploy"), "succeeded (ran)")
      const env = { kind: "environment", effect: "allow", variable_patterns: ["HOME"], exposure: "read" }
      const withEnv = yield* install("3", [secret, env])
      assert.strictEqual(yield* run(withEnv, "deploy"), "denied environment.not_allowed @guard")
      const denyRelease = {
        kind: "mcp",
        effect: "deny",
        server_patterns: ["github"],
        tool_patterns: ["create_*"],
        resource_patterns: []
      }
      const whole = {
        kind: "mcp",
        effect: "allow",
        server_patterns: ["github"],
        tool_patterns: [],
        resource_patterns: []
      }
      const mcpRules = yield* install("4", [whole, denyRelease])
      assert.strictEqual(yield* run(mcpRules, "github.search"), "succeeded (ran)")
      assert.strictEqual(yield* run(mcpRules, "github.release"), "denied mcp.denied @guard")
    }).pipe(Effect.provide(layer)))

  it.effect("a granted declaration is not containment: an action requiring it is denied by the in-process backend", () =>
    Effect.gen(function*() {
      const ref = yield* install("5", grants)
      assert.strictEqual(yield* run(ref, "contained"), "denied containment.unsupported @bind_context")
    }).pipe(Effect.provide(layer)))
})
