/**
 * The `writ` command line: `demo` runs the scripted session through the governed executor on a
 * SQLite file, `exec` runs one demo action under a chosen profile, `evidence`, `certificate` and
 * `recover` read and repair what they wrote, `policy` works on declarations. Every command takes
 * `--json`. Exit codes: 0 ok, 1 a negative verdict, 2 bad input (and then nothing runs).
 */
import { Args, CliConfig, Command, Options } from "@effect/cli"
import { Cause, Console, Deferred, Effect, Either, Layer, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import { EvidenceStore } from "../../core/evidence/EvidenceStore.ts"
import * as Governance from "../../core/evidence/Governance.ts"
import * as TaskCertificate from "../../core/evidence/TaskCertificate.ts"
import { ActionExecutor } from "../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../core/execution/ExecutionOutcome.ts"
import { callExecuted, ExecutionOutcome as OutcomeSchema, reasonCode } from "../../core/execution/ExecutionOutcome.ts"
import { type Run, RunTerminal, StateStore } from "../../core/state/StateStore.ts"
import type { TerminalStatus } from "../../core/state/StateStore.ts"
import * as Demo from "../Demo.ts"
import * as Embedded from "../Embedded.ts"
import * as CertificateCli from "./CertificateCli.ts"
import { checkDatabase, choice, CliInputError, exitOneOnFailure, parseJsonObject, setExitCode } from "./CliInput.ts"
import * as EvidenceCli from "./EvidenceCli.ts"
import * as OutboxCli from "./OutboxCli.ts"
import * as PolicyCli from "./PolicyCli.ts"
import { outcomeCells, table } from "./Render.ts"

const json = Options.boolean("json").pipe(Options.withDescription("print JSON instead of a table"))

const encodeOutcome = Schema.encodeSync(OutcomeSchema)
const encodeCertificate = Schema.encodeSync(TaskCertificate.TaskCertificate)

/** The layers every command runs on: the demo tool set, node:crypto digests, random ids. */
export const layer = Demo.layer.pipe(Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)))

/** The demo's actions under a profile's executor, every store on one SQLite file. */
const embedded = (filename: string, profile: Embedded.Profile) =>
  Embedded.layerExecutor({ filename, profile }, Demo.tools, {}, { boundAgent: Demo.agent })

// ---------------------------------------------------------------------------------------------
// Runs and task boundaries around the demo's calls
// ---------------------------------------------------------------------------------------------

/** The Run the executor created for an admitted call, if it created one. */
const createdRun = (created: Deferred.Deferred<Run>) =>
  Effect.flatMap(
    Deferred.isDone(created),
    (done) => done ? Effect.map(Deferred.await(created), Option.some) : Effect.succeed(Option.none<Run>())
  )

const statusOf = (outcome: ExecutionOutcome): TerminalStatus =>
  outcome._tag === "succeeded"
    ? "completed"
    : outcome._tag === "cancelled" || outcome._tag === "timed_out"
    ? outcome._tag
    : "failed"

// The work is whole only when the call succeeded, unknown when it may have run and its result is lost.
const qualityOf = (outcome: ExecutionOutcome): RunTerminal["quality"] =>
  outcome._tag === "succeeded"
    ? "full"
    : outcome._tag === "ambiguous" || (outcome._tag !== "failed" && callExecuted(outcome))
    ? "indeterminate"
    : "partial"

/** The Run terminal an outcome of its one call gives; no one judges a CLI call, and its cost is unknown (null). */
const terminalOf = (outcome: ExecutionOutcome) =>
  RunTerminal.make({
    status: statusOf(outcome),
    acceptance: "not_applicable",
    quality: qualityOf(outcome),
    reason_code: reasonCode(outcome),
    evidence: [],
    cost: null
  })

/**
 * End the Run the call was admitted into (if it was) when the body does not conclude it: failed on an evidence or
 * store error, cancelled when the command is interrupted (Ctrl-C), its call then possibly made; then end as the body
 * did.
 */
const endRunOnError = (created: Deferred.Deferred<Run>) => <A, E, R>(body: Effect.Effect<A, E, R>) =>
  Effect.onError(body, (cause) =>
    Effect.flatMap(Effect.zip(StateStore, createdRun(created)), ([state, run]) => {
      if (Option.isNone(run)) return Effect.void
      const interrupted = Cause.isInterruptedOnly(cause)
      const failure = Cause.failureOption(cause)
      const tag = Option.isSome(failure) ? (failure.value as { readonly _tag?: string })._tag ?? "error" : "defect"
      return Effect.exit(state.finish(
        run.value.run_id,
        RunTerminal.make({
          status: interrupted ? "cancelled" : "failed",
          acceptance: "not_applicable",
          quality: "indeterminate",
          reason_code: interrupted ? "cli.interrupted" : `cli.${tag}`,
          evidence: [],
          cost: null
        })
      ))
    }))

