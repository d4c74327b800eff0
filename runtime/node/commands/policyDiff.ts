/**
 * `writ policy diff OLD NEW`: the generated calls whose disposition differs between two policy versions (files, or
 * `id@version` from `--db`), grouped by (action, old, new) with the smallest example each. Sampled, not symbolic.
 * Exit codes: 0 nothing differs, 1 something does, 2 bad input.
 */
import { Args, Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import * as fs from "node:fs"
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import type { DiffReport } from "../../testing/Diff.ts"
import type { Policy } from "../../testing/Harness.ts"
import { CliInputError, json, parseIdentifier, quoted, setExitCode } from "./internal/input.ts"
import { load } from "./internal/policyFile.ts"
import { db, withReadStores } from "./internal/stores.ts"

const version = (name: string) =>
  Args.text({ name }).pipe(
    Args.withDescription(`the ${name.toLowerCase()} policy: a declaration file, or ID@VERSION from --db`)
  )

/** `--name N`: a whole number from `least`; anything else is refused naming the option and the value. */
const integer = (name: string, least: number) =>
  Options.text(name).pipe(
    Options.withPseudoName("N"),
    Options.mapEffect((text) => {
      const value = Number(text)
      return /^\d+$/.test(text) && Number.isSafeInteger(value) && value >= least
        ? Effect.succeed(value)
        : Effect.fail(ValidationError.invalidValue(HelpDoc.p(
          `--${name} ${JSON.stringify(text)} is not a whole number${least > 0 ? ` from ${least}` : ""}`
        )))
    })
  )

const options = {
  old: version("OLD"),
  new: version("NEW"),
  actions: Options.text("actions").pipe(
    Options.optional,
    Options.withDescription(
      "a JavaScript module exporting `actions`, an array of Action definitions (default: stand-ins for the names the policies mention)"
    )
  ),
  runs: integer("runs", 1).pipe(Options.withDefault(500), Options.withDescription("how many calls to generate")),
  seed: integer("seed", 0).pipe(Options.withDefault(42), Options.withDescription("the generator's seed")),
  db: db.pipe(Options.optional),
  json
}

/** Read `ID@VERSION` from the database, read-only; an unknown version is bad input naming it. */
const stored = (text: string, named: string, db: Option.Option<string>) =>
  Effect.gen(function*() {
    const at = text.lastIndexOf("@")
    if (at < 0) return yield* new CliInputError({ message: `${named} ${quoted(text)}: no such file` })
    if (Option.isNone(db)) {
      return yield* new CliInputError({ message: `${named} ${quoted(text)} names a stored version: give --db FILE` })
    }
    const id = yield* parseIdentifier(text.slice(0, at), `${named} ${quoted(text)}: the id`)
    const version = yield* parseIdentifier(text.slice(at + 1), `${named} ${quoted(text)}: the version`)
    return yield* withReadStores(
      db.value,
      Effect.flatMap(PolicySnapshotStore, (store) => store.get(id, version)).pipe(
        Effect.mapError((error) => new CliInputError({ message: `${named} ${quoted(text)}: ${error.message}` }))
      )
    )
  })

/** OLD or NEW: a declaration file if one exists at that path, else `ID@VERSION` in `--db`. */
const policyOf = (text: string, named: string, db: Option.Option<string>) =>
  fs.existsSync(text)
    ? Effect.map(load(text), ({ policy }): Policy => policy)
    : Effect.map(stored(text, named, db), (snapshot): Policy => snapshot)

const isAction = (value: unknown): value is ActionDefinition =>
  typeof value === "object" && value !== null && typeof (value as ActionDefinition).name === "string" &&
  Schema.isSchema((value as ActionDefinition).input) && Schema.isSchema((value as ActionDefinition).output)

/** Import `--actions` (resolved against the working directory) and check it exports an array of Action definitions. */
const actionsOf = (path: string) =>
  Effect.gen(function*() {
    const refuse = (why: string) => new CliInputError({ message: `--actions ${quoted(path)} ${why}` })
    const file = resolve(path)
    if (!fs.existsSync(file)) return yield* refuse("names no file")
    const module = yield* Effect.tryPromise({
      try: () => import(pathToFileURL(file).href) as Promise<{ readonly actions?: unknown }>,
      catch: (error) => refuse(`cannot be imported (${error instanceof Error ? error.message : String(error)})`)
    })
    const actions = module.actions
    if (!Array.isArray(actions)) return yield* refuse("exports no `actions` array")
    const bad = actions.findIndex((action) => !isAction(action))
    if (bad >= 0) return yield* refuse(`exports \`actions\` whose item ${bad} is not an Action definition`)
    return actions as ReadonlyArray<ActionDefinition>
  })

const text = (report: DiffReport) =>
  report.groups.length === 0
    ? `no difference in ${report.runs} generated calls (seed ${report.seed})`
    : [
      `${report.groups.length} difference(s) in ${report.runs} generated calls (seed ${report.seed}):`,
      ...report.groups.map((group) =>
        `${group.action}  ${group.old} -> ${group.new}  ${group.count} call(s)\n  e.g. ${
          JSON.stringify(group.example)
        }\n  old: ${group.old_outcome}\n  new: ${group.new_outcome}`
      )
    ].join("\n")

/** `writ policy diff`. */
export const diff = Command.make("diff", options, (options) =>
  Effect.gen(function*() {
    const oldPolicy = yield* policyOf(options.old, "OLD", options.db)
    const newPolicy = yield* policyOf(options.new, "NEW", options.db)
    const actions = Option.isSome(options.actions) ? yield* actionsOf(options.actions.value) : undefined
    // Loaded on use: fast-check, which the generator needs, is an optional peer dependency of writ.
    const Diff = yield* Effect.tryPromise({
      try: () => import("../../testing/Diff.ts"),
      catch: (error) =>
        new CliInputError({
          message: `writ policy diff needs fast-check installed (${error instanceof Error ? error.message : error})`
        })
    })
    const report = yield* Diff.diffEffect(oldPolicy, newPolicy, actions, { runs: options.runs, seed: options.seed })
      .pipe(Effect.mapError((error) => new CliInputError({ message: error.message })))
    yield* Console.log(options.json ? JSON.stringify(report, null, 2) : text(report))
    if (report.groups.length > 0) yield* setExitCode(1)
  })).pipe(
    Command.withDescription(
      "The generated calls whose disposition differs between two policy versions, grouped by action and dispositions"
    )
  )
