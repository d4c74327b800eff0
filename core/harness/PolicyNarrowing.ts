/**
 * A spec only narrows its policy: every grant of its sections (workspace, filesystem roots, network domains, the shell
 * without the callback, environment names, MCP grants, tools) must be one the snapshot's rules allow, read as its
 * guards and action policy read them, every rule of every gate counted and a deny anywhere refusing. A kind of rule
 * the snapshot has none of restricts nothing there (its guard passes), as at the executor. Patterns are compared as
 * sets: a spec pattern is within the policy's only when every name it matches is matched, and a spec pattern that may
 * meet a denied one is refused.
 */
import { Either, Schema } from "effect"
import { normalise, within } from "../policy/PolicyPath.ts"
import type { CompiledRule } from "../policy/PolicyRule.ts"
import type { PolicySnapshot } from "../policy/PolicySnapshot.ts"
import { inputOf } from "./HarnessPolicy.ts"
import type { HarnessSpec } from "./HarnessSpec.ts"

/** A spec section a snapshot is checked against. */
export const Section = Schema.Literal(
  "policy",
  "workspace",
  "filesystem",
  "network",
  "subprocess",
  "environment",
  "mcp",
  "tools"
)

/** A spec section a snapshot is checked against. */
export type Section = typeof Section.Type

/** A spec that is not the snapshot's (`policy_mismatch`) or that grants more than it (`wider`), with the field. */
export class SpecWiderThanPolicy extends Schema.TaggedError<SpecWiderThanPolicy>()("SpecWiderThanPolicy", {
  reason: Schema.Literal("policy_mismatch", "wider"),
  section: Section,
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

type RuleOf<K extends CompiledRule["kind"]> = Extract<CompiledRule, { kind: K }>

const rulesOf = <K extends CompiledRule["kind"]>(snapshot: PolicySnapshot, kind: K) =>
  snapshot.compiled_rules.filter((rule): rule is RuleOf<K> => rule.kind === kind)

// --- Patterns: `*` matches any run of characters, everything else is literal (as the evaluator's globs) ---

const escape = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, "\\$&")

const test = (pattern: string, value: string) =>
  pattern === "*" || new RegExp(`^${pattern.split("*").map(escape).join(".*")}$`, "s").test(value)

/**
 * Whether every name `inner` matches, `outer` matches: `outer` matches `inner` read literally (its `*` a character).
 * Sound because a literal of `outer` never matches a `*` of `inner`, so each of those falls inside one of outer's.
 */
export const covers = (outer: string, inner: string): boolean => test(outer, inner)

/** Whether two patterns may match one name: their literal heads and tails agree (never false when they may). */
export const mayMeet = (a: string, b: string): boolean => {
  if (!a.includes("*")) return test(b, a)
  if (!b.includes("*")) return test(a, b)
  const [headA, headB] = [a.slice(0, a.indexOf("*")), b.slice(0, b.indexOf("*"))]
  const [tailA, tailB] = [a.slice(a.lastIndexOf("*") + 1), b.slice(b.lastIndexOf("*") + 1)]
  return (headA.startsWith(headB) || headB.startsWith(headA)) && (tailA.endsWith(tailB) || tailB.endsWith(tailA))
}

// --- Sections ---

type Refusal = { readonly section: Section; readonly path: string; readonly detail: string }

const GLOB = /[*?[\]{}]/

/** A root the spec grants in `mode`; `exempt` says whether the spec itself denies a path the policy denies. */
const rootRefusal = (
  rules: ReadonlyArray<RuleOf<"filesystem">>,
  section: Section,
  path: string,
  root: string,
  mode: "read" | "write",
  exempt: (denied: string) => boolean
): Refusal | undefined => {
  if (GLOB.test(root)) return { section, path, detail: `${root} is a pattern: a glob in a root widens it` }
  if (normalise(root) !== root) return { section, path, detail: `${root} is not a normalised absolute path` }
  if (rules.length === 0) return undefined
  const applicable = rules.filter((rule) => rule.modes.includes(mode))
  const roots = (rule: RuleOf<"filesystem">) => rule.roots.map((r) => normalise(r) ?? r)
  const denied = applicable.filter((rule) => rule.effect === "deny").flatMap(roots)
    .find((d) => within(root, d) || (within(d, root) && !exempt(d)))
  if (denied !== undefined) {
    return { section, path, detail: `${mode} under ${root} reaches ${denied}, which the policy denies` }
  }
  const granted = applicable.some((rule) => rule.effect === "allow" && roots(rule).some((r) => within(root, r)))
  return granted ? undefined : { section, path, detail: `no rule of the policy allows ${mode} under ${root}` }
}

const filesystemRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const rules = rulesOf(snapshot, "filesystem")
  const never = () => false
  const denyRead = (denied: string) => spec.filesystem.deny_read.some((d) => within(denied, d))
  const checks = [
    ...(["read", "write"] as const).map((mode) => () =>
      rootRefusal(rules, "workspace", "$.workspace", spec.workspace, mode, mode === "read" ? denyRead : never)
    ),
    ...spec.filesystem.write_roots.map((root, i) => () =>
      rootRefusal(rules, "filesystem", `$.filesystem.write_roots.${i}`, root, "write", never)
    ),
    ...spec.filesystem.read_roots.map((root, i) => () =>
      rootRefusal(rules, "filesystem", `$.filesystem.read_roots.${i}`, root, "read", denyRead)
    )
  ]
  for (const check of checks) {
    const refused = check()
    if (refused !== undefined) return refused
  }
  return undefined
}

