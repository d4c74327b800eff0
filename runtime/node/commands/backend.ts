/**
 * `writ backend probe NAME`: the capability report an effect backend gives here, from a trial run of its own settings
 * where it has one (bubblewrap, deno), with its digest: what a governed call admitted on it records. Exit codes: 0 ok,
 * 2 bad input.
 */
import { Args, Command } from "@effect/cli"
import { Console, Effect, Schema } from "effect"
import * as InProcessBackend from "../../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../../../adapters/node/DenoBackend.ts"
import { ActionBackendCapabilityReport } from "../../../core/action/ActionExecutionBackend.ts"
import { canonical } from "../../../core/base/Digest.ts"
import { json } from "./internal/input.ts"
import { table } from "./internal/render.ts"

const backends = {
  "in-process": Effect.succeed(InProcessBackend.make),
  bubblewrap: BubblewrapBackend.make(),
  deno: DenoBackend.make()
} as const

const name = Args.choice(
  Object.keys(backends).map((key) => [key, key as keyof typeof backends] as const),
  { name: "backend" }
).pipe(Args.withDescription("in-process | bubblewrap | deno"))

const render = (report: ActionBackendCapabilityReport, digest: string) =>
  [
    `backend ${report.backend.id}@${report.backend.version}` +
    (report.mechanism === undefined ? "" : ` (${report.mechanism.name} ${report.mechanism.version})`),
    `verified by: ${report.verified_by}`,
    "",
    table(["containment", "level"], Object.entries(report.containment).map(([kind, level]) => [kind, level])),
    ...(report.capabilities === undefined ? [] : [
      "",
      table(
        ["capability", "level", "by", "verified"],
        report.capabilities.map((claim) => [claim.name, claim.level, claim.by ?? "-", claim.verified])
      )
    ]),
    "",
    `capability digest: ${digest}`
  ].join("\n")

const probe = Command.make("probe", { name, json }, ({ json, name }) =>
  Effect.gen(function*() {
    const backend = yield* backends[name]
    const report = yield* backend.probe
    const encoded = yield* Schema.encode(ActionBackendCapabilityReport)(report)
    const digest = yield* canonical(encoded)
    yield* Console.log(json ? JSON.stringify({ report: encoded, capability_digest: digest }) : render(report, digest))
  }).pipe(Effect.orDie)).pipe(
    Command.withDescription("print a backend's capability report (a trial sandbox where it has one) and its digest")
  )

/** `writ backend`: what the effect backends can contain here. */
export const command = Command.make("backend").pipe(
  Command.withDescription("the effect backends and what they can prove they contain"),
  Command.withSubcommands([probe])
)
