/**
 * `writ policy check|fmt|schema|explain|diff|put|activate|retire`: validate, format, describe, explain and diff
 * declared policies, and take a version through its lifecycle in a database. Exit codes: 0 ok (or allow), 1 deny or
 * escalate (or a store failure, or a difference), 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Console, Effect, Either, JSONSchema, Option, Schema } from "effect"
import * as PolicyFormat from "../../../adapters/memory/PolicyFormat.ts"
import * as Action from "../../../core/action/Action.ts"
import { actionNameIssue } from "../../../core/base/Refs.ts"
import * as Time from "../../../core/base/Time.ts"
import * as InvocationContext from "../../../core/policy/InvocationContext.ts"
import * as PermissionPolicy from "../../../core/policy/PermissionPolicy.ts"
import type { PolicyInput } from "../../../core/policy/PolicyEvaluator.ts"
import * as PolicyGate from "../../../core/policy/PolicyGate.ts"
import {
  choice,
  CliInputError,
  json,
  jsonAlways,
  parseIdentifier,
  parseJsonObject,
  quoted,
  setExitCode
} from "./internal/input.ts"
import { file, load } from "./internal/policyFile.ts"
import { diff } from "./policyDiff.ts"
import { activate, put, retire } from "./policyStore.ts"

const check = Command.make("check", { file, json }, ({ file, json }) =>
  Effect.gen(function*() {
    const { snapshot } = yield* load(file)
    const summary = {
      policy_id: snapshot.policy_id,
      version: snapshot.version,
      digest: snapshot.digest,
      rules: snapshot.compiled_rules.length,
      gates: snapshot.gate_bindings.length
    }
    yield* Console.log(
      json
        ? JSON.stringify(summary, null, 2)
        : `${summary.policy_id}@${summary.version}  digest ${summary.digest}  ${summary.rules} rules, ${summary.gates} gates`
    )
  })).pipe(Command.withDescription("Validate and compile a policy; print its id, version, digest and rule count"))

const fmt = Command.make("fmt", { file, json }, ({ file, json }) =>
  Effect.gen(function*() {
    const { policy } = yield* load(file)
    yield* Console.log(PolicyFormat.write(policy, json ? "json" : "yaml").trimEnd())
  })).pipe(Command.withDescription("Print the declaration in canonical form (YAML, or JSON with --json); same digest"))

const schema = Command.make(
  "schema",
  { json: jsonAlways },
  () => Console.log(JSON.stringify(JSONSchema.make(PermissionPolicy.PermissionPolicy), null, 2))
).pipe(
  Command.withDescription("Print the JSON Schema of a policy declaration, for editors")
)

const origin = choice("origin", ["USER", "SELF", "OTHER_AGENT"]).pipe(
  Options.optional,
  Options.withDescription("the origin of the call (none: no invocation context)")
)

const explainOptions = {
  file,
  json,
  action: Options.text("action").pipe(Options.withDescription("the action name")),
  args: Options.text("args").pipe(Options.withDefault("{}"), Options.withDescription("the arguments as a JSON object")),
  effects: Options.text("effects").pipe(
    Options.withDefault(""),
    Options.withDescription("the action's declared effects, comma-separated (e.g. filesystem.write)")
  ),
  declares: Options.text("declares").pipe(
    Options.withDefault("{}"),
    Options.withDescription(
      "what the action declares beyond its effects, as Action.make takes it: a JSON object with any of " +
        "mcp {server, tool, resources}, secrets [{namespace, exposure}], environment [{variable, exposure}]"
    )
  ),
  principal: Options.text("principal").pipe(Options.withDefault("cli-user")),
  tenant: Options.text("tenant").pipe(Options.optional),
  origin,
  viaAgent: Options.text("via-agent").pipe(
    Options.optional,
    Options.withDescription(
      "the agent the request came through (delegation to the executing agent): with --origin USER, the agent the user asked; with OTHER_AGENT, the agent that asked (default other-agent)"
    )
  )
}

/** An action's declared MCP tool, secrets and environment, exactly as `Action.make` takes them. */
const Declarations = Schema.Struct({
  mcp: Schema.optionalWith(Action.McpTool, { exact: true }),
  secrets: Schema.optionalWith(Schema.Array(Action.SecretNeed), { exact: true }),
  environment: Schema.optionalWith(Schema.Array(Action.EnvironmentNeed), { exact: true })
})

const decodeDeclarations = Schema.decodeUnknownEither(Declarations, { onExcessProperty: "error", errors: "first" })

/** Parse `--declares`; bad input names the offending field. */
const parseDeclarations = (text: string) =>
  Either.flatMap(parseJsonObject(text, "--declares"), (value) =>
    Either.mapLeft(
      decodeDeclarations(value),
      (error) => new CliInputError({ message: `--declares ${PermissionPolicy.validationError(error).message}` })
    ))