/** Close a boundary, verify its chain against the closing head, and (certifiable) mint and re-verify its certificate. */
const closeAndCertify = (boundary: Governance.TaskBoundary, certify: boolean) =>
  Effect.gen(function*() {
    const closed = yield* Governance.closeBoundary(boundary)
    const verification = yield* (yield* EvidenceStore).verify(boundary.chain_id, closed.head_hash)
    if (!certify) return { closed, verification, certificate: undefined }
    const minted = yield* Effect.either(TaskCertificate.mint(boundary.chain_id, closed.head_hash))
    if (Either.isLeft(minted)) {
      if (minted.left.reason === "unavailable") return yield* minted.left
      return { closed, verification, certificate: { minted: false as const, error: minted.left } }
    }
    const checked = yield* TaskCertificate.verify(minted.right)
    return { closed, verification, certificate: { minted: true as const, certificate: minted.right, checked } }
  })

type Certified = Effect.Effect.Success<ReturnType<typeof closeAndCertify>>

const certificateJson = (certificate: Certified["certificate"]) =>
  certificate === undefined ? {} : certificate.minted
    ? {
      certificate: encodeCertificate(certificate.certificate),
      certificate_verification: {
        valid: certificate.checked.valid,
        failure_code: certificate.checked.failure_code,
        detail: certificate.checked.detail
      }
    }
    : {
      certificate: null,
      certificate_verification: {
        valid: false,
        failure_code: certificate.error.reason,
        detail: certificate.error.detail
      }
    }

const certificateHolds = (certificate: Certified["certificate"]) =>
  certificate === undefined || (certificate.minted && certificate.checked.valid)

const evidenceLines = (certified: Certified, boundary: Governance.TaskBoundary): Array<string> => {
  const { certificate, closed, verification } = certified
  return [
    `task boundary ${boundary.task_boundary_id}: chain ${boundary.chain_id}, ${closed.sequence + 1} records`,
    `head ${closed.head_hash}`,
    verification.valid
      ? `verification: valid (${verification.checked_records} records against the closing head)`
      : `verification: FAILED (${verification.failure_code} at record ${verification.failed_record_id})`,
    ...(certificate === undefined
      ? []
      : certificate.minted
      ? [
        CertificateCli.certificateLine(certificate.certificate),
        certificate.checked.valid
          ? "certificate verification: valid"
          : `certificate verification: FAILED (${certificate.checked.failure_code}): ${certificate.checked.detail}`
      ]
      : [`certificate: not minted (${certificate.error.reason}): ${certificate.error.detail}`])
  ]
}

// ---------------------------------------------------------------------------------------------
// writ demo
// ---------------------------------------------------------------------------------------------

/** A fresh database for a demo run without `--db`: a new temporary directory each time. */
const freshDemoDb = Effect.sync(() => path.join(fs.mkdtempSync(path.join(os.tmpdir(), "writ-demo-")), "writ-demo.db"))

/** The governed session: one task boundary around every step (each in its own ephemeral scope: a governed executor
 * keeps no Runs), then close and certify. */
const governedSession = Effect.gen(function*() {
  const executor = yield* ActionExecutor
  const plan = yield* Effect.orDie(executor.plan(Demo.actions[0]!))
  const ref = yield* Demo.installPolicy
  const boundary = yield* Governance.openBoundary(ref)
  const rows = yield* Demo.sessionWith(ref, { boundary })
  const certified = yield* closeAndCertify(boundary, true)
  return { profile: executor.profile, plan, boundary, rows, certified }
})

const demo = Command.make(
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
      const session = yield* Effect.provide(governedSession, embedded(filename, "certifiable"))
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
            }))
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
        yield* Console.log(`\nread it: writ evidence log --db ${filename} --chain ${boundary.chain_id}`)
      }
      if (!holds) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Run a scripted agent session through the certifiable (governed) executor on SQLite, in one task boundary; then verify its chain and mint and verify a certificate"
))

// ---------------------------------------------------------------------------------------------
// writ exec
// ---------------------------------------------------------------------------------------------

const actionArg = Args.text({ name: "action" }).pipe(Args.withDescription("action name or alias"))
const argsOption = Options.text("args").pipe(
  Options.withDefault("{}"),
  Options.withDescription("the action's arguments as a JSON object")
)
const profileOption = choice("profile", ["minimal", "durable", "governed", "certifiable"]).pipe(
  Options.withDefault("minimal" as const),
  Options.withDescription(
    "minimal: in memory, nothing kept; durable: a Run and its attempt in --db, once the call is admitted; governed: a task boundary's evidence chain in --db; certifiable: governed, then a certificate minted and verified"
  )
)
const dbOption = Options.file("db").pipe(
  Options.optional,
  Options.withDescription("the SQLite file (created if missing); required by durable, governed and certifiable")
)

