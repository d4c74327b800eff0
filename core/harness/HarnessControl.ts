/**
 * The controls a harness can be asked for: namespaced, versioned names from one closed list, never free strings, so
 * a report names each the same way for every provider and a new meaning gets a new version.
 */
import { Schema } from "effect"

/** Every control a harness spec can request, by namespaced, versioned name. */
export const ControlName = Schema.Literal(
  "tools.allowlist@1",
  "approval.non_interactive@1",
  "callback.pre_tool@1",
  "callback.integrity@1",
  "fs.write_roots@1",
  "fs.read_roots@1",
  "network.egress@1",
  "subprocess.deny_commands@1",
  "env.allowlist@1",
  "mcp.grants@1",
  "budget.wall_clock@1",
  "budget.turns@1",
  "budget.cost@1",
  "route.completeness@1"
)

/** A control's namespaced, versioned name. */
export type ControlName = typeof ControlName.Type

/** The providers writ has a harness adapter for. */
export const Provider = Schema.Literal("claude-code", "codex", "gemini-cli")

/** A provider writ has a harness adapter for. */
export type Provider = typeof Provider.Type

/** How far a control holds: enforced (and verified), degraded (weaker or unverified), or unsupported. */
export const Level = Schema.Literal("enforced", "degraded", "unsupported")

/** How far a control holds. */
export type Level = typeof Level.Type

/** Who enforces a control: the provider's own claim, the OS (a sandbox the provider or writ sets up), or writ itself. */
export const Source = Schema.Literal("provider-claim", "os", "writ")

/** Who enforces a control. */
export type Source = typeof Source.Type
