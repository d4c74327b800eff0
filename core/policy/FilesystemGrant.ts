/**
 * What one call may touch of the filesystem under its pinned policy: the roots (patterns) the filesystem rules of every
 * enforcing gate (hard or soft) that covers its action allow and deny, per mode. A sandboxing backend binds no more
 * than the allowed roots (narrowed by its own) and hides or write-protects the denied ones; with no such rule the
 * grant is absent and the backend keeps its own roots.
 */
import { glob } from "./internal/glob.ts"
import type { Pinned } from "./NetworkGrant.ts"

/** The filesystem a call's policy grants, per mode. */
export interface FilesystemGrant {
  readonly read: ReadonlyArray<string>
  readonly write: ReadonlyArray<string>
  readonly denyRead: ReadonlyArray<string>
  readonly denyWrite: ReadonlyArray<string>
}

const grants = new WeakMap<Pinned, Map<string, FilesystemGrant | null>>()

/** The grant of `action` under a pinned snapshot, or undefined when no gate covering it has a filesystem rule. */
export const of = (pinned: Pinned, action: string): FilesystemGrant | undefined => {
  const known = grants.get(pinned) ?? new Map<string, FilesystemGrant | null>()
  grants.set(pinned, known)
  const cached = known.get(action)
  if (cached !== undefined) return cached ?? undefined
  const byId = new Map(pinned.compiled_rules.map((rule) => [rule.rule_id, rule]))
  const rules = pinned.gate_bindings
    .filter((gate) => gate.level !== "advisory" && gate.tool_ids.some((tool) => glob(tool).test(action)))
    .flatMap((gate) =>
      gate.rule_ids.flatMap((id) => {
        const rule = byId.get(id)
        return rule?.kind === "filesystem" ? [rule] : []
      })
    )
  const roots = (
    effect: "allow" | "deny",
    mode: "read" | "write"
  ) => [...new Set(rules.flatMap((rule) => rule.effect === effect && rule.modes.includes(mode) ? rule.roots : []))]
  const grant = rules.length === 0 ? null : {
    read: roots("allow", "read"),
    write: roots("allow", "write"),
    denyRead: roots("deny", "read"),
    denyWrite: roots("deny", "write")
  }
  known.set(action, grant)
  return grant ?? undefined
}
