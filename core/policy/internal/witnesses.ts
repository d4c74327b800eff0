/** Witness calls derived from a policy's own patterns: what random strings rarely hit (`/etc/*`, `git push *`). */

import * as Time from "../../base/Time.ts"
import type { PolicyInput } from "../PolicyEvaluator.ts"
import type { CompiledRule } from "../PolicyRule.ts"

const instances = (pattern: string): ReadonlyArray<string> =>
  pattern.includes("*") ? [pattern.replaceAll("*", ""), pattern.replaceAll("*", "x")] : [pattern]

const FS_EFFECTS = [["filesystem.read"], ["filesystem.write"], ["filesystem.execute"]] as const

/** Witness calls for a set of rules: every action and argument their patterns name, instantiated, at every expiry edge. */
export function* witnesses(rules: ReadonlyArray<CompiledRule>): Generator<PolicyInput> {
  const actions = new Set<string>(["writ.sample"])
  const operations = new Set<string>()
  const commands = new Set<string>()
  const paths = new Set<string>()
  const urls = new Set<string>()
  const listens = new Set<string>()
  const hosts = new Set<string>()
  const mcp = { servers: new Set<string>(), tools: new Set<string>(["writ.sample"]), resources: new Set<string>() }
  const exposures: Array<Pick<PolicyInput, "secrets" | "environment">> = []
  const nows = new Set<number>([0])
  for (const rule of rules) {
    if ("action_patterns" in rule) {
      for (const p of rule.action_patterns) for (const a of instances(p)) actions.add(a)
    }
    if (rule.kind === "action" || rule.kind === "approval") {
      for (const p of rule.operations) for (const o of instances(p)) operations.add(o)
    }
    if (rule.kind === "subprocess") {
      for (const p of rule.executable_patterns) {
        for (const e of instances(p)) [e, `${e} x`].forEach((c) => commands.add(c))
      }
    }
    if (rule.kind === "filesystem") {
      for (const r of rule.roots) {
        for (const p of instances(r)) [p, `${p}/x`].forEach((x) => paths.add(x))
      }
    }
    if (rule.kind === "network") {
      for (const d of rule.destinations) {
        for (const instance of instances(d)) {
          const colon = instance.lastIndexOf(":")
          const host = instance.slice(0, colon)
          const port = instance.slice(colon + 1)
          if (colon > 0 && /^\d+$/.test(port)) {
            urls.add(`https://${host}:${port}/`)
            listens.add(instance)
          }
          hosts.add(colon > 0 ? host : instance)
        }
      }
    }
    if (rule.kind === "mcp") {
      for (const p of rule.server_patterns) for (const x of instances(p)) mcp.servers.add(x)
      for (const p of rule.tool_patterns) for (const x of instances(p)) mcp.tools.add(x)
      for (const p of rule.resource_patterns) for (const x of instances(p)) mcp.resources.add(x)
    }
    if (rule.kind === "secret_exposure") {
      for (const p of rule.secret_namespaces) {
        for (const namespace of instances(p)) {
          exposures.push({ secrets: [{ namespace, exposure: "reference_only" }] })
          exposures.push({ secrets: [{ namespace, exposure: "inject" }] })
        }
      }
    }
    if (rule.kind === "environment") {
      for (const p of rule.variable_patterns) {
        for (const variable of instances(p)) {
          exposures.push({ environment: [{ variable, exposure: "read" }] })
          exposures.push({ environment: [{ variable, exposure: "inject" }] })
        }
      }
    }
    // Windows are [not_before, expires_at): 0 and every bound represent every cell between bounds.
    if (rule.kind === "expiry") {
      for (const t of [rule.not_before, rule.expires_at]) if (t !== undefined) nows.add(Time.toMicros(t))
    }
  }
  const targets: Array<Pick<PolicyInput, "effects" | "arguments" | "mcp" | "secrets" | "environment">> = [
    { effects: [], arguments: {} }
  ]
  for (const o of operations) {
    targets.push({ effects: [], arguments: { command: o } })
    if (o.startsWith("/")) paths.add(o)
  }
  for (const c of commands) targets.push({ effects: [], arguments: { command: c } })
  for (const p of paths) {
    targets.push({ effects: [], arguments: { path: p } })
    for (const effects of FS_EFFECTS) targets.push({ effects, arguments: { path: p } })
  }
  for (const url of urls) targets.push({ effects: [], arguments: { url } })
  for (const address of listens) targets.push({ effects: ["network.listen"], arguments: { address } })
  for (const host of hosts) targets.push({ effects: ["network.resolve"], arguments: { host } })
  for (const server of mcp.servers) {
    for (const tool of mcp.tools) {
      targets.push({ effects: [], arguments: {}, mcp: { server, tool, resources: [] } })
      for (const r of mcp.resources) targets.push({ effects: [], arguments: {}, mcp: { server, tool, resources: [r] } })
    }
  }
  for (const exposure of exposures) targets.push({ effects: [], arguments: {}, ...exposure })
  for (const now of nows) {
    for (const action of actions) {
      for (const target of targets) yield { action, principal: "writ.sample", now, ...target }
    }
  }
}
