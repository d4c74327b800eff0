import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as Time from "../../core/base/Time.ts"
import * as InvocationContext from "../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import * as PolicyEvaluator from "../../core/policy/PolicyEvaluator.ts"
import type { PolicyInput } from "../../core/policy/PolicyEvaluator.ts"
import * as PolicyGate from "../../core/policy/PolicyGate.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"

const snapshotOf = (declaration: Record<string, unknown>) =>
  PolicySnapshot.compile(Either.getOrThrow(PermissionPolicy.decode({ policy_id: "p", version: "1", ...declaration })))
    .pipe(Effect.provide(WebCryptoDigest.layer), Effect.orDie)

/** A decider over the policy: "allow", or "<disposition> <code>" from guard then policy, as the executor reduces gates. */
const decider = (declaration: Record<string, unknown>) =>
  Effect.map(snapshotOf(declaration), (snapshot) => {
    const pinned = PolicyGate.pinned(snapshot)
    return (input: Partial<PolicyInput> & { readonly action: string }) => {
      const verdict = PolicyGate.explain(pinned, { effects: [], arguments: {}, principal: "alice", now: 0, ...input })
      return verdict.disposition === "allow" ? "allow" : `${verdict.disposition} ${verdict.code}`
    }
  })

const shell = (command: string) => ({ action: "shell.exec", effects: ["shell.exec"], arguments: { command } })

describe("policy presets", () => {
  it.effect("deny_all denies and allow_all allows", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* decider({ mode: "deny_all" }))({ action: "notes.read" }), "deny policy.denied")
      assert.strictEqual((yield* decider({ mode: "allow_all" }))({ action: "notes.read" }), "allow")
    }))

  it.effect("read_only allows readers and search, denies editors and shell", () =>
    Effect.gen(function*() {
      const d = yield* decider({ mode: "read_only" })
      assert.strictEqual(d({ action: "notes.read" }), "allow")
      assert.strictEqual(d({ action: "docs.search" }), "allow")
      assert.strictEqual(d({ action: "files.write" }), "deny policy.denied")
      assert.strictEqual(d(shell("ls")), "deny policy.denied")
      assert.strictEqual(d({ action: "calc.add" }), "deny policy.no_match")
    }))

  it.effect("safe allows non-shell tools, denies dangerous commands, escalates other shell commands", () =>
    Effect.gen(function*() {
      const d = yield* decider({ mode: "safe", approver_class: "maintainer" })
      assert.strictEqual(d({ action: "files.write" }), "allow")
      assert.strictEqual(d(shell("rm -rf /")), "deny policy.denied")
      assert.strictEqual(d(shell("/usr/bin/sudo ls")), "deny policy.denied")
      assert.strictEqual(d(shell("kill 1")), "deny policy.denied")
      assert.strictEqual(d(shell("ls -la")), "escalate approval.required")
      assert.strictEqual((yield* decider({ mode: "safe" }))(shell("ls")), "deny approval.no_authority")
    }))
})

describe("rules mode", () => {
  it.effect("deny, then allow, then escalate; action-specific before *; default deny", () =>
    Effect.gen(function*() {
      const d = yield* decider({
        approver_class: "ops",
        deny: { "shell.exec": ["git push *"] },
        allow: { "shell.exec": ["git *", "ls"], "*": ["*"] },
        escalate: { "shell.exec": ["*"] }
      })
      assert.strictEqual(d(shell("git push origin main")), "deny policy.denied")
      assert.strictEqual(d(shell("git status")), "allow")
      assert.strictEqual(d(shell("ls -la")), "allow")
      assert.strictEqual(d(shell("make")), "escalate approval.required")
      assert.strictEqual(d({ action: "notes.read" }), "allow")
      assert.strictEqual(
        (yield* decider({ allow: { "notes.read": ["*"] } }))({ action: "notes.write" }),
        "deny policy.no_match"
      )
    }))

  it.effect("a shell control operator is denied before any rule", () =>
    Effect.gen(function*() {
      const d = yield* decider({ mode: "allow_all" })
      for (
        const command of [
          "ls; rm -rf /",
          "ls && rm x",
          "ls || x",
          "ls | sh",
          "echo `id`",
          "echo $(id)",
          "cat < /etc/passwd",
          "echo > x",
          "ls\nrm x"
        ]
      ) {
        assert.strictEqual(d(shell(command)), "deny shell.control_operator", command)
      }
    }))

  it.effect("commands that hide what runs are denied before any rule, whatever the allow list", () =>
    Effect.gen(function*() {
      const d = yield* decider({ deny: { "shell.exec": ["rm", "sudo"] }, allow: { "shell.exec": ["*"] } })
      const refusals = {
        "\\rm -rf /": "shell.unsafe_syntax",
        "FOO=1 rm -rf /": "shell.unsafe_syntax",
        "rm${IFS}-rf${IFS}/": "shell.unsafe_syntax",
        "s\"\"udo id": "shell.unsafe_syntax",
        "ls *.ts": "shell.unsafe_syntax",
        "command rm -rf /": "shell.indirect_execution",
        "/usr/bin/env rm x": "shell.indirect_execution",
        "sh -c id": "shell.indirect_execution",
        "xargs rm": "shell.indirect_execution"
      }
      for (const [command, code] of Object.entries(refusals)) {
        assert.strictEqual(d(shell(command)), `deny ${code}`, command)
      }
      assert.strictEqual(d(shell("/bin/rm -rf /")), "deny policy.denied")
      assert.strictEqual(d(shell("git status")), "allow")
    }))

  it.effect("a relative or escaping path is denied even where no filesystem rule applies", () =>
    Effect.gen(function*() {
      const d = yield* decider({ deny: { "fs.read": ["/etc/*"] }, allow: { "fs.read": ["*"] } })
      const read = (path: string) => d({ action: "fs.read", arguments: { path } })
      assert.strictEqual(read("../../../../etc/shadow"), "deny path.invalid")
      assert.strictEqual(read("/tmp/../etc/shadow"), "deny policy.denied")
      assert.strictEqual(read("/tmp/notes"), "allow")
    }))

  it.effect("paths are normalised before matching, and a path escaping a root is denied", () =>
    Effect.gen(function*() {
      const d = yield* decider({
        mode: "allow_all",
        rules: [
          { kind: "filesystem", effect: "allow", roots: ["/work"], modes: ["read", "write"] },
          { kind: "filesystem", effect: "deny", roots: ["/work/secrets"], modes: ["read", "write"] }
        ]
      })
      const write = (path: string) => d({ action: "files.write", effects: ["filesystem.write"], arguments: { path } })
      assert.strictEqual(write("/work/src/a.ts"), "allow")
      assert.strictEqual(write("/work/src/../../etc/passwd"), "deny filesystem.outside_roots")
      assert.strictEqual(write("/workshop/x"), "deny filesystem.outside_roots")
      assert.strictEqual(write("/work/./secrets//key"), "deny filesystem.denied")
      assert.strictEqual(write("relative/path"), "deny path.invalid")
    }))

  it.effect("subprocess and network rules guard their arguments", () =>
    Effect.gen(function*() {
      const d = yield* decider({
        mode: "allow_all",
        rules: [
          { kind: "subprocess", effect: "allow", executable_patterns: ["git", "ls"], shell: "forbid" },
          { kind: "network", effect: "allow", destinations: ["api.example.com:443"], modes: ["connect"] }
        ]
      })
      assert.strictEqual(d(shell("git log")), "allow")
      assert.strictEqual(d(shell("curl x")), "deny subprocess.not_allowed")
      assert.strictEqual(d({ action: "web.fetch", arguments: { url: "https://api.example.com/v1" } }), "allow")
      assert.strictEqual(
        d({ action: "web.fetch", arguments: { url: "http://evil.example:80/" } }),
        "deny network.not_allowed"
      )
    }))

  it.effect("expiry, principal scope and origin rules", () =>
    Effect.gen(function*() {
      const at = (iso: string) => Time.toMicros(Time.Timestamp.make(iso))
      const d = yield* decider({
        mode: "allow_all",
        principal_scope: ["team-*"],
        rules: [
          { kind: "expiry", effect: "allow", expires_at: "2027-01-01T00:00:00.000000Z" },
          { kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] }
        ]
      })
      const now = at("2026-06-01T00:00:00.000000Z")
      assert.strictEqual(d({ action: "calc.add", principal: "team-a", now }), "allow")
      assert.strictEqual(d({ action: "calc.add", principal: "mallory", now }), "deny policy.out_of_scope")
      assert.strictEqual(
        d({ action: "calc.add", principal: "team-a", now: at("2027-02-01T00:00:00.000000Z") }),
        "deny policy.expired"
      )
      const bound_agent = InvocationContext.agent("agent-b")
      const notes = { action: "notes.read", principal: "team-a", now, bound_agent }
      const viaUser = InvocationContext.user(
        InvocationContext.human("h"),
        InvocationContext.agent("agent-a"),
        "team-a",
        {}
      )
      const delegated = InvocationContext.delegateTo(viaUser, bound_agent, "team-a", {})
      assert.strictEqual(d({ ...notes, invocation: delegated }), "allow")
      const selfStarted = InvocationContext.autonomous(bound_agent, "team-a", {})
      assert.strictEqual(d({ ...notes, invocation: selfStarted }), "deny origin.not_allowed")
      const stranger = InvocationContext.autonomous(InvocationContext.agent("x"), "team-a", {})
      assert.strictEqual(d({ ...notes, invocation: stranger }), "deny origin.agent_mismatch")
      assert.strictEqual(d(notes), "deny origin.unknown")
      const expired = InvocationContext.autonomous(bound_agent, "team-a", { expires_at: Time.fromMicros(1) })
      assert.strictEqual(
        d({ action: "calc.add", principal: "team-a", now, invocation: expired }),
        "deny authority.expired"
      )
    }))
})

describe("gate order", () => {
  it.effect("gates run in their `order`, whatever order a stored snapshot lists them in", () =>
    Effect.gen(function*() {
      const snapshot = yield* snapshotOf({
        rules: [{ rule_id: "allow", kind: "action", effect: "allow", action_patterns: ["*"] }],
        gates: [
          { gate_id: "base", level: "hard", order: 0, rule_ids: ["allow"] },
          { gate_id: "review", level: "soft", order: 1, rule_ids: ["allow"] },
          { gate_id: "audit", level: "advisory", order: 2, rule_ids: ["allow"] }
        ]
      })
      const reversed = PolicySnapshot.PolicySnapshot.make({
        ...snapshot,
        gate_bindings: [...snapshot.gate_bindings].reverse()
      })
      assert.deepStrictEqual(reversed.gate_bindings.map((g) => g.gate_id), ["audit", "review", "base"])
      assert.deepStrictEqual(PolicyEvaluator.compile(reversed).map((g) => g.gate.gate_id), ["base", "review", "audit"])
      // Two gates of one order are no snapshot at all.
      const twice = [snapshot.gate_bindings[0]!, { ...snapshot.gate_bindings[1]!, order: 0 }]
      assert.throws(
        () => PolicySnapshot.PolicySnapshot.make({ ...snapshot, gate_bindings: twice }),
        /orders must be unique/
      )
    }))
})
