/**
 * The `writ` command line: `demo` runs the scripted session, `exec` runs one demo action. Every
 * command takes `--json`. Exit codes: 0 ok, 1 a negative verdict, 2 bad input.
 */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Layer, Schema } from "effect"
import * as NodeDigest from "../../adapters/NodeDigest.ts"
import { ActionExecutor } from "../../core/ActionExecutor.ts"
import { ExecutionOutcome } from "../../core/ExecutionOutcome.ts"
import * as IdGenerator from "../../core/IdGenerator.ts"
import * as Demo from "../Demo.ts"
import { parseJsonObject, setExitCode } from "./CliInput.ts"
import * as PolicyCli from "./PolicyCli.ts"
import { outcomeCells, table } from "./Render.ts"

const json = Options.boolean("json").pipe(Options.withDescription("print JSON instead of a table"))

const encodeOutcome = Schema.encodeSync(ExecutionOutcome)

/** The layers every command runs on: the demo tool set, node:crypto digests, random ids. */
export const layer = Demo.layer.pipe(Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)))

const demo = Command.make("demo", { json }, ({ json }) =>
  Effect.gen(function*() {
    const rows = yield* Demo.session
    if (json) {
      return yield* Console.log(JSON.stringify(
        rows.map(({ outcome, step }) => ({
          action: step.action,
          arguments: step.arguments,
          outcome: encodeOutcome(outcome)
        })),
        null,
        2
      ))
    }
    const executor = yield* ActionExecutor
    const plan = yield* Effect.orDie(executor.plan(Demo.actions[0]!))
    yield* Console.log(`writ demo: a scripted agent session, profile ${executor.profile}`)
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
      `\nprofile ${executor.profile}: no Run, no durable evidence, no certificate claim; (stage) = skipped in this profile.`
    )
  })).pipe(Command.withDescription("Run a scripted agent session through the executor"))

const actionArg = Args.text({ name: "action" }).pipe(Args.withDescription("action name or alias"))
const argsOption = Options.text("args").pipe(
  Options.withDefault("{}"),
  Options.withDescription("the action's arguments as a JSON object")
)

const exec = Command.make(
  "exec",
  { action: actionArg, args: argsOption, json },
  ({ action, args, json }) =>
    Effect.gen(function*() {
      const parsed = yield* parseJsonObject(args, "--args")
      const outcome = yield* Demo.runStep({ action, arguments: parsed, note: "" }, 0, yield* Demo.installPolicy)
      yield* Console.log(
        json
          ? JSON.stringify(encodeOutcome(outcome), null, 2)
          : table(["action", "outcome", "reason", "stage"], [[action, ...outcomeCells(outcome)]])
      )
      if (outcome._tag !== "succeeded") yield* setExitCode(1)
    })
).pipe(Command.withDescription("Run one of the demo's actions through the executor"))

/** The `writ` command and its subcommands. */
export const command = Command.make("writ").pipe(Command.withSubcommands([demo, exec, PolicyCli.command]))

/** Parse argv and run the matching command. */
export const run = Command.run(command, { name: "writ", version: "0.1.0" })
