/**
 * The effect-backend port: where a handler actually runs, what containment that place can prove,
 * and an `invoke` that demands the executor's one-use invocation token.
 */
import { Context, Schema } from "effect"
import type { Effect, Redacted } from "effect"
import { ActionBackendRef } from "../base/Refs.ts"
import type { FilesystemGrant } from "../policy/FilesystemGrant.ts"
import type { NetworkGrant } from "../policy/NetworkGrant.ts"
import type { ActionDefinition, ContainmentKind, HandlerContext } from "./Action.ts"
import type { ActionOutbox } from "./ActionOutbox.ts"
import type { ActionUsage } from "./ActionUsage.ts"
import type { InvocationToken } from "./InvocationToken.ts"

/** Whether a backend enforces one kind of containment. */
export const ContainmentLevel = Schema.Literal("enforced", "unsupported")

/** How far a backend enforces one capability of a versioned report. */
export const CapabilityLevel = Schema.Literal("enforced", "degraded", "unsupported")

/** What enforces a capability: the OS (namespaces, seccomp, cgroups), a runtime's permissions, or a remote platform. */
export const EnforcedBy = Schema.Literal("os", "runtime", "remote")

/**
 * One capability of a versioned report: a namespaced, versioned name (`writ.filesystem.read_roots@1`), its level, what
 * enforces it, and whether that was verified here (`probe`: a trial run with the backend's own settings) or is only
 * `claimed` (by a remote platform) or known `static`ally (by construction, such as the in-process backend's nothing).
 */
export class CapabilityClaim extends Schema.Class<CapabilityClaim>("CapabilityClaim")({
  name: Schema.String.pipe(Schema.pattern(/^writ(?:\.[a-z][a-z0-9_]*)+@[1-9][0-9]*$/)),
  level: CapabilityLevel,
  by: Schema.optional(EnforcedBy),
  verified: Schema.Literal("probe", "claimed", "static")
}) {}

/** The mechanism a report rests on and its version (bwrap, the kernel), so a cached report is bound to them. */
export class BackendMechanism extends Schema.Class<BackendMechanism>("BackendMechanism")({
  name: Schema.String,
  version: Schema.String,
  platform: Schema.optional(Schema.String)
}) {}

/**
 * What a backend can prove it contains, and how that was established. `containment` is what admission reads; a
 * versioned report (`report_version` 1) also names its mechanism and lists each capability it knows of, enforced or
 * not. The in-process backend's report carries neither, so its encoding and digest are what they were.
 */
export class ActionBackendCapabilityReport extends Schema.Class<ActionBackendCapabilityReport>(
  "ActionBackendCapabilityReport"
)({
  backend: ActionBackendRef,
  containment: Schema.Struct({
    filesystem: ContainmentLevel,
    network: ContainmentLevel,
    subprocess: ContainmentLevel,
    environment: ContainmentLevel,
    secrets: ContainmentLevel
  }),
  verified_by: Schema.String,
  report_version: Schema.optional(Schema.Literal(1)),
  mechanism: Schema.optional(BackendMechanism),
  capabilities: Schema.optional(Schema.Array(CapabilityClaim))
}) {}

/** A report's `containment` when the backend proves none of it: every kind unsupported. */
export const noContainment = {
  filesystem: "unsupported",
  network: "unsupported",
  subprocess: "unsupported",
  environment: "unsupported",
  secrets: "unsupported"
} as const satisfies ActionBackendCapabilityReport["containment"]

/** The kinds of containment among `required` that a backend's report does not enforce. */
export const uncontained = (
  report: ActionBackendCapabilityReport,
  required: ReadonlyArray<ContainmentKind>
): ReadonlyArray<ContainmentKind> => required.filter((kind) => report.containment[kind] !== "enforced")

// The capabilities that make up each kind of containment: any one of the sets, every capability in it.
const kindCapabilities: Record<ContainmentKind, ReadonlyArray<ReadonlyArray<string>>> = {
  filesystem: [["writ.filesystem.read_roots@1", "writ.filesystem.write_roots@1"]],
  network: [["writ.network.none@1"], ["writ.network.loopback@1"], ["writ.network.destinations@1"]],
  subprocess: [["writ.subprocess.spawn@1"]],
  environment: [["writ.environment.allowlist@1"]],
  secrets: [["writ.secrets.by_reference@1"]]
}

