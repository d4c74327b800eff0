#!/usr/bin/env node
/**
 * The `writ` executable: the Node composition root of the CLI.
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Layer } from "effect"
import * as Cli from "./Cli.ts"

// Interrupted (SIGINT or SIGTERM) exits 130, as a shell reports a command ended by Ctrl-C.
const exitCode = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isSuccess(exit) ? 0 : Cause.isInterruptedOnly(exit.cause) ? 130 : Cause.isFailType(exit.cause) ? 2 : 1

Cli.run(process.argv).pipe(
  Effect.tapErrorTag("CliInputError", (error) => Console.error(error.message)),
  Effect.provide(Layer.merge(Cli.layer, NodeContext.layer)),
  (program) =>
    NodeRuntime.runMain(program, {
      disableErrorReporting: true,
      teardown: (exit, onExit) => onExit(exitCode(exit))
    })
)
