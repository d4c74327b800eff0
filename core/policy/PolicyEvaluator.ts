/**
 * Compiled evaluation of a policy snapshot: an index built once per snapshot and gate, so a
 * decision looks only at the rules that can match its action, whatever the rule count.
 */
import type { EnvironmentNeed, McpTool, SecretNeed } from "../action/Action.ts"
import * as Time from "../base/Time.ts"
import type { Glob } from "./internal/glob.ts"
import { commandMatches, glob } from "./internal/glob.ts"
import type { AgentSubject, InvocationContext } from "./InvocationContext.ts"
import { checkOrigin, intersectRestrictions } from "./Origin.ts"
import { normalise, within } from "./PolicyPath.ts"
import type { CompiledRule, GateBinding } from "./PolicyRule.ts"
import type { PolicySnapshot } from "./PolicySnapshot.ts"

/** What a decision is asked about: the action, its normalised arguments, who asks, and when. */
export interface PolicyInput {
  readonly action: string
  /** The action's aliases: a deny written against an alias holds for the action whatever name the call used. */
  readonly aliases?: ReadonlyArray<string>
  readonly effects: ReadonlyArray<string>
  readonly arguments: Readonly<Record<string, unknown>>
  readonly principal: string
  readonly tenant?: string
  /** The invocation context the host established for this call, if any. */
  readonly invocation?: InvocationContext
  /** The `path` argument after the host resolved its symbolic links (see PolicyPath.PathResolver), when it did. */
  readonly resolved_path?: string
  /** The executing agent the executor is bound to. */
  readonly bound_agent?: AgentSubject
  /** The MCP tool the action declares it calls. */
  readonly mcp?: McpTool
  /** The secrets the action declares it needs. */
  readonly secrets?: ReadonlyArray<SecretNeed>
  /** The environment variables the action declares it needs. */
  readonly environment?: ReadonlyArray<EnvironmentNeed>
  readonly now: number
}

/** One gate's decision with its stable reason code and the rules that produced it. */
export interface PolicyDecision {
  readonly disposition: "allow" | "deny" | "escalate"
  readonly code: string
  readonly detail?: string
  readonly matched_rules: ReadonlyArray<string>
  readonly approver_class?: string
  readonly approval_expires_after_microseconds?: number
}

/** Which part of a gate to evaluate: intrinsic guards (stage 6) or the action policy (stage 7). */
export type Part = "guard" | "policy"

interface Matcher<R> {
  readonly rule: R
  readonly actions: ReadonlyArray<Glob>
  readonly operations: ReadonlyArray<Glob>
}

/** A matcher as seen from one action: specific when a pattern other than `*` names it. */
interface Candidate<R> extends Matcher<R> {
  readonly specific: boolean
}

type RuleOf<K extends CompiledRule["kind"]> = Extract<CompiledRule, { kind: K }>

interface ActionView {
  readonly deny: ReadonlyArray<Candidate<RuleOf<"action">>>
  readonly allow: ReadonlyArray<Candidate<RuleOf<"action">>>
  readonly escalate: ReadonlyArray<Candidate<RuleOf<"approval">>>
  readonly origins: ReadonlyArray<RuleOf<"origin">>
}

/** A gate compiled for evaluation. */
export interface CompiledGate {
  readonly gate: GateBinding
  readonly tools: ReadonlyArray<Glob>
  readonly scope: { readonly principals: ReadonlyArray<Glob>; readonly tenants: ReadonlyArray<Glob> }
  readonly expiry: ReadonlyArray<RuleOf<"expiry">>
  readonly filesystem: ReadonlyArray<{ readonly rule: RuleOf<"filesystem">; readonly roots: ReadonlyArray<string> }>
  readonly subprocess: ReadonlyArray<{ readonly rule: RuleOf<"subprocess">; readonly executables: ReadonlyArray<Glob> }>
  readonly network: ReadonlyArray<
    {
      readonly rule: RuleOf<"network">
      readonly destinations: ReadonlyArray<Glob>
      readonly hosts: ReadonlyArray<Glob>
    }
  >
  readonly mcp: ReadonlyArray<McpGrant>
  readonly secrets: ReadonlyArray<{ readonly rule: RuleOf<"secret_exposure">; readonly names: ReadonlyArray<Glob> }>
  readonly environment: ReadonlyArray<{ readonly rule: RuleOf<"environment">; readonly names: ReadonlyArray<Glob> }>
  readonly view: (action: string) => ActionView
}

