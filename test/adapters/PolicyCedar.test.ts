/**
 * Differential test: writ's compiled policy evaluation against Cedar (cedar-wasm) on generated
 * policies and requests in the subset both share (action and origin rules, principal scope, the
 * refusals of unnormalisable paths and opaque shell commands, host-built invocation contexts).
 * Node only: cedar-wasm's Node build loads its module with `fs`.
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { setFlagsFromString } from "node:v8"
import * as PolicyEvaluator from "../../core/policy/PolicyEvaluator.ts"
import type { ActionRule, Caller, InvocationKind, OriginRule, SubsetPolicy, SubsetRequest } from "../fixtures/cedar.ts"
import { cedarDecision, compileWrit, toCedar, toCedarRequest, toPolicyInput, writDecision } from "../fixtures/cedar.ts"

// Node 20's V8 can abort when it deoptimises a JS->Wasm call it inlined into a hot loop over
// cedar-wasm (see bench/policy.ts); this worker does not inline them.
setFlagsFromString("--no-turbo-inline-js-wasm-calls")

const RUNS = 1_000
const MIN_PAIRS = 12_000

// Regex metacharacters ("+", "?", "(", "[") must stay literal in both engines.
const exactActions = ["notes.read", "notes.write", "notes.delete", "shell.exec", "calc.add", "web.fetch", "calc.a+d"]
const wildcardActions = ["notes.*", "*.read", "shell.*", "*", "*.*", "notes.read*", "*e*", "calc.*", "calc.a?*", "[n]*"]
const requestActions = [
  ...exactActions,
  "notes.readme",
  "files.read",
  "calc",
  "web.fetcher",
  "notes",
  "calc.aad",
  "calc.a?d",
  "[n]otes.read"
]
const operations = [
  "git *",
  "git status",
  "git",
  "ls",
  "rm",
  "rm*",
  "*rm",
  "sudo",
  "make *",
  "/work/*",
  "/work/notes/a.md",
  "*.md",
  "notes.read",
  "calc.*",
  "*"
]
const principalPatterns = ["alice", "bob", "team-*", "team-a", "*", "*-ops", "svc-*"]
const principals = ["alice", "bob", "team-a", "team-b", "carol", "db-ops", "svc-"]
const words = [
  "git",
  "status",
  "push",
  "origin",
  "ls",
  "-la",
  "rm",
  "-rf",
  "/",
  "sudo",
  "/bin/rm",
  "/usr/bin/git",
  "make"
]
const controls = [";", "&&", "||", "|", "`", "$(", "<", ">", "\n", "\r", "&"]
const syntax = ["'x'", "\"x\"", "$HOME", "*.md", "~/x", "{a,b}", "(x)", "[x]", "#c", "!x", "a\\b", "x?"]
const wrappers = ["env", "/usr/bin/env", "sh", "nice", "timeout", "FOO=1", ".", "xargs"]
const paths = [
  "/work/notes/a.md",
  "/work/./notes//a.md",
  "/work/notes/../secrets/k",
  "relative/a.md",
  "/../etc/passwd",
  "/work/notes/b.txt",
  "/"
]
const callers: ReadonlyArray<Caller> = ["USER", "SELF", "OTHER_AGENT"]

const nonEmpty = <A>(arb: fc.Arbitrary<A>, maxLength: number) =>
  fc.array(arb, { minLength: 1, maxLength }) as fc.Arbitrary<unknown> as fc.Arbitrary<readonly [A, ...Array<A>]>

const actionPatterns = nonEmpty(
  fc.oneof(fc.constantFrom(...exactActions), fc.constantFrom(...wildcardActions)),
  3
)

const actionRule: fc.Arbitrary<ActionRule> = fc.record({
  kind: fc.constant("action" as const),
  effect: fc.constantFrom("allow" as const, "allow" as const, "allow" as const, "deny" as const),
  action_patterns: actionPatterns,
  operations: nonEmpty(fc.constantFrom(...operations), 3)
}, { requiredKeys: ["kind", "effect", "action_patterns"] })

const originRule: fc.Arbitrary<OriginRule> = fc.record({
  kind: fc.constant("origin" as const),
  effect: fc.constant("allow" as const),
  action_patterns: actionPatterns,
  callers: fc.subarray([...callers])
})

const rules = fc.array(fc.oneof({ arbitrary: actionRule, weight: 3 }, { arbitrary: originRule, weight: 1 }), {
  maxLength: 8
})

// A third of the policies narrow the principal scope (the default is "*").
const policy: fc.Arbitrary<SubsetPolicy> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ policy_id: fc.constant("diff"), version: fc.constant("1"), rules }) },
  {
    weight: 1,
    arbitrary: fc.record({
      policy_id: fc.constant("diff"),
      version: fc.constant("1"),
      principal_scope: nonEmpty(fc.constantFrom(...principalPatterns), 3),
      rules
    })
  }
)

// Blanks between words, tabs included: a command's first word ends at any of them.
const space = fc.constantFrom(" ", " ", " ", "  ", "\t")
const command: fc.Arbitrary<string> = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom("", "   ") },
  {
    weight: 12,
    arbitrary: fc.tuple(
      fc.constantFrom("", "", "", " ", "\t", "\n"),
      fc.array(
        fc.tuple(
          fc.oneof(
            { weight: 20, arbitrary: fc.constantFrom(...words) },
            { weight: 1, arbitrary: fc.constantFrom(...controls) },
            { weight: 1, arbitrary: fc.constantFrom(...syntax) },
            { weight: 1, arbitrary: fc.constantFrom(...wrappers) }
          ),
          space
        ),
        { minLength: 1, maxLength: 4 }
      ),
      fc.constantFrom("", "", "", " ", "\n")
    ).map(([lead, tokens, trail]) =>
      lead + tokens.map(([token, sep], i) => (i === 0 ? "" : sep) + token).join("") + trail
    )
  }
)

const invocation = fc.constantFrom<InvocationKind>(
  "none",
  "unknown",
  "user",
  "autonomous",
  "other_agent",
  "delegated_by_user",
  "delegated_by_self"
)
const principal = fc.constantFrom(...principals)

// Shell calls carry a command; any action (shell.exec included) may carry a path or nothing.
const request: fc.Arbitrary<SubsetRequest> = fc.oneof(
  fc.record({
    action: fc.constant("shell.exec"),
    principal,
    invocation,
    command
  }),
  fc.record({
    action: fc.constantFrom(...requestActions),
    principal,
    invocation,
    path: fc.constantFrom(...paths)
  }, { requiredKeys: ["action", "principal", "invocation"] })
)

/** writ's reason code: the guard's when it refuses, else the policy part's. */
const writCode = (gate: PolicyEvaluator.CompiledGate, r: SubsetRequest) => {
  const input = toPolicyInput(r)
  const guard = PolicyEvaluator.evaluate(gate, "guard", input)
  return guard.disposition === "allow" ? PolicyEvaluator.evaluate(gate, "policy", input).code : guard.code
}

