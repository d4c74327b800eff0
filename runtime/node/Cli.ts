/**
 * The `writ` command line: `demo` runs the scripted session through the governed executor on a
 * SQLite file, `exec` runs one demo action under a chosen profile, `evidence`, `certificate` and
 * `recover` read and repair what they wrote, `outbox` and `policy` work on intents and declarations, `backend`
 * reports what an effect backend can contain, `harness` probes, plans and runs a native coding-agent CLI, `mcp serve`
 * serves the actions as MCP tools.
 * Every command takes `--json`; each is a module of ./commands. Exit codes: 0 ok, 1 a negative
 * verdict, 2 bad input (and then nothing runs).
 */
import { CliConfig, Command } from "@effect/cli"
import { Effect, Layer } from "effect"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import * as IdGenerator from "../../core/base/IdGenerator.ts"
import * as Demo from "../Demo.ts"
import * as Backend from "./commands/backend.ts"
import * as Certificate from "./commands/certificate.ts"
import * as DemoCommand from "./commands/demo.ts"
import * as Evidence from "./commands/evidence.ts"
import * as Exec from "./commands/exec.ts"
import * as Harness from "./commands/harness.ts"
import * as Mcp from "./commands/mcp.ts"
import * as Outbox from "./commands/outbox.ts"
import * as Policy from "./commands/policy.ts"
import * as Recover from "./commands/recover.ts"

/** The layers every command runs on: the demo tool set, node:crypto digests, random ids. */
export const layer = Demo.layer.pipe(Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)))

/** The `writ` command and its subcommands. */
export const command = Command.make("writ").pipe(
  Command.withSubcommands([
    DemoCommand.command,
    Exec.command,
    Evidence.command,
    Certificate.command,
    Recover.command,
    Outbox.command,
    Policy.command,
    Backend.command,
    Harness.command,
    Mcp.command
  ])
)

const runCommand = Command.run(command, { name: "writ", version: "0.1.0" })

// Names are matched exactly: @effect/cli matches them case-insensitively by default but then looks an option's value up
// under its declared spelling, so `--PROFILE durable` was consumed and silently dropped.
const cliConfig = CliConfig.layer({ isCaseSensitive: true })

/** Parse argv (program and script first) and run the matching command; bad input no parser reports is refused first. */
export const run = (argv: ReadonlyArray<string>) =>
  Effect.zipRight(Recover.checkForget(argv.slice(2)), runCommand(argv)).pipe(Effect.provide(cliConfig))
