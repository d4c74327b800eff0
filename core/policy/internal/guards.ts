import type { McpTool } from "../../action/Action.ts"
import { normalise, within } from "../PolicyPath.ts"
import {
  type CompiledGate,
  decision,
  type McpGrant,
  type PolicyDecision,
  type PolicyInput,
  type RuleOf,
  stringArgument
} from "./evaluation.ts"
import type { Glob } from "./glob.ts"
import { commandMatches } from "./glob.ts"

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

/** The argument a rule's operations match: the shell command, else the path, else the action name. */
export const salient = (input: PolicyInput): { readonly kind: "command" | "path" | "none"; readonly value: string } => {
  const command = stringArgument(input, "command")
  if (command !== undefined) return { kind: "command", value: command.trim() }
  const path = stringArgument(input, "path")
  if (path !== undefined) return { kind: "path", value: input.resolved_path ?? normalise(path) ?? path }
  return { kind: "none", value: input.action }
}

export const operationMatches = (operations: ReadonlyArray<Glob>, target: ReturnType<typeof salient>) =>
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
export const hostOf = (destination: string) => {
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

export const guard = (gate: CompiledGate, input: PolicyInput): PolicyDecision => {
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