/** Whether a report's `remote` claims cover a kind of containment: every capability of one of its sets claimed enforced by a remote platform. */
export const remotelyClaimed = (report: ActionBackendCapabilityReport, kind: ContainmentKind): boolean =>
  kindCapabilities[kind].some((names) =>
    names.every((name) =>
      (report.capabilities ?? []).some((claim) =>
        claim.name === name && claim.level === "enforced" && claim.by === "remote"
      )
    )
  )

/**
 * Why a backend that runs handlers elsewhere could not answer with the handler's own result or failure: its process
 * could not start, exited or was killed, overran the backend's wall clock, or answered with something that is not a
 * result of this invocation. `outcome` is what the executor concludes (`failed` when the action's code never started,
 * `timed_out`, `ambiguous` when it started and may have had its effect, or `denied` when a remote writ refused it by
 * its own policy, so it never ran); `started` whether the action's code began.
 */
export class ActionBackendError extends Schema.TaggedError<ActionBackendError>()("ActionBackendError", {
  outcome: Schema.Literal("failed", "timed_out", "ambiguous", "denied"),
  reason: Schema.Literal(
    "spawn_failed",
    "child_exited",
    "child_crashed",
    "child_killed",
    "memory_exceeded",
    "deadline_exceeded",
    "result_invalid",
    "result_oversized",
    "result_unauthenticated",
    "request_refused",
    "module_unavailable",
    "secret_unavailable",
    "descriptor_mismatch",
    "input_invalid",
    "output_invalid",
    "remote_unreachable",
    "remote_denied",
    "remote_failed",
    "response_lost"
  ),
  started: Schema.Boolean,
  detail: Schema.String
}) {
  override get message() {
    return `backend ${this.reason} (${this.outcome}): ${this.detail}`
  }
}

/** One invocation, handed to a backend with its token, the usage meter its handler reports to and its outbox. */
export interface Invocation {
  readonly definition: ActionDefinition
  readonly input: unknown
  readonly context: Omit<HandlerContext, "signal" | "report" | "stage" | "secret">
  /** Provided to the handler as the ActionUsage service; a backend that runs elsewhere relays reports to it. */
  readonly usage: ActionUsage.Service
  /** Provided to the handler as the ActionOutbox service; a backend that runs elsewhere relays staged intents to it. */
  readonly outbox: ActionOutbox.Service
  /** The secrets injected for this call, by name: what the handler's `context.secret` answers (absent: none). */
  readonly secrets?: ReadonlyMap<string, Redacted.Redacted<string>>
  /** What the call may connect to under its pinned policy (governed calls); absent: no policy, so no network. */
  readonly network?: NetworkGrant
  /** The filesystem the call's pinned policy grants, where the gates covering its action have filesystem rules. */
  readonly filesystem?: FilesystemGrant
}

/** Where handlers run. */
export class ActionExecutionBackend extends Context.Tag("writ/ActionExecutionBackend")<
  ActionExecutionBackend,
  ActionExecutionBackend.Service
>() {}

/** The ActionExecutionBackend service. */
export declare namespace ActionExecutionBackend {
  /** A backend: its identity, its probe, and a token-gated invoke. */
  export interface Service {
    readonly ref: ActionBackendRef
    readonly probe: Effect.Effect<ActionBackendCapabilityReport>
    /** Why this backend cannot run an action at all (a subprocess needs its module and export); undefined: it can. */
    readonly admits?: (definition: ActionDefinition) => string | undefined
    /**
     * Run the handler once; fails with InvocationTokenError on a refused token, with an ActionBackendError when the
     * backend itself could not conclude, else with the handler's own failure. A backend may run a synchronous handler
     * when called and answer its Exit: the executor then spends no fiber on it.
     */
    readonly invoke: (token: InvocationToken, invocation: Invocation) => Effect.Effect<unknown, unknown>
  }
}