/** An mcp rule compiled: a rule naming neither tools nor resources covers its whole server. */
interface McpGrant {
  readonly rule: RuleOf<"mcp">
  readonly servers: ReadonlyArray<Glob>
  readonly tools: ReadonlyArray<Glob>
  readonly resources: ReadonlyArray<Glob>
  readonly whole: boolean
}

const CONTROL_OPERATORS = /[;&|`<>\n\r]|\$\(/
const SHELL_SYNTAX = /[\\'"$*?~{}()[\]#!]/
/** Programs that run another program: a command starting with one is refused before any rule. */
export const shellWrappers: ReadonlySet<string> = new Set([
  "env",
  "command",
  "builtin",
  "exec",
  "eval",
  "source",
  ".",
  "sh",
  "bash",
  "zsh",
  "dash",
  "ksh",
  "fish",
  "xargs",
  "nice",
  "nohup",
  "timeout",
  "time",
  "busybox",
  "stdbuf",
  "setsid"
])

/** Arguments no rule may allow, whatever the gates: a path that is relative or climbs above `/`, and a shell
 * command policy cannot reason about (a control operator, shell syntax, an assignment prefix, a wrapper). */
export const intrinsicRefusal = (input: PolicyInput): PolicyDecision | undefined => {
  const path = stringArgument(input, "path")
  if (path !== undefined && normalise(path) === undefined) {
    return decision("deny", "path.invalid", [], "the path is relative or escapes /")
  }
  const command = stringArgument(input, "command")
  if (command === undefined) return undefined
  if (CONTROL_OPERATORS.test(command)) {
    return decision("deny", "shell.control_operator", [], "a shell control operator would run a second command")
  }
  if (SHELL_SYNTAX.test(command)) {
    return decision(
      "deny",
      "shell.unsafe_syntax",
      [],
      "quoting, escapes, expansion or globbing hide the program that runs"
    )
  }
  const [head = ""] = command.trim().split(/\s+/, 1)
  if (head.includes("=")) return decision("deny", "shell.unsafe_syntax", [], "an assignment prefix changes what runs")
  if (shellWrappers.has(head.slice(head.lastIndexOf("/") + 1))) {
    return decision("deny", "shell.indirect_execution", [], `${head} runs another program`)
  }
  return undefined
}

const matcher = <R extends { readonly action_patterns: ReadonlyArray<string> }>(
  rule: R,
  operations: ReadonlyArray<string>
): Matcher<R> => {
  return { rule, actions: rule.action_patterns.map(glob), operations: operations.map(glob) }
}

/** Compile one gate of a snapshot: rules bucketed by kind, action rules indexed by exact name. */
export const compileGate = (snapshot: PolicySnapshot, gate: GateBinding): CompiledGate => {
  const bound = new Set(gate.rule_ids)
  const rules = snapshot.compiled_rules.filter((rule) => bound.has(rule.rule_id))
  const of = <K extends CompiledRule["kind"]>(kind: K) => rules.filter((rule): rule is RuleOf<K> => rule.kind === kind)
  const actionMatchers = of("action").map((rule) => matcher(rule, rule.operations))
  const approvalMatchers = of("approval").map((rule) => matcher(rule, rule.operations))
  const origins = of("origin").map((rule) => ({ rule, actions: rule.action_patterns.map(glob) }))
  const exact = new Map<string, Array<Matcher<RuleOf<"action">> | Matcher<RuleOf<"approval">>>>()
  const wildcard: Array<Matcher<RuleOf<"action">> | Matcher<RuleOf<"approval">>> = []
  for (const m of [...actionMatchers, ...approvalMatchers]) {
    if (m.actions.some((a) => a.wildcard)) wildcard.push(m)
    for (const a of m.actions) if (!a.wildcard) exact.set(a.source, [...(exact.get(a.source) ?? []), m])
  }
  const views = new Map<string, ActionView>()
  const view = (action: string): ActionView => {
    const cached = views.get(action)
    if (cached !== undefined) return cached
    const candidates = [
      ...new Set([...(exact.get(action) ?? []), ...wildcard.filter((m) => m.actions.some((a) => a.test(action)))])
    ]
      .map((m) => ({ ...m, specific: m.actions.some((a) => a.source !== "*" && a.test(action)) }))
      .sort((a, b) => Number(b.specific) - Number(a.specific) || a.rule.order - b.rule.order)
    const actionRules = candidates.filter((m): m is Candidate<RuleOf<"action">> => m.rule.kind === "action")
    const created: ActionView = {
      deny: actionRules.filter((m) => m.rule.effect === "deny"),
      allow: actionRules.filter((m) => m.rule.effect === "allow"),
      escalate: candidates.filter((m): m is Candidate<RuleOf<"approval">> => m.rule.kind === "approval"),
      origins: origins.filter((o) => o.actions.some((a) => a.test(action))).map((o) => o.rule)
    }
    views.set(action, created)
    return created
  }
  return {
    gate,
    tools: gate.tool_ids.map(glob),
    scope: { principals: snapshot.principal_scope.map(glob), tenants: snapshot.tenant_scope.map(glob) },
    expiry: of("expiry"),
    filesystem: of("filesystem").map((rule) => ({
      rule,
      roots: rule.roots.map((root) => normalise(root) ?? root)
    })),
    subprocess: of("subprocess").map((rule) => ({ rule, executables: rule.executable_patterns.map(glob) })),
    network: of("network").map((rule) => ({
      rule,
      // Hosts are matched as URLs normalise them: lowercase.
      destinations: rule.destinations.map((d) => glob(d.toLowerCase())),
      hosts: rule.destinations.map((d) => glob(hostOf(d.toLowerCase())))
    })),
    mcp: of("mcp").map((rule) => ({
      rule,
      servers: rule.server_patterns.map(glob),
      tools: rule.tool_patterns.map(glob),
      resources: rule.resource_patterns.map(glob),
      whole: rule.tool_patterns.length === 0 && rule.resource_patterns.length === 0
    })),
    secrets: of("secret_exposure").map((rule) => ({ rule, names: rule.secret_namespaces.map(glob) })),
    environment: of("environment").map((rule) => ({ rule, names: rule.variable_patterns.map(glob) })),
    view
  }
}

/** Compile every gate of a snapshot, in its gates' `order` (whatever order a stored snapshot lists them in). */
export const compile = (snapshot: PolicySnapshot): ReadonlyArray<CompiledGate> =>
  [...snapshot.gate_bindings].sort((a, b) => a.order - b.order).map((gate) => compileGate(snapshot, gate))

const decision = (
  disposition: PolicyDecision["disposition"],
  code: string,
  matched: ReadonlyArray<{ readonly rule_id: string }>,
  detail?: string
): PolicyDecision => ({
  disposition,
  code,
  matched_rules: matched.map((rule) => rule.rule_id),
  ...(detail === undefined ? {} : { detail })
})

const stringArgument = (input: PolicyInput, name: string) => {
  const value = input.arguments[name]
  return typeof value === "string" ? value : undefined
}

/** The argument a rule's operations match: the shell command, else the path, else the action name. */
const salient = (input: PolicyInput): { readonly kind: "command" | "path" | "none"; readonly value: string } => {
  const command = stringArgument(input, "command")
  if (command !== undefined) return { kind: "command", value: command.trim() }
  const path = stringArgument(input, "path")
  if (path !== undefined) return { kind: "path", value: input.resolved_path ?? normalise(path) ?? path }
  return { kind: "none", value: input.action }
}

const operationMatches = (operations: ReadonlyArray<Glob>, target: ReturnType<typeof salient>) =>
  operations.some((op) => {
    if (target.kind !== "command") return op.test(target.value)
    const [head = "", ...rest] = target.value.split(/\s+/)
    const base = [head.slice(head.lastIndexOf("/") + 1), ...rest].join(" ")
    return commandMatches(op, target.value) || commandMatches(op, base)
  })

const fsMode = (effects: ReadonlyArray<string>): "read" | "write" | "execute" | undefined =>
  effects.includes("filesystem.write")
    ? "write"
    : effects.includes("filesystem.execute")
    ? "execute"
    : effects.includes("filesystem.read")
    ? "read"
    : undefined

/** The host part of a `host:port` destination pattern: what a resolve is matched against. */
const hostOf = (destination: string) => {
  const colon = destination.lastIndexOf(":")
  return colon > 0 && /^[\d*?]+$/.test(destination.slice(colon + 1)) ? destination.slice(0, colon) : destination
}

const HOST = /^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.?|\[[0-9A-Fa-f:.]+\])$/

/** A host name as URLs normalise it (case, IPv4 forms), without trailing dots; undefined when it is not one. */
const hostName = (host: string | undefined) =>
  host !== undefined && HOST.test(host) && URL.canParse(`http://${host}/`)
    ? new URL(`http://${host}/`).hostname.replace(/\.+$/, "")
    : undefined

const connectDestination = (url: string) => {
  const parsed = URL.canParse(url) ? new URL(url) : undefined
  if (parsed === undefined) return undefined
  const port = parsed.port || (parsed.protocol === "https:" ? "443" : parsed.protocol === "http:" ? "80" : "")
  return `${parsed.hostname.replace(/\.+$/, "")}:${port}`
}

const listenDestination = (address: string | undefined) => {
  const [, host, port] = /^(.+):(\d{1,5})$/.exec(address ?? "") ?? []
  const name = hostName(host)
  return name === undefined || Number(port) > 65535 ? undefined : `${name}:${Number(port)}`
}

type NetworkMode = RuleOf<"network">["modes"][number]

/** What a call reaches on the network: a `url` argument connects (and a declared `network.connect` effect needs one);
 * a declared `network.listen` effect listens on the `address` argument (`host:port`) and a declared
 * `network.resolve` effect resolves the `host` argument. */
const networkTargets = (input: PolicyInput): ReadonlyArray<readonly [NetworkMode, string | undefined]> => {
  const url = stringArgument(input, "url")
  return [
    ...(url !== undefined
      ? [["connect", connectDestination(url)] as const]
      : input.effects.includes("network.connect")
      ? [["connect", undefined] as const]
      : []),
    ...(input.effects.includes("network.listen")
      ? [["listen", listenDestination(stringArgument(input, "address"))] as const]
      : []),
    ...(input.effects.includes("network.resolve")
      ? [["resolve", hostName(stringArgument(input, "host"))] as const]
      : [])
  ]
}

/** One thing a call claims, with the rules that deny it and whether any grants it. */
interface Claim {
  readonly label: string
  readonly denied: ReadonlyArray<{ readonly rule_id: string }>
  readonly granted: boolean
}

/** Deny dominates over every claim of one kind; then each claim needs a grant (`<kind>.not_allowed`, default deny). */
const settle = (kind: string, claims: ReadonlyArray<Claim>): PolicyDecision | undefined => {
  const denied = claims.filter((claim) => claim.denied.length > 0)
  if (denied.length > 0) {
    return decision(
      "deny",
      `${kind}.denied`,
      [...new Set(denied.flatMap((claim) => claim.denied))],
      denied.map((claim) => claim.label).join(", ")
    )
  }
  const missing = claims.find((claim) => !claim.granted)
  return missing === undefined
    ? undefined
    : decision("deny", `${kind}.not_allowed`, [], `no rule grants ${missing.label}`)
}

const claimOf = <G extends { readonly rule: { readonly rule_id: string; readonly effect: "allow" | "deny" } }>(
  label: string,
  hits: ReadonlyArray<G>
): Claim => ({
  label,
  denied: hits.filter((hit) => hit.rule.effect === "deny").map((hit) => hit.rule),
  granted: hits.some((hit) => hit.rule.effect === "allow")
})

const networkGuard = (grants: CompiledGate["network"], input: PolicyInput) => {
  const targets = networkTargets(input)
  const invalid = targets.find(([, destination]) => destination === undefined)
  if (invalid !== undefined) return decision("deny", "network.invalid_destination", [], `no ${invalid[0]} destination`)
  return settle(
    "network",
    targets.map(([mode, destination]) =>
      claimOf(
        `${mode} ${destination}`,
        grants.filter((n) =>
          n.rule.modes.includes(mode) &&
          (mode === "resolve" ? n.hosts : n.destinations).some((d) => d.test(destination!))
        )
      )
    )
  )
}

const mcpGuard = (grants: ReadonlyArray<McpGrant>, { resources, server, tool }: McpTool) => {
  const onServer = grants.filter((grant) => grant.servers.some((s) => s.test(server)))
  const covering = (patterns: (grant: McpGrant) => ReadonlyArray<Glob>, name: string) =>
    onServer.filter((grant) => grant.whole || patterns(grant).some((p) => p.test(name)))
  return settle("mcp", [
    claimOf(`${server} tool ${tool}`, covering((grant) => grant.tools, tool)),
    ...resources.map((resource) =>
      claimOf(`${server} resource ${resource}`, covering((grant) => grant.resources, resource))
    )
  ])
}

// Exposures are ordered: a grant at one level grants every lower one; a deny (or any `forbid`) denies its level and above.
const EXPOSURE: Readonly<Record<string, number>> = { forbid: 0, reference_only: 1, read: 1, inject: 2 }

const exposureGuard = (
  kind: "secret" | "environment",
  grants: ReadonlyArray<
    {
      readonly rule: { readonly rule_id: string; readonly effect: "allow" | "deny"; readonly exposure: string }
      readonly names: ReadonlyArray<Glob>
    }
  >,
  needs: ReadonlyArray<{ readonly name: string; readonly exposure: string }>
) =>
  settle(
    kind,
    needs.map(({ exposure, name }) => {
      const level = EXPOSURE[exposure]!
      const hits = grants.filter((grant) => grant.names.some((n) => n.test(name))).map((grant) => grant.rule)
      return {
        label: `${name} (${exposure})`,
        denied: hits.filter((rule) =>
          (rule.effect === "deny" || rule.exposure === "forbid") && level >= EXPOSURE[rule.exposure]!
        ),
        granted: hits.some((rule) =>
          rule.effect === "allow" && rule.exposure !== "forbid" && level <= EXPOSURE[rule.exposure]!
        )
      }
    })
  )

const guard = (gate: CompiledGate, input: PolicyInput): PolicyDecision => {
  const refused = intrinsicRefusal(input)
  if (refused !== undefined) return refused
  const target = salient(input)
  const mode = fsMode(input.effects)
  if (mode !== undefined && target.kind === "path" && gate.filesystem.length > 0) {
    const path = target.value
    const applicable = gate.filesystem.filter((f) =>
      f.rule.modes.includes(mode) && f.roots.some((r) => within(path, r))
    )
    const denied = applicable.filter((f) => f.rule.effect === "deny")
    if (denied.length > 0) return decision("deny", "filesystem.denied", denied.map((f) => f.rule))
    const allowed = applicable.filter((f) => f.rule.effect === "allow")
    if (allowed.length === 0) return decision("deny", "filesystem.outside_roots", [], `no root allows ${mode} here`)
  }
  if (target.kind === "command" && gate.subprocess.length > 0) {
    const executable = target.value.split(/\s+/, 1)[0]!
    const base = executable.slice(executable.lastIndexOf("/") + 1)
    const hits = gate.subprocess.filter((s) => s.executables.some((e) => e.test(executable) || e.test(base)))
    const denied = hits.filter((s) => s.rule.effect === "deny")
    if (denied.length > 0) return decision("deny", "subprocess.denied", denied.map((s) => s.rule))
    if (!hits.some((s) => s.rule.effect === "allow")) {
      return decision("deny", "subprocess.not_allowed", [], `no rule allows ${base}`)
    }
  }
  const network = gate.network.length > 0 ? networkGuard(gate.network, input) : undefined
  if (network !== undefined) return network
  const mcp = input.mcp !== undefined && gate.mcp.length > 0 ? mcpGuard(gate.mcp, input.mcp) : undefined
  if (mcp !== undefined) return mcp
  const secret = input.secrets !== undefined && gate.secrets.length > 0
    ? exposureGuard("secret", gate.secrets, input.secrets.map((s) => ({ name: s.namespace, exposure: s.exposure })))
    : undefined
  if (secret !== undefined) return secret
  const environment = input.environment !== undefined && gate.environment.length > 0
    ? exposureGuard(
      "environment",
      gate.environment,
      input.environment.map((e) => ({ name: e.variable, exposure: e.exposure }))
    )
    : undefined
  return environment ?? decision("allow", "guard.passed", [])
}

const inWindow = (rule: RuleOf<"expiry">, now: number) =>
  (rule.not_before === undefined || now >= Time.toMicros(rule.not_before)) &&
  (rule.expires_at === undefined || now < Time.toMicros(rule.expires_at))

/** Whatever the gates: a principal or tenant outside the snapshot's scope (every gate carries the same scope). */
export const scopeRefusal = (gate: CompiledGate, input: PolicyInput): PolicyDecision | undefined => {
  if (!gate.scope.principals.some((p) => p.test(input.principal))) {
    return decision("deny", "policy.out_of_scope", [], "the principal is outside the policy's scope")
  }
  if (input.tenant !== undefined && !gate.scope.tenants.some((t) => t.test(input.tenant!))) {
    return decision("deny", "policy.out_of_scope", [], "the tenant is outside the policy's scope")
  }
  return undefined
}

/** Whatever the rules: an established invocation must belong to the current principal and be within its authority scope. */
export const invocationRefusal = (input: PolicyInput): PolicyDecision | undefined => {
  const invocation = input.invocation
  if (invocation === undefined || invocation._tag !== "established") return undefined
  const origin = checkOrigin(invocation, {
    restriction: ["USER", "SELF", "OTHER_AGENT"],
    boundAgent: invocation.executing_agent,
    principal: { id: input.principal },
    now: Time.fromMicros(input.now),
    action_type: input.action
  })
  return origin._tag === "origin_denied" ? decision("deny", origin.code, [], origin.detail) : undefined
}

const policy = (gate: CompiledGate, input: PolicyInput): PolicyDecision => {
  for (const rule of gate.expiry) {
    const inside = inWindow(rule, input.now)
    if (rule.effect === "allow" ? !inside : inside) return decision("deny", "policy.expired", [rule])
  }
  const outOfScope = scopeRefusal(gate, input)
  if (outOfScope !== undefined) return outOfScope
  const view = gate.view(input.action)
  const restriction = view.origins.length > 0
    ? intersectRestrictions(...view.origins.map((rule) => rule.callers))
    : undefined
  if (restriction !== undefined) {
    const origin = checkOrigin(input.invocation, {
      restriction,
      boundAgent: input.bound_agent,
      principal: { id: input.principal },
      now: Time.fromMicros(input.now),
      action_type: input.action
    })
    if (origin._tag === "origin_denied") return decision("deny", origin.code, view.origins, origin.detail)
  }
  const target = salient(input)
  const denied = [view, ...(input.aliases ?? []).map(gate.view)].flatMap((v) => v.deny)
    .find((m) => operationMatches(m.operations, target))
  if (denied !== undefined) return decision("deny", "policy.denied", [denied.rule])
  const specificAllow = view.allow.find((m) => m.specific && operationMatches(m.operations, target))
  if (specificAllow !== undefined) return decision("allow", "policy.allowed", [specificAllow.rule])
  const escalation = view.escalate.find((m) => operationMatches(m.operations, target))
  const allowed = view.allow.find((m) => operationMatches(m.operations, target))
  if (escalation !== undefined && (allowed === undefined || escalation.specific)) {
    const rule = escalation.rule
    if (rule.approver_class === null) {
      return decision("deny", "approval.no_authority", [rule], "approval is required but no approver is configured")
    }
    return {
      ...decision("escalate", "approval.required", [rule]),
      approver_class: rule.approver_class,
      approval_expires_after_microseconds: rule.expires_after_microseconds
    }
  }
  if (allowed !== undefined) return decision("allow", "policy.allowed", [allowed.rule])
  return decision("deny", "policy.no_match", [], "no rule allows this action (default deny)")
}

/** Evaluate one part of one compiled gate. */
export const evaluate = (gate: CompiledGate, part: Part, input: PolicyInput): PolicyDecision =>
  part === "guard" ? guard(gate, input) : policy(gate, input)
