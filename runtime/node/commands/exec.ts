/**
 * `writ exec`: one of the demo's actions under the demo policy through the executor of a profile: minimal in memory,
 * durable in a new Run, governed in a new task boundary, certifiable with a certificate; on the backend `--backend`
 * names (in-process by default; edge sends it, signed, to a writ edge handler), set up by `--read`, `--write`,
 * `--wall-clock`, `--memory-mb` and `--processes`, injecting the secrets an action declares from the environment file
 * `--secrets` (or `WRIT_SECRETS_FILE`) names. Exit codes: 0 ok, 1 a negative outcome or a chain that does not hold,
 * 2 bad input.
 */
import { Args, Command, Options } from "@effect/cli"
import { Config, Console, Deferred, Effect, Layer, Option } from "effect"
import * as nodePath from "node:path"
import * as EnvFileSecretStore from "../../../adapters/node/EnvFileSecretStore.ts"
import { ActionExecutionBackend } from "../../../core/action/ActionExecutionBackend.ts"
import { actionNameIssue } from "../../../core/base/Refs.ts"
import { closeBoundary, openBoundary } from "../../../core/evidence/EvidenceWriter.ts"
import type { ExecutionOutcome } from "../../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../../core/execution/Ingress.ts"
import { AttemptStore } from "../../../core/state/AttemptStore.ts"
import type { Run } from "../../../core/state/Run.ts"
import { RunStore } from "../../../core/state/RunStore.ts"
import * as Demo from "../../Demo.ts"
import type * as Embedded from "../../Embedded.ts"
import * as DemoTools from "../DemoTools.ts"
import * as Backends from "./internal/backends.ts"
import { certificateHolds, certificateJson, embedded, encodeOutcome, evidenceLines } from "./internal/boundary.ts"
import {
  checkDatabase,
  choice,
  CliInputError,
  exitOneOnFailure,
  json,
  onDatabase,
  parseJsonObject,
  quoted,
  setExitCode
} from "./internal/input.ts"
import { outcomeCells, table } from "./internal/render.ts"

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
const backendOption = choice("backend", Backends.names).pipe(
  Options.withDefault("in-process" as const),
  Options.withDescription(
    "where the action runs: in-process (contains nothing), bubblewrap or deno (for an action that declares its " +
      "module, such as api.sign), edge (a signed call to a writ edge handler: --edge-url, --edge-key-id, secret in " +
      "WRIT_EDGE_KEY)"
  )
)
const secretsVariable = "WRIT_SECRETS_FILE"
const secretsOption = Options.file("secrets", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription(
    `bubblewrap, deno: the environment file (NAME=value a line) the secrets an action declares are injected from ` +
      `(default: ${secretsVariable} when set); keep it outside every --read and --write root`
  )
)
const edgeUrlOption = Options.text("edge-url").pipe(
  Options.optional,
  Options.withDescription("--backend edge: the handler's base URL")
)
const edgeKeyIdOption = Options.text("edge-key-id").pipe(
  Options.optional,
  Options.withDescription("--backend edge: the key id the handler knows this caller by")
)
const dbOption = Options.file("db").pipe(
  Options.optional,
  Options.withDescription("the SQLite file (created if missing); required by durable, governed and certifiable")
)

/** The demo's actions, and those that declare their module for a subprocess backend. */
const tools = [...Demo.actions, ...DemoTools.actions]

/** The secret store `--secrets FILE`, else `WRIT_SECRETS_FILE`, names; none when neither does. */
const secretStore = (file: Option.Option<string>) =>
  Effect.map(
    Option.match(file, {
      onSome: (path) => Effect.succeed(Option.some(path)),
      onNone: () => Config.option(Config.nonEmptyString(secretsVariable)).pipe(Effect.orElseSucceed(Option.none))
    }),
    Option.map((path) => EnvFileSecretStore.make({ path: nodePath.resolve(path) }))
  )

/** One demo action under the demo policy, on the backend in context, through the minimal profile's executor. */
const execMinimal = (step: Demo.Step) =>
  Effect.flatMap(Demo.installPolicy, (policy_snapshot) => Demo.runStep(step, 0, { policy_snapshot }))

