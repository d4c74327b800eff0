/**
 * A spec only narrows its policy: each section wider than the snapshot (a root outside or across a denied one, a glob
 * or `..` in a root, a domain pattern wider than the policy's destination, a shell without the callback past subprocess
 * rules, a forbidden variable, an MCP tool pattern, a tool the policy never allows) is refused naming its section and
 * field; an equal or narrower one passes, and `prepare` refuses a wider one before the adapter compiles anything.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as HarnessAdapter from "../../core/harness/HarnessAdapter.ts"
import * as HarnessSpec from "../../core/harness/HarnessSpec.ts"
import * as PolicyNarrowing from "../../core/harness/PolicyNarrowing.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const snapshotOf = (rules: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) =>
  Effect.runPromise(
    PolicySnapshot.compile(
      Either.getOrThrow(PermissionPolicy.decode({ policy_id: "repo-agent", version: "3", rules, ...extra }))
    ).pipe(Effect.provide(WebCryptoDigest.layer))
  )

const policy = await snapshotOf([
  { kind: "action", effect: "allow", action_patterns: ["files.*"], operations: ["*"] },
  { kind: "action", effect: "allow", action_patterns: ["shell.exec"], operations: ["git *"] },
  { kind: "action", effect: "deny", action_patterns: ["web.*"], operations: ["*"] },
  { kind: "filesystem", effect: "allow", roots: ["/work"], modes: ["read", "write"] },
  { kind: "filesystem", effect: "allow", roots: ["/usr"], modes: ["read"] },
  { kind: "filesystem", effect: "deny", roots: ["/work/ws/.secrets"], modes: ["read"] },
  { kind: "filesystem", effect: "deny", roots: ["/work/repo/.git"], modes: ["write"] },
  { kind: "network", effect: "allow", destinations: ["*.example.com:*", "api.other.org:443"], modes: ["connect"] },
  { kind: "network", effect: "deny", destinations: ["evil.example.com:*"], modes: ["connect"] },
  { kind: "subprocess", effect: "allow", executable_patterns: ["*"], shell: "allow" },
  { kind: "subprocess", effect: "deny", executable_patterns: ["curl"], shell: "allow" },
  { kind: "environment", effect: "allow", variable_patterns: ["LANG", "PATH", "GH_*"], exposure: "inject" },
  { kind: "environment", effect: "deny", variable_patterns: ["GH_ADMIN*"], exposure: "forbid" },
  { kind: "mcp", effect: "allow", server_patterns: ["writ"], tool_patterns: ["exec", "list"], resource_patterns: [] },
  { kind: "mcp", effect: "deny", server_patterns: ["writ"], tool_patterns: ["admin"], resource_patterns: [] }
])

const base = {
  spec_version: 1,
  provider: "claude-code",
  model: { name: "scripted" },
  policy: { policy_id: "repo-agent", version: "3" },
  workspace: "/work/ws",
  tools: { allow: ["Bash", "Read"], callback: true },
  filesystem: { read_roots: ["/usr/share"], write_roots: ["/work/out"], deny_read: ["/work/ws/.secrets"] },
  network: { allow_domains: ["docs.example.com"] },
  environment: { allow: ["PATH", "LANG"], secrets: [{ name: "GH_TOKEN", ref: "env:GH_TOKEN" }] },
  mcp: [{ server: "writ", tools: ["exec"] }]
}

/** A spec from `base` with sections replaced (decoded: every field valid as a spec). */
const spec = (input: Record<string, unknown> = {}) => Either.getOrThrow(HarnessSpec.decode({ ...base, ...input }))

const refusal = (s: HarnessSpec.HarnessSpec, snapshot = policy) => {
  const checked = PolicyNarrowing.check(s, snapshot)
  assert.isTrue(Either.isLeft(checked), "expected the spec to be refused as wider than its policy")
  if (Either.isRight(checked)) throw new Error("unreachable")
  return checked.left
}

const refusedAt = (s: HarnessSpec.HarnessSpec, section: PolicyNarrowing.Section, path: string) => {
  const error = refusal(s)
  assert.deepStrictEqual([error._tag, error.reason, error.section, error.path], [
    "SpecWiderThanPolicy",
    "wider",
    section,
    path
  ])
  return error
}

