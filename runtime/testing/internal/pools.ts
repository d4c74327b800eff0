/** The value pools and small combinators the arbitraries draw from. */
import fc from "fast-check"
import * as Time from "../../../core/base/Time.ts"
import type { ExecutionCaller } from "../../../core/policy/InvocationContext.ts"
import type { DeclaredRule } from "../../../core/policy/PermissionPolicy.ts"

export type NonEmpty<A> = readonly [A, ...Array<A>]
export type WireRule = typeof DeclaredRule.Encoded

// ---------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------

/** The action names arbitraries use when none are given. */
export const defaultActions: ReadonlyArray<string> = [
  "notes.read",
  "notes.write",
  "notes.search",
  "files.read",
  "files.write",
  "files.delete",
  "shell.exec",
  "web.fetch",
  "calc.add"
]

/** The principals (and executor ids) arbitraries draw from. */
export const principals: ReadonlyArray<string> = ["alice", "bob", "team-a", "team-b", "svc-1"]

export const principalPatterns = ["*", "alice", "bob", "team-*", "team-a", "svc-*", "*-b"]
export const tenants = ["acme", "globex", "initech"]
export const tenantPatterns = ["*", "acme", "globex", "*ex*"]
export const commandPatterns = ["*", "git *", "git status", "git push *", "ls", "rm", "rm *", "sudo", "make *", "kill"]
export const pathPatterns = ["/work/*", "/etc/*", "*.md", "/tmp/*"]
// Strings a YAML or JSON writer must quote or escape to read back unchanged.
export const awkward = [
  "null",
  "true",
  "~",
  "0x10",
  "1e3",
  "- x",
  "#x",
  "a: b",
  "'q'",
  "\"q\"",
  "&a",
  "!tag",
  " lead",
  "a\nb",
  "__proto__"
]
export const roots = ["/", "/work", "/work/src", "/work/secrets", "/tmp", "/etc"]
export const destinations = ["api.example.com:443", "*.example.com:443", "evil.example:80", "*:443", "*"]
export const executables = ["git", "ls", "rm", "sudo", "curl", "*", "/usr/bin/*"]
export const commands = [
  "git status",
  "git push origin main",
  "ls -la",
  "rm -rf /",
  "sudo ls",
  "/usr/bin/sudo ls",
  "make",
  "kill 1",
  "curl x",
  "ls; rm x",
  "echo $(id)"
]
export const paths = [
  "/work/src/a.ts",
  "/work/secrets/key",
  "/work/notes/todo.md",
  "/etc/passwd",
  "/tmp/x",
  "/work/../etc/x",
  "rel"
]
export const urls = ["https://api.example.com/v1", "https://x.example.com/", "http://evil.example:80/", "not a url"]
export const addresses = ["127.0.0.1:8080", "api.example.com:443", "evil.example:80", "0.0.0.0:22", "no port"]
export const hosts = ["api.example.com", "x.example.com", "evil.example", "not a host"]
export const effects = [
  "filesystem.read",
  "filesystem.write",
  "filesystem.execute",
  "shell.exec",
  "network.connect",
  "network.listen",
  "network.resolve"
]
// Declared needs, against the mcp, secret_exposure and environment rule pools below.
export const servers = ["github", "jira", "gitlab"]
export const tools = ["search", "create_issue", "delete_repo"]
export const resources = ["repo://writ", "issue://1", "file:///etc/passwd"]
export const namespaces = ["github/token", "aws/root", "slack/webhook"]
export const variables = ["PATH", "AWS_SECRET_ACCESS_KEY", "TERM"]
export const callers: Array<ExecutionCaller> = ["USER", "SELF", "OTHER_AGENT"]
export const agents = ["agent-a", "agent-b", "agent-c"]
export const humans = ["local-chat", "alice", "bob"]
export const roles = ["viewer", "planner", "ops"]

// 2024-01-01 .. 2030-01-01, in microseconds.
export const EARLIEST = 1_704_067_200_000_000
export const LATEST = 1_893_456_000_000_000

export const nonEmpty = <A>(arb: fc.Arbitrary<A>, max = 3): fc.Arbitrary<NonEmpty<A>> =>
  fc.tuple(arb, fc.array(arb, { maxLength: max - 1 })).map(([head, tail]): NonEmpty<A> => [head, ...tail])

export const nonEmptyUnique = <A>(values: ReadonlyArray<A>): fc.Arbitrary<NonEmpty<A>> =>
  fc.shuffledSubarray([...values], { minLength: 1 }).map(([head, ...tail]): NonEmpty<A> => [head!, ...tail])

/** Free text that is a valid, trimmed, non-"inherit" string (unicode included). */
export const text = (maxLength: number) =>
  fc.string({ unit: "grapheme", minLength: 1, maxLength })
    .filter((s) => s.trim() === s && s.length > 0 && s.toLowerCase() !== "inherit")

/** An Identifier in its decoded (trimmed) form: mostly short ASCII ids, sometimes any text. */
export const identifier: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.stringMatching(/^[a-z][a-z0-9-]{0,11}$/), weight: 4 },
  { arbitrary: text(24), weight: 1 }
)

/** A UTC timestamp with microseconds between 2024 and 2030. */
export const timestamp: fc.Arbitrary<Time.Timestamp> = fc.integer({ min: EARLIEST, max: LATEST }).map(Time.fromMicros)

/** A glob over the given action names: exact names, `*`, `prefix.*` and `*.suffix`. */
export const actionPattern = (actions: ReadonlyArray<string> = defaultActions): fc.Arbitrary<string> => {
  const prefixes = [...new Set(actions.map((a) => a.split(".")[0]!))].map((p) => `${p}.*`)
  const suffixes = [...new Set(actions.flatMap((a) => (a.includes(".") ? [a.slice(a.indexOf(".") + 1)] : [])))]
    .map((s) => `*.${s}`)
  return fc.oneof(
    { arbitrary: fc.constantFrom(...actions), weight: 4 },
    { arbitrary: fc.constant("*"), weight: 1 },
    { arbitrary: fc.constantFrom(...prefixes, ...suffixes), weight: 2 }
  )
}

/** A salient-argument pattern: shell commands, paths, `*`, and occasionally free or awkward text. */
export const operationPattern: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...commandPatterns), weight: 6 },
  { arbitrary: fc.constantFrom(...pathPatterns), weight: 2 },
  { arbitrary: text(16), weight: 1 },
  { arbitrary: fc.constantFrom(...awkward), weight: 1 }
)

/** fast-check record options: plain objects, as JSON would give. */
export const record = { noNullPrototype: true } as const
