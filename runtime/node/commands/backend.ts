/**
 * `writ backend probe NAME`: the capability report an effect backend gives here, from a trial run of its own settings
 * where it has one (bubblewrap, deno), or the platform's claims a signed edge handler reports (edge, with `--url`,
 * `--key-id` and its secret in WRIT_EDGE_KEY), with its digest: what a governed call admitted on it records. With
 * `--verify`, the attack matrix run live on the backend as configured (`--read`, `--write`, ... as `writ exec` takes
 * them): each enforced claim attacked and judged by its effect. Exit codes: 0 ok, 1 an enforced claim escaped (or
 * failed to give what it grants), 2 bad input.
 */
import { Args, Command, Options } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import * as path from "node:path"
import { ActionBackendCapabilityReport } from "../../../core/action/ActionExecutionBackend.ts"
import { canonical } from "../../../core/base/Digest.ts"
import * as Backends from "./internal/backends.ts"
import { CliInputError, exitOneOnFailure, json, setExitCode } from "./internal/input.ts"
import { table } from "./internal/render.ts"
import * as Verify from "./internal/verify.ts"

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

const verify = Options.boolean("verify").pipe(
  Options.withDescription("run the attack matrix live: each enforced claim attacked, judged by its effect on the host")
)
const verifyDir = Options.directory("verify-dir", { exists: "yes" }).pipe(
  Options.optional,
  Options.withDescription(
    "--verify: where the attacks plant their canary, targets and socket (a fresh directory inside it; default /var/tmp)"
  )
)

const verifyGrant = Options.text("verify-grant").pipe(
  Options.repeated,
  Options.withDescription(
    "--verify: one more destination pattern the network attacks' policy grants (a wider grant they must catch; repeatable)"
  )
)

const renderMatrix = (rows: ReadonlyArray<Verify.AttackRow>) =>
  table(["claim", "attack", "verdict", "detail"], rows.map((row) => [row.claim, row.attack, row.verdict, row.detail]))

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

const probe = Command.make(
  "probe",
  { name, json, url, keyId, verify, verifyDir, verifyGrant, ...Backends.sandboxOptions },
  ({ json, keyId, name, url, verify, verifyDir, verifyGrant, ...sandbox }) =>
    Effect.gen(function*() {
      const address = { url, keyId }
      const flags = { url: "--url", keyId: "--key-id" }
      if (!verify) {
        if (Option.isSome(verifyDir) || verifyGrant.length > 0) {
          return yield* new CliInputError({ message: "--verify-dir and --verify-grant are for --verify" })
        }
        const backend = yield* Backends.make(name, address, flags, sandbox)
        const report = yield* backend.probe
        const encoded = yield* Schema.encode(ActionBackendCapabilityReport)(report)
        const digest = yield* canonical(encoded)
        yield* Console.log(
          json ? JSON.stringify({ report: encoded, capability_digest: digest }) : render(report, digest)
        )
        return
      }
      if (name === "edge") {
        return yield* new CliInputError({
          message: "--verify runs its attacks here, and the edge backend's containment is the platform's remote claim"
        })
      }
      const { report, rows } = yield* Verify.run(
        (secrets) => Backends.make(name, address, flags, sandbox, secrets),
        {
          memoryBytes: Option.getOrElse(sandbox.memoryMb, () => 512) * 1024 * 1024,
          processes: Option.getOrElse(sandbox.processes, () => 64)
        },
        Option.getOrElse(Option.map(verifyDir, (dir) => path.resolve(dir)), Verify.defaultBase),
        verifyGrant
      )
      const encoded = yield* Schema.encode(ActionBackendCapabilityReport)(report)
      const digest = yield* canonical(encoded)
      const escaped = rows.filter((row) => row.verdict === "escaped").length
      const failed = rows.filter((row) => row.verdict === "failed").length
      if (json) {
        const matrix = yield* Schema.encode(Schema.Array(Verify.AttackRow))(rows)
        yield* Console.log(JSON.stringify({ report: encoded, capability_digest: digest, matrix, escaped, failed }))
      } else {
        yield* Console.log(
          [
            `backend ${report.backend.id}@${report.backend.version}: the attack matrix, run live`,
            "",
            renderMatrix(rows),
            "",
            `capability digest: ${digest}`,
            escaped + failed === 0
              ? "every enforced claim held"
              : [
                ...(escaped > 0 ? [`${escaped} enforced claim(s) escaped`] : []),
                ...(failed > 0 ? [`${failed} enforced claim(s) did not give what they grant`] : [])
              ].join("; ")
          ].join("\n")
        )
      }
      if (escaped + failed > 0) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(
  Command.withDescription(
    "print a backend's capability report (a trial sandbox where it has one) and its digest; --verify attacks each claim"
  )
)

/** `writ backend`: what the effect backends can contain here. */
export const command = Command.make("backend").pipe(
  Command.withDescription("the effect backends and what they can prove they contain"),
  Command.withSubcommands([probe])
)
