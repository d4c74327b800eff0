/**
 * What one call may connect to under its pinned policy: for each enforcing gate (hard or soft) that covers its action
 * and has network rules, the `host:port` patterns its connect rules allow and deny. A destination is permitted when
 * every such gate grants it and none denies it, as the network guard settles a claim; with no such gate nothing is.
 * A sandboxing backend enforces it around the action's own code (a proxy outside its sandbox, runtime flags).
 */
import { glob } from "./internal/glob.ts"
import type { Glob } from "./internal/glob.ts"
import type { CompiledRule, GateBinding } from "./PolicyRule.ts"

/** The connect patterns of one gate's network rules, lowercased as the policy matches hosts. */
export interface GateGrant {
  readonly gate_id: string
  readonly allow: ReadonlyArray<string>
  readonly deny: ReadonlyArray<string>
}

/** What a call may connect to: one entry per enforcing gate with network rules (none: no network at all). */
export interface NetworkGrant {
  readonly gates: ReadonlyArray<GateGrant>
}

/** The rules and gates of a pinned snapshot, as far as a grant reads them. */
export interface Pinned {
  readonly compiled_rules: ReadonlyArray<CompiledRule>
  readonly gate_bindings: ReadonlyArray<GateBinding>
}

/** No network: what a call with no policy, or no network rule, gets. */
export const none: NetworkGrant = { gates: [] }

const grants = new WeakMap<Pinned, Map<string, NetworkGrant>>()

/** The grant of `action` under a pinned snapshot (computed once per snapshot and action). */
export const of = (pinned: Pinned, action: string): NetworkGrant => {
  const known = grants.get(pinned) ?? new Map<string, NetworkGrant>()
  grants.set(pinned, known)
  const cached = known.get(action)
  if (cached !== undefined) return cached
  const byId = new Map(pinned.compiled_rules.map((rule) => [rule.rule_id, rule]))
  const gates = [...pinned.gate_bindings]
    .sort((a, b) => a.order - b.order)
    .filter((gate) => gate.level !== "advisory" && gate.tool_ids.some((tool) => glob(tool).test(action)))
    .flatMap((gate): Array<GateGrant> => {
      const rules = gate.rule_ids.flatMap((id) => {
        const rule = byId.get(id)
        return rule?.kind === "network" ? [rule] : []
      })
      const patterns = (effect: "allow" | "deny") =>
        rules.filter((rule) => rule.effect === effect && rule.modes.includes("connect"))
          .flatMap((rule) => rule.destinations.map((destination) => destination.toLowerCase()))
      return rules.length === 0 ? [] : [{ gate_id: gate.gate_id, allow: patterns("allow"), deny: patterns("deny") }]
    })
  const grant = gates.length === 0 ? none : { gates }
  known.set(action, grant)
  return grant
}

/** A destination as the grant matches it: a lowercase DNS name, IPv4 address or bracketed IPv6 address, and a port. */
export const destinationPattern =
  /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\]):[0-9]{1,5}$/

const compiled = new WeakMap<GateGrant, { readonly allow: ReadonlyArray<Glob>; readonly deny: ReadonlyArray<Glob> }>()

const globsOf = (gate: GateGrant) => {
  let globs = compiled.get(gate)
  if (globs === undefined) compiled.set(gate, globs = { allow: gate.allow.map(glob), deny: gate.deny.map(glob) })
  return globs
}

/** Whether `destination` (`host:port`, normalised) is permitted: well formed, granted by every gate, denied by none. */
export const permits = (grant: NetworkGrant, destination: string): boolean =>
  grant.gates.length > 0 && destinationPattern.test(destination) &&
  Number(destination.slice(destination.lastIndexOf(":") + 1)) <= 65535 &&
  grant.gates.every((gate) => {
    const { allow, deny } = globsOf(gate)
    return allow.some((pattern) => pattern.test(destination)) && !deny.some((pattern) => pattern.test(destination))
  })

/** Whether the grant lets the call connect anywhere at all. */
export const grantsAny = (grant: NetworkGrant): boolean =>
  grant.gates.length > 0 && grant.gates.every((gate) => gate.allow.length > 0)

const loopbackHost = /^(?:127(?:\.[0-9]{1,3}){3}|\[::1\]|localhost)$/

/** Whether every destination the grant allows is on loopback (127.0.0.0/8, `[::1]`, `localhost`), by literal host. */
export const loopbackOnly = (grant: NetworkGrant): boolean =>
  grant.gates.some((gate) =>
    gate.allow.every((pattern) => {
      const colon = pattern.lastIndexOf(":")
      return colon > 0 && loopbackHost.test(pattern.slice(0, colon))
    })
  )