/**
 * Check the names `explain` is given against the schemas a real call's are held to: a malformed one is bad input, not
 * a verdict (an invalid principal or agent id would otherwise fail inside the invocation factories, unreported).
 */
const checkNames = (options: {
  readonly action: string
  readonly principal: string
  readonly tenant: Option.Option<string>
  readonly viaAgent: Option.Option<string>
}) => {
  const issue = actionNameIssue(options.action)
  if (Option.isSome(issue)) {
    return Either.left(
      new CliInputError({ message: `--action ${quoted(options.action)} is refused: ${issue.value}` })
    )
  }
  const ids = [
    ["--principal", Option.some(options.principal)],
    ["--tenant", options.tenant],
    ["--via-agent", options.viaAgent]
  ] as const
  for (const [option, value] of ids) {
    if (Option.isSome(value)) {
      const checked = parseIdentifier(value.value, option)
      if (Either.isLeft(checked)) return checked
    }
  }
  return Either.void
}

/** The executing agent `explain` evaluates as. */
const executingAgent = InvocationContext.agent("writ-agent")

/**
 * Check `--via-agent` against `--origin`: an agent a request came through exists only for a USER request (an agent the
 * user asked, which delegated) or an OTHER_AGENT one (the agent that asked), and is never the executing agent itself.
 */
const checkViaAgent = (origin: Option.Option<string>, viaAgent: Option.Option<string>) => {
  if (Option.isNone(viaAgent)) return Either.void
  const refuse = (why: string) => Either.left(new CliInputError({ message: `--via-agent ${viaAgent.value} ${why}` }))
  if (Option.isNone(origin)) {
    return refuse("needs --origin USER or OTHER_AGENT: without --origin there is no invocation for it to be part of")
  }
  if (origin.value === "SELF") {
    return refuse(
      "contradicts --origin SELF: SELF is the executing agent's own initiative, not a request through another agent"
    )
  }
  if (viaAgent.value === executingAgent.id) {
    return refuse("names the executing agent itself: name the other agent the request came through")
  }
  return Either.void
}

const invocationOf = (
  origin: Option.Option<string>,
  viaAgent: Option.Option<string>,
  principal: string
): InvocationContext.InvocationContext | undefined => {
  if (Option.isNone(origin)) return undefined
  const via = Option.map(viaAgent, (id) => InvocationContext.agent(id))
  switch (origin.value) {
    case "USER": {
      const human = InvocationContext.human("cli-user")
      return Option.match(via, {
        onNone: () => InvocationContext.user(human, executingAgent, principal, {}),
        onSome: (agent) =>
          InvocationContext.delegateTo(
            InvocationContext.user(human, agent, principal, {}),
            executingAgent,
            principal,
            {}
          )
      })
    }
    case "SELF":
      return InvocationContext.autonomous(executingAgent, principal, {})
    default:
      return InvocationContext.otherAgent(
        Option.getOrElse(via, () => InvocationContext.agent("other-agent")),
        executingAgent,
        principal,
        {}
      )
  }
}

const explain = Command.make("explain", explainOptions, (options) =>
  Effect.gen(function*() {
    const { snapshot } = yield* load(options.file)
    const args = yield* parseJsonObject(options.args, "--args")
    const declared = yield* parseDeclarations(options.declares)
    yield* checkNames(options)
    yield* checkViaAgent(options.origin, options.viaAgent)
    const invocation = invocationOf(options.origin, options.viaAgent, options.principal)
    const input: PolicyInput = {
      action: options.action,
      effects: options.effects.split(",").map((effect) => effect.trim()).filter((effect) => effect !== ""),
      arguments: args,
      principal: options.principal,
      now: yield* Time.nowMicros,
      bound_agent: executingAgent,
      ...(Option.isSome(options.tenant) ? { tenant: options.tenant.value } : {}),
      ...(invocation === undefined ? {} : { invocation }),
      ...declared
    }
    const verdict = PolicyGate.explain(PolicyGate.pinned(snapshot), input)
    const result = {
      policy: `${snapshot.policy_id}@${snapshot.version}`,
      digest: snapshot.digest,
      action: options.action,
      disposition: verdict.disposition,
      reason: verdict.code,
      stage: verdict.stage,
      ...(verdict.detail === undefined ? {} : { detail: verdict.detail })
    }
    yield* Console.log(
      options.json
        ? JSON.stringify(result, null, 2)
        : `${result.disposition}  ${result.reason}  (${result.stage})${
          result.detail === undefined ? "" : `\n  ${result.detail}`
        }`
    )
    if (verdict.disposition !== "allow") yield* setExitCode(1)
  })).pipe(
    Command.withDescription("Explain the decision a policy gives one call: disposition, reason code, matched rules")
  )

/** `writ policy` and its subcommands. */
export const command = Command.make("policy").pipe(
  Command.withDescription(
    "Validate, format, describe, explain and diff permission policies; put, activate and retire versions in a database"
  ),
  Command.withSubcommands([check, fmt, schema, explain, diff, put, activate, retire])
)