describe("PolicyNarrowing", () => {
  it("a spec within its policy, and one equal to it, pass", () => {
    assert.isTrue(Either.isRight(PolicyNarrowing.check(spec(), policy)))
    const equal = spec({
      filesystem: { read_roots: ["/usr"], write_roots: ["/work/ws"], deny_read: ["/work/ws/.secrets"] },
      mcp: [{ server: "writ", tools: ["exec", "list"] }]
    })
    assert.isTrue(Either.isRight(PolicyNarrowing.check(equal, policy)))
  })

  it("a spec naming another snapshot is refused before any section", () => {
    const error = refusal(spec({ policy: { policy_id: "repo-agent", version: "4" } }))
    assert.deepStrictEqual([error.reason, error.section, error.path], ["policy_mismatch", "policy", "$.policy"])
  })

  it("filesystem: a root outside every allowed one, or across a denied one, is refused", () => {
    const fs = (roots: Record<string, unknown>) => spec({ filesystem: { deny_read: ["/work/ws/.secrets"], ...roots } })
    refusedAt(fs({ write_roots: ["/etc"] }), "filesystem", "$.filesystem.write_roots.0")
    refusedAt(fs({ write_roots: ["/usr/local"] }), "filesystem", "$.filesystem.write_roots.0")
    refusedAt(fs({ read_roots: ["/"] }), "filesystem", "$.filesystem.read_roots.0")
    refusedAt(fs({ write_roots: ["/work"] }), "filesystem", "$.filesystem.write_roots.0")
    // A workspace over a denied directory: read may be kept out by the spec's own deny_read; write cannot be.
    refusedAt(spec({ filesystem: { deny_read: [] } }), "workspace", "$.workspace")
    const error = refusedAt(spec({ workspace: "/work/repo" }), "workspace", "$.workspace")
    assert.include(error.detail, "write under /work/repo reaches /work/repo/.git")
    assert.isTrue(Either.isRight(PolicyNarrowing.check(spec({ workspace: "/work/ws2" }), policy)))
  })

  it("hostile roots: a glob that widens, and `..` (past the schema), are refused", () => {
    // `/work/*` is a valid path to the spec's schema, and a provider may read it as a pattern.
    const glob = refusedAt(
      spec({ workspace: "/work/ws2", filesystem: { write_roots: ["/work/*"] } }),
      "filesystem",
      "$.filesystem.write_roots.0"
    )
    assert.include(glob.detail, "a glob in a root widens it")
    refusedAt(
      spec({ workspace: "/work/ws2", filesystem: { read_roots: ["/work/ws2/[a-z]"] } }),
      "filesystem",
      "$.filesystem.read_roots.0"
    )
    // The schema refuses `..`; a spec built past it (not decoded) is refused here too.
    assert.isTrue(Either.isLeft(HarnessSpec.decode({ ...base, filesystem: { write_roots: ["/work/../etc"] } })))
    const forged = {
      ...spec({ workspace: "/work/ws2" }),
      filesystem: { read_roots: [], write_roots: ["/work/../etc"], deny_read: [] }
    }
    const climbed = refusedAt(forged, "filesystem", "$.filesystem.write_roots.0")
    assert.include(climbed.detail, "not a normalised absolute path")
    const workspace = { ...spec(), workspace: "/work/ws/../../etc" }
    refusedAt(workspace, "workspace", "$.workspace")
  })

  it("network: a domain pattern wider than the policy's destinations, or meeting a denied one, is refused", () => {
    refusedAt(spec({ network: { allow_domains: ["*"] } }), "network", "$.network.allow_domains.0")
    refusedAt(spec({ network: { allow_domains: ["*.com"] } }), "network", "$.network.allow_domains.0")
    refusedAt(spec({ network: { allow_domains: ["example.org"] } }), "network", "$.network.allow_domains.0")
    // Only port 443 is allowed there: a domain grant is for every port.
    refusedAt(spec({ network: { allow_domains: ["api.other.org"] } }), "network", "$.network.allow_domains.0")
    const denied = refusedAt(
      spec({ network: { allow_domains: ["docs.example.com", "e*.example.com"] } }),
      "network",
      "$.network.allow_domains.1"
    )
    assert.include(denied.detail, "evil.example.com:*")
    refusedAt(spec({ network: { allow_domains: ["evil.example.com"] } }), "network", "$.network.allow_domains.0")
  })

  it("subprocess: a shell without the callback must keep every denied executable", () => {
    const open = { tools: { allow: ["Bash"], callback: false } }
    // With the callback each command is the policy's to decide; without it, the spec must deny curl itself...
    const kept = spec({ ...open, subprocess: { deny_commands: [] } })
    const error = refusal(kept)
    assert.strictEqual(error.section, "subprocess")
    assert.include(error.detail, "does not deny curl")
    // ...and then the tools section is still wider: shell.exec is allowed for `git *` only.
    refusedAt(spec({ ...open, subprocess: { deny_commands: ["curl"] } }), "tools", "$.tools.allow.0")
  })

  it("environment: a variable the policy forbids, or never grants, is refused", () => {
    refusedAt(spec({ environment: { allow: ["PATH", "HOME"] } }), "environment", "$.environment.allow.1")
    refusedAt(
      spec({ environment: { secrets: [{ name: "GH_ADMIN_TOKEN", ref: "env:X" }] } }),
      "environment",
      "$.environment.secrets.0.name"
    )
  })

  it("mcp: a tool pattern that may reach a denied tool, or a tool never allowed, is refused", () => {
    refusedAt(spec({ mcp: [{ server: "writ", tools: ["*"] }] }), "mcp", "$.mcp.0.tools.0")
    refusedAt(spec({ mcp: [{ server: "writ", tools: ["ex*"] }] }), "mcp", "$.mcp.0.tools.0")
    refusedAt(spec({ mcp: [{ server: "writ", tools: [] }] }), "mcp", "$.mcp.0.tools")
    refusedAt(spec({ mcp: [{ server: "other", tools: ["exec"] }] }), "mcp", "$.mcp.0.tools.0")
  })

  it("tools: a tool the policy never allows, or denies outright, is refused", async () => {
    refusedAt(spec({ tools: { allow: ["Read", "WebFetch"], callback: true } }), "tools", "$.tools.allow.1")
    refusedAt(spec({ tools: { allow: ["Read", "Task"], callback: true } }), "tools", "$.tools.allow.1")
    // Without the callback, no allow list is every tool.
    refusedAt(spec({ tools: { allow: [], callback: false } }), "subprocess", "$.subprocess.deny_commands")
    const noShellRules = await snapshotOf([
      { kind: "action", effect: "allow", action_patterns: ["files.*"], operations: ["*"] },
      { kind: "action", effect: "allow", action_patterns: ["shell.exec"], operations: ["git *"] }
    ])
    const open = spec({
      filesystem: { read_roots: [], write_roots: [], deny_read: [] },
      network: { allow_domains: [] },
      environment: {},
      mcp: [],
      tools: { allow: [], callback: false }
    })
    const error = refusal(open, noShellRules)
    assert.deepStrictEqual([error.section, error.path], ["tools", "$.tools.allow"])
    const readOnly = { ...open, tools: { ...open.tools, allow: ["Read"] } }
    assert.isTrue(Either.isRight(PolicyNarrowing.check(readOnly, noShellRules)))
  })

  it("a kind of rule the policy has none of restricts nothing there, as at the executor's guards", async () => {
    const actionsOnly = await snapshotOf([{
      kind: "action",
      effect: "allow",
      action_patterns: ["shell.exec"],
      operations: ["touch *"]
    }])
    const s = spec({ tools: { allow: ["Bash"], callback: true } })
    assert.isTrue(Either.isRight(PolicyNarrowing.check(s, actionsOnly)))
    // With the callback, no allow list is every tool, each call decided by the snapshot: nothing granted past it.
    assert.isTrue(Either.isRight(PolicyNarrowing.check(spec({ tools: { callback: true } }), actionsOnly)))
    // writ_only: the built-in tools are off and every call reaches writ's executor, so no allow list grants nothing.
    assert.isTrue(Either.isRight(PolicyNarrowing.check(spec({ tools: { writ_only: true } }), actionsOnly)))
    assert.isTrue(
      Either.isLeft(PolicyNarrowing.check(spec({ tools: {} }), actionsOnly)),
      "no allow list, writ not deciding"
    )
  })

  it.effect("prepare refuses a wider spec before the adapter compiles anything", () =>
    Effect.gen(function*() {
      let compiled = 0
      const service: HarnessAdapter.HarnessAdapter.Service = {
        provider: "claude-code",
        probe: Effect.succeed(
          new HarnessAdapter.ProbeResult({ provider: "claude-code", executable: null, version: null, notes: [] })
        ),
        compile: () => Effect.sync(() => compiled++).pipe(Effect.zipRight(Effect.die("not reached"))),
        spawn: () => Effect.die("not reached")
      }
      const wide = spec({ network: { allow_domains: ["*"] } })
      const error = yield* Effect.flip(
        HarnessAdapter.prepare(service, { spec: wide, prompt: "p", home: "/h", verifications: [], policy })
      )
      assert.strictEqual(error._tag, "SpecWiderThanPolicy")
      assert.strictEqual(compiled, 0)
    }))
})