/** One demo action under a durable executor (in a new Run) or a governed one (in a new task boundary). */
const execEmbedded = (profile: Embedded.Profile, step: Demo.Step) =>
  Effect.gen(function*() {
    const ref = yield* Demo.installPolicy
    if (profile !== "durable") {
      const boundary = yield* openBoundary(ref)
      // Interrupted (Ctrl-C), the operation closes as cancelled and then the boundary, so nothing is left open.
      const outcome = yield* Demo.runStep(step, 0, { policy_snapshot: ref, boundary }).pipe(
        Effect.onInterrupt(() => Effect.ignore(closeBoundary(boundary)))
      )
      const certified = yield* Ingress.closeAndCertify(boundary, profile === "certifiable")
      return { outcome, run: undefined, attempts: undefined, boundary, certified }
    }
    const runs = yield* RunStore
    // The executor creates the Run only once the call is admitted: a denied, deferred or escalated call has none.
    const created = yield* Deferred.make<Run>()
    return yield* Effect.gen(function*() {
      const outcome = yield* Demo.runStep(step, 0, { policy_snapshot: ref, newRun: created })
      const run = yield* Ingress.createdRun(created)
      if (Option.isNone(run)) return { outcome, run: null, attempts: 0, boundary: undefined, certified: undefined }
      const finished = yield* runs.finish(run.value.run_id, Ingress.terminalOf(outcome))
      const attempts = yield* Effect.flatMap(AttemptStore, (store) => store.listAttempts(run.value.run_id))
      return { outcome, run: finished.run, attempts: attempts.length, boundary: undefined, certified: undefined }
    }).pipe(Ingress.endRunOnError(created, "cli"))
  })

/** `writ exec`. */
export const command = Command.make(
  "exec",
  {
    action: actionArg,
    args: argsOption,
    profile: profileOption,
    backend: backendOption,
    edgeUrl: edgeUrlOption,
    edgeKeyId: edgeKeyIdOption,
    db: dbOption,
    secrets: secretsOption,
    json,
    ...Backends.sandboxOptions
  },
  ({ action, args, backend, db, edgeKeyId, edgeUrl, json, profile, secrets, ...sandbox }) =>
    Effect.gen(function*() {
      const issue = actionNameIssue(action)
      if (Option.isSome(issue)) {
        return yield* new CliInputError({ message: `ACTION ${quoted(action)} is refused: ${issue.value}` })
      }
      const parsed = yield* parseJsonObject(args, "--args")
      const step: Demo.Step = { action, arguments: parsed, note: "" }
      // Built (and, for edge, checked) before anything runs: an incomplete edge address is bad input.
      const store = yield* secretStore(secrets)
      if (Option.isSome(secrets) && backend !== "bubblewrap" && backend !== "deno") {
        return yield* new CliInputError({ message: `--secrets is for bubblewrap and deno, not ${backend}` })
      }
      const selected = Layer.succeed(
        ActionExecutionBackend,
        yield* Backends.make(
          backend,
          { url: edgeUrl, keyId: edgeKeyId },
          { url: "--edge-url", keyId: "--edge-key-id" },
          sandbox,
          Option.getOrUndefined(store)
        )
      )
      const row = (outcome: ExecutionOutcome) =>
        table(["action", "outcome", "reason", "stage"], [[action, ...outcomeCells(outcome)]])
      if (profile === "minimal") {
        if (Option.isSome(db)) {
          return yield* new CliInputError({
            message: "--db is for the durable, governed and certifiable profiles: the minimal profile keeps nothing"
          })
        }
        // The in-process default runs on the executor the CLI's root provides; another backend on its own.
        const outcome = backend === "in-process"
          ? yield* execMinimal(step)
          : yield* Effect.provide(execMinimal(step), Demo.layerWith({}, selected, tools))
        yield* Console.log(json ? JSON.stringify(encodeOutcome(outcome), null, 2) : row(outcome))
        if (outcome._tag !== "succeeded") yield* setExitCode(1)
        return
      }
      if (Option.isNone(db)) {
        return yield* new CliInputError({ message: `--db FILE is required by the ${profile} profile` })
      }
      yield* checkDatabase(db.value, "new_or_existing")
      const result = yield* Effect.provide(execEmbedded(profile, step), embedded(db.value, profile, selected, tools))
        .pipe(
          onDatabase(db.value)
        )
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