/** One demo action under a durable executor (in a new Run) or a governed one (in a new task boundary). */
const execEmbedded = (profile: Embedded.Profile, step: Demo.Step) =>
  Effect.gen(function*() {
    const ref = yield* Demo.installPolicy
    if (profile !== "durable") {
      const boundary = yield* Governance.openBoundary(ref)
      // Interrupted (Ctrl-C), the operation closes as cancelled and then the boundary, so nothing is left open.
      const outcome = yield* Demo.runStep(step, 0, { policy_snapshot: ref, boundary }).pipe(
        Effect.onInterrupt(() => Effect.ignore(Governance.closeBoundary(boundary)))
      )
      const certified = yield* closeAndCertify(boundary, profile === "certifiable")
      return { outcome, run: undefined, attempts: undefined, boundary, certified }
    }
    const state = yield* StateStore
    // The executor creates the Run only once the call is admitted: a denied, deferred or escalated call has none.
    const created = yield* Deferred.make<Run>()
    return yield* Effect.gen(function*() {
      const outcome = yield* Demo.runStep(step, 0, { policy_snapshot: ref, newRun: created })
      const run = yield* createdRun(created)
      if (Option.isNone(run)) return { outcome, run: null, attempts: 0, boundary: undefined, certified: undefined }
      const finished = yield* state.finish(run.value.run_id, terminalOf(outcome))
      const attempts = yield* state.listAttempts(run.value.run_id)
      return { outcome, run: finished.run, attempts: attempts.length, boundary: undefined, certified: undefined }
    }).pipe(endRunOnError(created))
  })

const exec = Command.make(
  "exec",
  { action: actionArg, args: argsOption, profile: profileOption, db: dbOption, json },
  ({ action, args, db, json, profile }) =>
    Effect.gen(function*() {
      const parsed = yield* parseJsonObject(args, "--args")
      const step: Demo.Step = { action, arguments: parsed, note: "" }
      const row = (outcome: ExecutionOutcome) =>
        table(["action", "outcome", "reason", "stage"], [[action, ...outcomeCells(outcome)]])
      if (profile === "minimal") {
        if (Option.isSome(db)) {
          return yield* new CliInputError({
            message: "--db is for the durable, governed and certifiable profiles: the minimal profile keeps nothing"
          })
        }
        const outcome = yield* Demo.runStep(step, 0, { policy_snapshot: yield* Demo.installPolicy })
        yield* Console.log(json ? JSON.stringify(encodeOutcome(outcome), null, 2) : row(outcome))
        if (outcome._tag !== "succeeded") yield* setExitCode(1)
        return
      }
      if (Option.isNone(db)) {
        return yield* new CliInputError({ message: `--db FILE is required by the ${profile} profile` })
      }
      yield* checkDatabase(db.value, "new_or_existing")
      const result = yield* Effect.provide(execEmbedded(profile, step), embedded(db.value, profile))
      const { boundary, certified, outcome, run } = result
      if (json) {
        yield* Console.log(JSON.stringify(
          {
            ...encodeOutcome(outcome),
            ...(run === undefined ? {} : {
              run_id: run?.run_id ?? null,
              run_status: run?.status ?? null,
              attempts: result.attempts
            }),
            ...(boundary === undefined || certified === undefined ? {} : {
              task_boundary_id: boundary.task_boundary_id,
              chain_id: boundary.chain_id,
              head: certified.closed.head_hash,
              records: certified.closed.sequence + 1,
              verification: certified.verification,
              ...certificateJson(certified.certificate)
            })
          },
          null,
          2
        ))
      } else {
        yield* Console.log(row(outcome))
        if (run === null) yield* Console.log("\nno Run: the call was not admitted, so none was created")
        else if (run !== undefined) {
          yield* Console.log(`\nrun ${run.run_id}: ${run.status}, ${result.attempts} attempt(s)`)
        }
        if (boundary !== undefined && certified !== undefined) {
          yield* Console.log(`\n${evidenceLines(certified, boundary).join("\n")}`)
        }
      }
      const holds = certified === undefined ||
        (certified.verification.valid && certificateHolds(certified.certificate))
      if (outcome._tag !== "succeeded" || !holds) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Run one of the demo's actions under the demo policy through the executor of a profile (--db for durable, governed, certifiable)"
))

/** The `writ` command and its subcommands. */
export const command = Command.make("writ").pipe(
  Command.withSubcommands([
    demo,
    exec,
    EvidenceCli.command,
    CertificateCli.command,
    EvidenceCli.recover,
    OutboxCli.command,
    PolicyCli.command
  ])
)

const runCommand = Command.run(command, { name: "writ", version: "0.1.0" })

// Names are matched exactly: @effect/cli matches them case-insensitively by default but then looks an option's value up
// under its declared spelling, so `--PROFILE durable` was consumed and silently dropped.
const cliConfig = CliConfig.layer({ isCaseSensitive: true })

/** Parse argv (program and script first) and run the matching command; bad input no parser reports is refused first. */
export const run = (argv: ReadonlyArray<string>) =>
  Effect.zipRight(EvidenceCli.checkForget(argv.slice(2)), runCommand(argv)).pipe(Effect.provide(cliConfig))