/** A domain the spec allows, on any port: an allow rule's destination must be `HOST:*` (or `*`) with HOST covering it. */
const networkRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const rules = rulesOf(snapshot, "network").filter((rule) => rule.modes.includes("connect"))
  if (rulesOf(snapshot, "network").length === 0) return undefined
  const hostPort = (destination: string) => {
    const d = destination.toLowerCase()
    const colon = d.lastIndexOf(":")
    return colon < 0 ? { host: d, port: d === "*" ? "*" : "" } : { host: d.slice(0, colon), port: d.slice(colon + 1) }
  }
  for (const [i, raw] of spec.network.allow_domains.entries()) {
    const domain = raw.toLowerCase()
    const path = `$.network.allow_domains.${i}`
    const denied = rules.filter((rule) => rule.effect === "deny").flatMap((rule) => rule.destinations)
      .find((d) => mayMeet(hostPort(d).host, domain))
    if (denied !== undefined) {
      return { section: "network", path, detail: `${raw} may reach ${denied}, which the policy denies` }
    }
    const granted = rules.filter((rule) => rule.effect === "allow").flatMap((rule) => rule.destinations)
      .some((d) => hostPort(d).port === "*" && covers(hostPort(d).host, domain))
    if (!granted) {
      return { section: "network", path, detail: `no rule of the policy allows connecting to ${raw} on every port` }
    }
  }
  return undefined
}

const principal = "harness"

/** The writ action each tool amounts to, as the blocking callback names it. */
const actionOf = (tool: string) => inputOf({ tool, input: {}, call_id: "" }, principal, 0).action

const shellTools = ["Bash", "run_shell_command"]

/**
 * Whether every tool call is writ's to decide: the callback decides each one, or `writ_only` turns the built-in tools
 * off so that each reaches writ's executor through its MCP server (a provider that cannot turn one off reports
 * `route.completeness@1` degraded, so a spec requiring it fails before spawn).
 */
const writDecides = (spec: HarnessSpec) => spec.tools.callback || spec.tools.writ_only

/** Whether the spec lets the agent's shell run any command writ never sees: a shell tool writ does not decide. */
const openShell = (spec: HarnessSpec) =>
  !writDecides(spec) && (spec.tools.allow.length === 0 || spec.tools.allow.some((t) => shellTools.includes(t)))

/** A shell open without the callback runs any executable: the policy's subprocess rules must all be ones the spec keeps. */
const subprocessRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const rules = rulesOf(snapshot, "subprocess")
  if (rules.length === 0 || !openShell(spec)) return undefined
  const path = "$.subprocess.deny_commands"
  const unkept = rules.filter((rule) => rule.effect === "deny").flatMap((rule) => rule.executable_patterns)
    .find((pattern) => !spec.subprocess.deny_commands.includes(pattern))
  if (unkept !== undefined) {
    return { section: "subprocess", path, detail: `the shell runs without the callback, and does not deny ${unkept}` }
  }
  const open = rules.some((rule) =>
    rule.effect === "allow" && rule.shell === "allow" && rule.executable_patterns.includes("*")
  )
  return open ? undefined : {
    section: "subprocess",
    path,
    detail: "the shell runs any executable without the callback, and the policy allows only some"
  }
}

// Exposures are ordered as at the executor: forbid < read < inject; an environment the CLI starts with is injected.
const EXPOSURE: Readonly<Record<string, number>> = { forbid: 0, read: 1, inject: 2 }

const environmentRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const rules = rulesOf(snapshot, "environment")
  if (rules.length === 0) return undefined
  const names = [
    ...spec.environment.allow.map((name, i) => ({ name, path: `$.environment.allow.${i}` })),
    ...spec.environment.secrets.map(({ name }, i) => ({ name, path: `$.environment.secrets.${i}.name` }))
  ]
  for (const { name, path } of names) {
    const hits = rules.filter((rule) => rule.variable_patterns.some((p) => test(p, name)))
    const denied = hits.find((rule) => rule.effect === "deny" || rule.exposure === "forbid")
    if (denied !== undefined) {
      return { section: "environment", path, detail: `${name} reaches the CLI's environment; the policy forbids it` }
    }
    if (!hits.some((rule) => rule.effect === "allow" && EXPOSURE[rule.exposure]! >= EXPOSURE.inject!)) {
      return { section: "environment", path, detail: `no rule of the policy lets ${name} into an environment` }
    }
  }
  return undefined
}

/** Each granted MCP tool (no tools: the whole server) must be allowed, and meet no denied one. */
const mcpRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const rules = rulesOf(snapshot, "mcp")
  if (rules.length === 0) return undefined
  const whole = (rule: RuleOf<"mcp">) => rule.tool_patterns.length === 0 && rule.resource_patterns.length === 0
  for (const [i, grant] of spec.mcp.entries()) {
    const tools = grant.tools.length === 0 ?
      [{ tool: "*", path: `$.mcp.${i}.tools` }] :
      grant.tools.map((tool, j) => ({ tool, path: `$.mcp.${i}.tools.${j}` }))
    for (const { path, tool } of tools) {
      const label = grant.tools.length === 0 ? `every tool of ${grant.server}` : `${grant.server} tool ${tool}`
      const denied = rules.some((rule) =>
        rule.effect === "deny" && rule.server_patterns.some((s) => mayMeet(s, grant.server)) &&
        (whole(rule) || rule.tool_patterns.some((t) => mayMeet(t, tool)))
      )
      if (denied) return { section: "mcp", path, detail: `${label} may reach a tool the policy denies` }
      const granted = rules.some((rule) =>
        rule.effect === "allow" && rule.server_patterns.some((s) => covers(s, grant.server)) &&
        (whole(rule) || rule.tool_patterns.some((t) => covers(t, tool)))
      )
      if (!granted) return { section: "mcp", path, detail: `no rule of the policy allows ${label}` }
    }
  }
  return undefined
}

/**
 * With the callback, each call is decided by the snapshot: a named tool only needs an allow for its action and no
 * outright deny (no allow list grants nothing past the snapshot). Without it, the CLI runs whatever the model asks: the action must be allowed for every argument (an allow
 * whose operations hold `*`) and met by no deny or approval rule; no allow list at all is every tool (`*`).
 */
const toolsRefusal = (spec: HarnessSpec, snapshot: PolicySnapshot): Refusal | undefined => {
  const actions = rulesOf(snapshot, "action")
  const approvals = rulesOf(snapshot, "approval")
  const callback = spec.tools.callback
  // With no allow list and writ deciding every call, each is the snapshot's: nothing here is granted past it.
  if (writDecides(spec) && spec.tools.allow.length === 0) return undefined
  const tools = spec.tools.allow.length === 0
    ? [{ tool: "(every tool)", action: "*", path: "$.tools.allow" }]
    : spec.tools.allow.map((tool, i) => ({ tool, action: actionOf(tool), path: `$.tools.allow.${i}` }))
  for (const { action, path, tool } of tools) {
    const name = action === "*" ? "every action" : action
    const deniedOutright = actions.some((rule) =>
      rule.effect === "deny" && rule.action_patterns.some((p) =>
        mayMeet(p, action)
      ) &&
      (!callback || rule.operations.includes("*"))
    ) || (!callback && approvals.some((rule) => rule.action_patterns.some((p) => mayMeet(p, action))))
    if (deniedOutright) {
      return {
        section: "tools",
        path,
        detail: `${tool} amounts to ${name}, which the policy ${callback ? "denies outright" : "denies or escalates"}`
      }
    }
    const granted = actions.some((rule) =>
      rule.effect === "allow" && rule.action_patterns.some((p) => covers(p, action)) &&
      (callback || rule.operations.includes("*"))
    )
    if (!granted) {
      return {
        section: "tools",
        path,
        detail: callback
          ? `no rule of the policy allows ${name} (${tool})`
          : `without the callback ${tool} runs any ${name}, and the policy does not allow every one`
      }
    }
  }
  return undefined
}

const checks = [
  filesystemRefusal,
  networkRefusal,
  subprocessRefusal,
  environmentRefusal,
  mcpRefusal,
  toolsRefusal
] as const

/**
 * Whether `spec` only narrows `snapshot`: it must name the snapshot (when it names one) and grant nothing wider; the
 * first refusal names its section and field.
 */
export const check = (spec: HarnessSpec, snapshot: PolicySnapshot): Either.Either<void, SpecWiderThanPolicy> => {
  const named = spec.policy
  if (named !== undefined && (named.policy_id !== snapshot.policy_id || named.version !== snapshot.version)) {
    return Either.left(
      new SpecWiderThanPolicy({
        reason: "policy_mismatch",
        section: "policy",
        path: "$.policy",
        detail: `the spec narrows ${named.policy_id}@${named.version}, not ${snapshot.policy_id}@${snapshot.version}`
      })
    )
  }
  for (const refusalOf of checks) {
    const refused = refusalOf(spec, snapshot)
    if (refused !== undefined) return Either.left(new SpecWiderThanPolicy({ reason: "wider", ...refused }))
  }
  return Either.void
}
