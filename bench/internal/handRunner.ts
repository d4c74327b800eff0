/**
 * The `backends` benchmark's minimal hand-written runner: imports the module named in argv and runs the export's
 * handler once on the JSON arguments in argv, through the in-process invoke writ's runner also ends in, and prints the
 * JSON result. No request channel, token, frames, descriptor check or Schema: the floor a sandboxed call cannot go
 * below with the same sandbox and the same action module.
 */
import { Effect } from "effect"
import * as InProcessBackend from "../../adapters/memory/InProcessBackend.ts"
import type { ActionDefinition } from "../../core/action/Action.ts"
import { refusing } from "../../core/action/internal/outbox.ts"
import { mint } from "../../core/action/internal/token.ts"
import { meter } from "../../core/action/internal/usage.ts"

const [module, name, json] = (globalThis as { Deno?: { args: Array<string> } }).Deno?.args ?? process.argv.slice(2)
const definition = (await import(module!))[name!] as ActionDefinition
const result = await Effect.runPromise(InProcessBackend.make.invoke(mint(definition), {
  definition,
  input: JSON.parse(json!),
  context: { request_id: "bench", attempt_id: "bench" },
  usage: meter().service,
  outbox: refusing,
  secrets: new Map()
}))
process.stdout.write(JSON.stringify(result))
