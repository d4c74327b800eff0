/**
 * The edge handler's own backend: it runs each action in-process, inside the platform the handler is deployed on, and
 * its report lists the platform's containment as the operator declares it: each capability claimed `enforced`, by
 * `remote`, `verified: "claimed"` (the platform's word, not verified here), so admission's containment stays
 * `unsupported` and a required kind is admitted only where the handler's policy opts in with
 * `containment.remote_claims`, as on the caller's side. Runtimes: every one (deno serve, Node, edge platforms).
 */
import { Effect, Layer } from "effect"
import {
  ActionBackendCapabilityReport,
  ActionExecutionBackend,
  BackendMechanism,
  CapabilityClaim,
  noContainment
} from "../../core/action/ActionExecutionBackend.ts"
import { ActionBackendRef } from "../../core/base/Refs.ts"
import * as InProcessBackend from "../memory/InProcessBackend.ts"
import type { PlatformClaim } from "./EdgeWire.ts"

/** What the operator declares of the platform: its claims and, in words, what they rest on. */
export interface Options {
  readonly claims: ReadonlyArray<typeof PlatformClaim.Type>
  readonly platform: string
  /** The runtime the handler runs on (`deno 2.9.6`, `node 20.19.0`). */
  readonly runtime: string
  /** The handler's version. */
  readonly version: string
}

/** The backend's identity. */
export const ref = ActionBackendRef.make({ id: "edge-platform", version: "1" })

/** The report: no containment verified here, the platform's claims listed as remote and claimed. */
export const report = (options: Options): ActionBackendCapabilityReport =>
  ActionBackendCapabilityReport.make({
    backend: ref,
    containment: noContainment,
    verified_by: `remote claim, not verified here: the operator declares of the platform: ${options.platform}`,
    report_version: 1,
    mechanism: BackendMechanism.make({ name: "writ-edge", version: options.version, platform: options.runtime }),
    capabilities: options.claims.map((claim) =>
      CapabilityClaim.make(
        claim.level === "enforced"
          ? { name: claim.name, level: "enforced", by: "remote", verified: "claimed" }
          : { name: claim.name, level: "unsupported", verified: "claimed" }
      )
    )
  })

/** The edge handler's backend over `options`. */
export const make = (options: Options): ActionExecutionBackend.Service => ({
  ref,
  probe: Effect.succeed(report(options)),
  invoke: InProcessBackend.make.invoke
})

/** The edge handler's backend as a Layer. */
export const layer = (options: Options): Layer.Layer<ActionExecutionBackend> =>
  Layer.succeed(ActionExecutionBackend, make(options))
