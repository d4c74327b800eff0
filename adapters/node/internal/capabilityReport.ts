/**
 * The versioned capability report of a sandboxing subprocess backend: the capabilities it claims once its probe's
 * trial run passed (each enforced by its mechanism and verified by that probe), those it knows of and does not
 * enforce, and the report of a failed probe, in which every capability is unsupported. Also the probe's runner of
 * the mechanism's own commands.
 */
import { Effect, Exit } from "effect"
import { spawn } from "node:child_process"
import type { Duplex, Writable } from "node:stream"
import type { ContainmentKind } from "../../../core/action/Action.ts"
import {
  ActionBackendCapabilityReport,
  CapabilityClaim,
  noContainment
} from "../../../core/action/ActionExecutionBackend.ts"
import type { BackendMechanism, EnforcedBy } from "../../../core/action/ActionExecutionBackend.ts"
import type { ActionBackendRef } from "../../../core/base/Refs.ts"
import { filesFd } from "./childWire.ts"

/** What a backend knows of its capabilities, and what enforces those it claims. */
export interface Claims {
  readonly ref: ActionBackendRef
  readonly by: typeof EnforcedBy.Type
  readonly claimed: ReadonlyArray<string>
  readonly unclaimed: ReadonlyArray<string>
}

/** The capability list: the claimed ones enforced (or, when the probe failed, unsupported), the rest unsupported. */
export const capabilities = (claims: Claims, enforced: boolean): ReadonlyArray<CapabilityClaim> => [
  ...claims.claimed.map((name) =>
    CapabilityClaim.make(
      enforced
        ? { name, level: "enforced", by: claims.by, verified: "probe" }
        : { name, level: "unsupported", verified: "probe" }
    )
  ),
  ...claims.unclaimed.map((name) => CapabilityClaim.make({ name, level: "unsupported", verified: "static" }))
]

/** The report of a passed probe: the kinds of containment it enforces, the rest unsupported. */
export const verified = (
  claims: Claims,
  enforced: ReadonlyArray<ContainmentKind>,
  verified_by: string,
  mechanism: BackendMechanism
): ActionBackendCapabilityReport => {
  const level = (kind: ContainmentKind) => enforced.includes(kind) ? "enforced" as const : "unsupported" as const
  return ActionBackendCapabilityReport.make({
    backend: claims.ref,
    containment: {
      filesystem: level("filesystem"),
      network: level("network"),
      subprocess: level("subprocess"),
      environment: level("environment"),
      secrets: level("secrets")
    },
    verified_by,
    report_version: 1,
    mechanism,
    capabilities: capabilities(claims, true)
  })
}

/** The report of a failed probe: every kind of containment and every capability unsupported. */
export const unsupported = (claims: Claims, verified_by: string, mechanism?: BackendMechanism) =>
  ActionBackendCapabilityReport.make({
    backend: claims.ref,
    containment: noContainment,
    verified_by,
    report_version: 1,
    ...(mechanism === undefined ? {} : { mechanism }),
    capabilities: capabilities(claims, false)
  })

/** A trial's setup around the started command, as a launch's (`ChildProcess.Launch["setup"]`). */
export interface Setup {
  readonly pipes: number
  readonly run: (pipes: ReadonlyArray<Duplex>) => Effect.Effect<void, string>
}

/**
 * Run a command of the mechanism with an empty environment (killed after 20 seconds): whether it exited 0, and its
 * stdout; `files` (bytes written to a pipe, or a descriptor passed as it is) are inherited from `filesFd` on, as a
 * launch hands them, and `setup` runs on the pipes after them (a failed setup kills the command).
 */
export const run = (
  command: string,
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string>> = {},
  files: ReadonlyArray<Uint8Array | number> = [],
  setup?: Setup
) =>
  Effect.async<{ readonly ok: boolean; readonly stdout: string }>((resume) => {
    const child = spawn(command, [...args], {
      env,
      stdio: [
        "ignore",
        "pipe",
        "ignore",
        ...Array(filesFd - 3).fill("ignore"),
        ...files.map((file) => typeof file === "number" ? file : "pipe" as const),
        ...Array(setup?.pipes ?? 0).fill("pipe" as const)
      ]
    })
    const out: Array<Buffer> = []
    child.stdout!.on("data", (chunk: Buffer) => out.push(chunk))
    files.forEach((bytes, index) => {
      if (typeof bytes === "number") return
      const file = child.stdio[filesFd + index] as Writable
      file.on("error", () => undefined)
      file.end(bytes)
    })
    const cancel = setup === undefined ? undefined : Effect.runCallback(
      setup.run(Array.from({ length: setup.pipes }, (_, index) => {
        const pipe = child.stdio[filesFd + files.length + index] as Duplex
        pipe.on("error", () => undefined)
        return pipe
      })),
      { onExit: (exit) => Exit.isFailure(exit) && child.kill("SIGKILL") }
    )
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000)
    let done = false
    const finish = (ok: boolean) => {
      if (done) return
      done = true
      clearTimeout(timer)
      cancel?.()
      resume(Effect.succeed({ ok, stdout: Buffer.concat(out).toString("utf-8") }))
    }
    child.on("error", () => finish(false))
    child.on("close", (code) => finish(code === 0))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })
