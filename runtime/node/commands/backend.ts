/**
 * `writ backend probe NAME`: the capability report an effect backend gives here, from a trial run of its own settings
 * where it has one (bubblewrap, deno), or the platform's claims a signed edge handler reports (edge, with `--url`,
 * `--key-id` and its secret in WRIT_EDGE_KEY), with its digest: what a governed call admitted on it records. Exit
 * codes: 0 ok, 2 bad input.
 */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Schema } from "effect"
import { ActionBackendCapabilityReport } from "../../../core/action/ActionExecutionBackend.ts"
import { canonical } from "../../../core/base/Digest.ts"
import * as Backends from "./internal/backends.ts"
import { exitOneOnFailure, json } from "./internal/input.ts"
import { table } from "./internal/render.ts"

const name = Args.choice(Backends.names.map((key) => [key, key] as const), { name: "backend" }).pipe(
  Args.withDescription(Backends.names.join(" | "))
)
const url = Options.text("url").pipe(Options.optional, Options.withDescription("edge: the handler's base URL"))
const keyId = Options.text("key-id").pipe(
  Options.optional,
  Options.withDescription(
    `edge: the key id the handler knows this caller by (its secret in ${Backends.edgeKeyVariable})`
  )
)

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

const probe = Command.make("probe", { name, json, url, keyId }, ({ json, keyId, name, url }) =>
  Effect.gen(function*() {
    const backend = yield* Backends.make(name, { url, keyId }, { url: "--url", keyId: "--key-id" })
    const report = yield* backend.probe
    const encoded = yield* Schema.encode(ActionBackendCapabilityReport)(report)
    const digest = yield* canonical(encoded)
    yield* Console.log(json ? JSON.stringify({ report: encoded, capability_digest: digest }) : render(report, digest))
  }).pipe(exitOneOnFailure)).pipe(
    Command.withDescription("print a backend's capability report (a trial sandbox where it has one) and its digest")
  )

/** `writ backend`: what the effect backends can contain here. */
export const command = Command.make("backend").pipe(
  Command.withDescription("the effect backends and what they can prove they contain"),
  Command.withSubcommands([probe])
)
