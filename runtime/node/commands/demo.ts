/**
 * `writ demo`: the scripted agent session through the certifiable executor on a SQLite file, in one task boundary,
 * then its chain verified and a certificate minted and verified; then the containment and harness steps. Exit codes:
 * 0 ok, 1 a chain or certificate that does not hold or a harness call whose effect was not the policy's, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { openBoundary } from "../../../core/evidence/EvidenceWriter.ts"
import { ActionExecutor } from "../../../core/execution/ActionExecutor.ts"
import * as Ingress from "../../../core/execution/Ingress.ts"
import { CapabilityReport } from "../../../core/harness/CapabilityReport.ts"
import * as Demo from "../../Demo.ts"
import { certificateHolds, certificateJson, embedded, encodeOutcome, evidenceLines } from "./internal/boundary.ts"
import { type Contained, containmentStep } from "./internal/containment.ts"
import { type HarnessStep, harnessStep } from "./internal/harnessStep.ts"
import { checkDatabase, exitOneOnFailure, json, onDatabase, setExitCode } from "./internal/input.ts"
import { outcomeCells, short, table } from "./internal/render.ts"

/** A fresh database for a demo run without `--db`: a new temporary directory each time. */
const freshDemoDb = Effect.sync(() => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "writ-demo-")), "writ-demo.db"))

/** The governed session: one task boundary around every step (each in its own ephemeral scope: a governed executor
 * keeps no Runs), then close and certify. */
const governedSession = Effect.gen(function*() {
  const executor = yield* ActionExecutor
  const plan = yield* Effect.orDie(executor.plan(Demo.actions[0]!))
  const ref = yield* Demo.installPolicy
  const boundary = yield* openBoundary(ref)
  const rows = yield* Demo.sessionWith(ref, { boundary })
  const certified = yield* Ingress.closeAndCertify(boundary, true)
  return { profile: executor.profile, plan, boundary, rows, certified }
})

const containmentLines = (contained: ReadonlyArray<Contained>) => [
  "\ncontainment: the hostile tool files.peek, allowed by the policy, asked for a 0600 canary outside every granted root",
  table(
    ["backend", "outcome", "reason", "the canary", "enforced by the backend", "capability report", "preflight report"],
    contained.map((c) => [
      c.backend,
      ...outcomeCells(c.outcome).slice(0, 2),
      c.escaped ? "READ: escaped" : "not read",
      c.enforced.length === 0
        ? "nothing (containment unsupported)"
        : c.enforced.map((name) => name.replace(/^writ\.(.*)@\d+$/, "$1")).join(", "),
      short(c.capability_digest),
      short(c.preflight_digest)
    ])
  ),
  "each call ran in a task boundary of its own; its operation_started record carries both digests"
]

const encodeReport = Schema.encodeSync(CapabilityReport)

const harnessJson = (step: HarnessStep) => (step.ran ? { ...step, report: encodeReport(step.report) } : step)

const harnessLines = (step: HarnessStep) => {
  if (!step.ran) return [`\nharness: skipped (${step.reason})`]
  return [
    "\nharness: the real claude CLI against a scripted model, each shell call delegated to writ's hook (policy: touch only)",
    table(
      ["tool call", "writ's decision", "its file"],
      step.decisions.map(({ call, decision }) => {
        const command = String((call.input as { command?: unknown } | null)?.command ?? "")
        const file = command.startsWith("touch") ? step.allowed_file_exists : step.blocked_file_exists
        return [
          `${call.tool}: ${command}`,
          decision.decision === "allow" ? "allow" : `deny (${decision.reason})`,
          file ? "exists" : "absent"
        ]
      })
    ),
    `capability report (claude ${step.report.provider_version ?? "?"}): ${
      step.report.controls.map((c) => `${c.control} ${c.level}`).join(", ")
    }`,
    "enforced only where `writ harness probe claude-code --verify` recorded a passing scenario for this executable"
  ]
}

/** `writ demo`. */
export const command = Command.make(
  "demo",
  {
    json,
    db: Options.file("db").pipe(
      Options.optional,
      Options.withDescription(
        "the SQLite file the session's evidence goes to (created if missing; a session appends a new task boundary each time). Default: writ-demo.db in a new temporary directory"
      )
    )
  },
  ({ db, json }) =>
    Effect.gen(function*() {
      const filename = Option.isSome(db) ? db.value : yield* freshDemoDb
      yield* checkDatabase(filename, "new_or_existing")
      const session = yield* Effect.provide(governedSession, embedded(filename, "certifiable")).pipe(
        onDatabase(filename)
      )
      const contained = yield* containmentStep(filename).pipe(onDatabase(filename))
      const harness = yield* harnessStep
      const { boundary, certified, plan, profile, rows } = session
      const holds = certified.verification.valid && certificateHolds(certified.certificate)
      if (json) {
        yield* Console.log(JSON.stringify(
          {
            db: filename,
            profile,
            task_boundary_id: boundary.task_boundary_id,
            chain_id: boundary.chain_id,
            head: certified.closed.head_hash,
            records: certified.closed.sequence + 1,
            verification: certified.verification,
            ...certificateJson(certified.certificate),
            rows: rows.map(({ outcome, step }) => ({
              action: step.action,
              arguments: step.arguments,
              outcome: encodeOutcome(outcome)
            })),
            containment: contained.map((c) => ({ ...c, outcome: encodeOutcome(c.outcome) })),
            harness: harnessJson(harness)
          },
          null,
          2
        ))
      } else {
        yield* Console.log(`writ demo: a scripted agent session, profile ${profile}, evidence in ${filename}`)
        yield* Console.log(
          `policy: ${Demo.policy.policy_id}@${Demo.policy.version} (mode ${Demo.policy.mode}), pinned by digest in every call's context`
        )
        yield* Console.log(
          `plan: ${plan.stages.map((stage) => stage.mode === "run" ? stage.stage : `(${stage.stage})`).join(" > ")}\n`
        )
        yield* Console.log(table(
          ["#", "action", "arguments", "why", "outcome", "reason", "stage"],
          rows.map(({ outcome, step }, i) => [
            String(i + 1),
            step.action,
            JSON.stringify(step.arguments),
            step.note,
            ...outcomeCells(outcome)
          ])
        ))
        yield* Console.log(
          "\nevery step ran in one task boundary; a refusal before governed_start (resolve, schema, containment) opens no operation."
        )
        yield* Console.log(evidenceLines(certified, boundary).join("\n"))
        yield* Console.log(containmentLines(contained).join("\n"))
        yield* Console.log(harnessLines(harness).join("\n"))
        yield* Console.log(`\nread it: writ evidence log --db ${filename} --chain ${boundary.chain_id}`)
      }
      // The harness step's effects must be the policy's: the allowed call's file made, the blocked one's not.
      const escaped = harness.ran && (harness.blocked_file_exists || !harness.allowed_file_exists)
      if (!holds || escaped) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Run a scripted agent session through the certifiable (governed) executor on SQLite, in one task boundary; then verify its chain and mint and verify a certificate"
))