const cedarCall = (r: SubsetRequest) => ({ ...toCedarRequest(r), entities: [] })

const report = (p: SubsetPolicy, text: string, r: SubsetRequest, writ: string, code: string, other: string) =>
  [
    `writ says ${writ} (${code}), Cedar says ${other}`,
    `policy:  ${JSON.stringify(p)}`,
    `request: ${JSON.stringify(r)}`,
    `cedar request: ${JSON.stringify(toCedarRequest(r))}`,
    "cedar policies:",
    text
  ].join("\n")

describe("writ policy vs Cedar", () => {
  it("hand-picked cases decide as documented on both engines", () => {
    const p: SubsetPolicy = {
      policy_id: "hand",
      version: "1",
      principal_scope: ["team-*", "alice"],
      rules: [
        { kind: "action", effect: "allow", action_patterns: ["notes.*", "shell.exec"], operations: ["*"] },
        { kind: "action", effect: "deny", action_patterns: ["notes.delete"] },
        { kind: "action", effect: "deny", action_patterns: ["shell.*"], operations: ["rm", "sudo"] },
        { kind: "origin", effect: "allow", action_patterns: ["notes.write"], callers: ["USER"] }
      ]
    }
    const gate = compileWrit(p)
    const text = toCedar(p)
    assert.isTrue(cedar.preparsePolicySet("hand", { staticPolicies: text }).type === "success", text)
    const cases: ReadonlyArray<readonly [SubsetRequest, "allow" | "deny"]> = [
      [{ action: "notes.read", principal: "alice", invocation: "none" }, "allow"],
      [{ action: "notes.read", principal: "mallory", invocation: "none" }, "deny"],
      [{ action: "notes.delete", principal: "team-a", invocation: "none" }, "deny"],
      [{ action: "notes.write", principal: "team-a", invocation: "user" }, "allow"],
      [{ action: "notes.write", principal: "team-a", invocation: "delegated_by_user" }, "deny"],
      [{ action: "notes.write", principal: "team-a", invocation: "unknown" }, "deny"],
      [{ action: "notes.write", principal: "team-a", invocation: "none" }, "deny"],
      [{ action: "shell.exec", principal: "alice", invocation: "none", command: "git status" }, "allow"],
      [{ action: "shell.exec", principal: "alice", invocation: "none", command: "/bin/rm -rf /" }, "deny"],
      [{ action: "shell.exec", principal: "alice", invocation: "none", command: "ls; sudo x" }, "deny"],
      [{ action: "shell.exec", principal: "alice", invocation: "none", command: "/usr/bin/env rm x" }, "deny"],
      [{ action: "shell.exec", principal: "alice", invocation: "none", command: "git log '*'" }, "deny"],
      [{ action: "notes.read", principal: "alice", invocation: "none", path: "/work/./notes//a.md" }, "allow"],
      [{ action: "notes.read", principal: "alice", invocation: "none", path: "notes/a.md" }, "deny"],
      [{ action: "calc.add", principal: "alice", invocation: "none" }, "deny"]
    ]
    for (const [r, expected] of cases) {
      const call = cedarCall(r)
      const detail = report(p, text, r, writDecision(gate, toPolicyInput(r)), writCode(gate, r), "")
      assert.strictEqual(writDecision(gate, toPolicyInput(r)), expected, detail)
      assert.strictEqual(cedarDecision(cedar.isAuthorized({ ...call, policies: { staticPolicies: text } })), expected)
      assert.strictEqual(cedarDecision(cedar.statefulIsAuthorized({ ...call, preparsedPolicySetId: "hand" })), expected)
    }
  })

  // Found by this differential test: a tab once extended the "first word", so `*/bin/ls` allowed `rm`.
  it("a wildcard operation matches only the first word, whatever the blank between words", () => {
    const p: SubsetPolicy = {
      policy_id: "tab",
      version: "1",
      rules: [{ kind: "action", effect: "allow", action_patterns: ["shell.exec"], operations: ["*/bin/ls"] }]
    }
    const text = toCedar(p)
    const gate = compileWrit(p)
    for (const command of ["/usr/bin/ls -la", "rm -rf /bin/ls x", "rm\t-rf\t/bin/ls /home"]) {
      const r: SubsetRequest = { action: "shell.exec", principal: "alice", invocation: "none", command }
      const other = cedarDecision(cedar.isAuthorized({ ...cedarCall(r), policies: { staticPolicies: text } }))
      const writ = writDecision(gate, toPolicyInput(r))
      assert.strictEqual(writ, other, report(p, text, r, writ, writCode(gate, r), other))
    }
  })

  it("decides every generated (policy, request) pair as Cedar does", () => {
    let pairs = 0
    const decisions = { allow: 0, deny: 0 }
    const codes = new Map<string, number>()
    fc.assert(
      fc.property(policy, fc.array(request, { minLength: 10, maxLength: 22 }), (p, requests) => {
        const gate = compileWrit(p)
        const text = toCedar(p)
        const parsed = cedar.preparsePolicySet("diff", { staticPolicies: text })
        if (parsed.type === "failure") throw new Error(`Cedar rejects:\n${text}\n${JSON.stringify(parsed.errors)}`)
        requests.forEach((r, i) => {
          const writ = writDecision(gate, toPolicyInput(r))
          const code = writCode(gate, r)
          const call = cedarCall(r)
          const stateful = cedar.statefulIsAuthorized({ ...call, preparsedPolicySetId: "diff" })
          const other = cedarDecision(stateful)
          if (writ !== other) {
            const reason = stateful.type === "success" ? stateful.response.diagnostics.reason : []
            throw new Error(report(p, text, r, writ, code, `${other} (policies ${JSON.stringify(reason)})`))
          }
          // The stateless call must agree with the preparsed one.
          if (i === 0) {
            const stateless = cedarDecision(cedar.isAuthorized({ ...call, policies: { staticPolicies: text } }))
            if (stateless !== other) throw new Error(report(p, text, r, writ, code, `isAuthorized ${stateless}`))
          }
          pairs++
          decisions[writ]++
          codes.set(code, (codes.get(code) ?? 0) + 1)
        })
      }),
      { numRuns: RUNS }
    )
    const summary = `${pairs} pairs, ${JSON.stringify(decisions)}, codes ${JSON.stringify(Object.fromEntries(codes))}`
    console.log(`writ vs Cedar: ${summary}`)
    assert.isAtLeast(pairs, MIN_PAIRS, summary)
    // Neither engine may win by always saying the same thing: every path of the subset is exercised.
    assert.isAtLeast(decisions.allow, pairs / 20, summary)
    assert.isAtLeast(decisions.deny, pairs / 20, summary)
    for (
      const code of [
        "policy.allowed",
        "policy.denied",
        "policy.no_match",
        "policy.out_of_scope",
        "origin.not_allowed",
        "origin.unknown",
        "shell.control_operator",
        "shell.unsafe_syntax",
        "shell.indirect_execution",
        "path.invalid"
      ]
    ) assert.isAtLeast(codes.get(code) ?? 0, 20, `${code} too rare: ${summary}`)
  }, 60_000)
})
