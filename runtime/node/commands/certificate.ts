/**
 * `writ certificate mint|verify`: mint a task certificate from a closed task boundary's chain
 * against a trusted head, and re-verify a certificate file against the stores. Exit codes: 0 ok,
 * 1 a chain that cannot be certified or a certificate that does not hold, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { Console, Effect, Either, ParseResult, Schema } from "effect"
import * as TaskCertificate from "../../../core/evidence/TaskCertificate.ts"
import {
  CliInputError,
  exitOneOnFailure,
  json,
  jsonAlways,
  parseJsonObject,
  parseSha256,
  setExitCode
} from "./internal/input.ts"
import { certificateLine } from "./internal/render.ts"
import { db, knownChain, withReadStores } from "./internal/stores.ts"

const encodeCertificate = Schema.encodeSync(TaskCertificate.TaskCertificate)
// A field the schema does not know is a claim nothing verifies: refused, never dropped.
const decodeCertificate = Schema.decodeUnknownEither(TaskCertificate.TaskCertificate, {
  onExcessProperty: "error",
  errors: "all"
})

/** Why a parsed file is not a task certificate: the fields it has that a certificate does not, else every problem. */
const notACertificate = (file: string, error: ParseResult.ParseError) => {
  const unknown = ParseResult.ArrayFormatter.formatErrorSync(error)
    .filter((issue) => issue._tag === "Unexpected")
    .map((issue) => issue.path.join("."))
  return new CliInputError({
    message: `--certificate ${file} is not a task certificate: ${
      unknown.length > 0
        ? `unknown field(s) ${unknown.join(", ")} (a field a certificate does not have is an unverified claim)`
        : ParseResult.TreeFormatter.formatErrorSync(error)
    }`
  })
}

/** A certificate as JSON text: what `mint` prints and `verify` reads. */
export const certificateJson = (certificate: TaskCertificate.TaskCertificate) =>
  JSON.stringify(encodeCertificate(certificate), null, 2)

const mint = Command.make(
  "mint",
  {
    db,
    json: jsonAlways,
    chain: Options.text("chain").pipe(Options.withDescription("the closed task boundary's chain id")),
    expectedHead: Options.text("expected-head").pipe(
      Options.withDescription("the trusted head: the chain's task_closed record hash")
    )
  },
  ({ chain, db, expectedHead, json: _ }) =>
    Effect.gen(function*() {
      const head = yield* parseSha256(expectedHead, "--expected-head")
      const minted = yield* withReadStores(
        db,
        Effect.flatMap(knownChain(chain), (chain_id) => Effect.either(TaskCertificate.mint(chain_id, head)))
      )
      if (Either.isRight(minted)) return yield* Console.log(certificateJson(minted.right))
      const error = minted.left
      if (error.reason === "unavailable") return yield* error
      yield* Console.log(JSON.stringify(
        { minted: false, failure_code: error.reason, detail: error.detail, failed_record_id: error.failed_record_id },
        null,
        2
      ))
      yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Mint a certificate for a closed task boundary's chain, verified against a trusted head; prints it as JSON (exit 1 when the chain cannot be certified)"
))

const verify = Command.make(
  "verify",
  {
    db,
    json,
    certificate: Options.file("certificate", { exists: "yes" }).pipe(
      Options.withDescription("a certificate JSON file, as `writ certificate mint` prints it")
    )
  },
  ({ certificate, db, json }) =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const text = yield* fs.readFileString(certificate).pipe(
        Effect.mapError(() => new CliInputError({ message: `--certificate ${certificate}: cannot be read` }))
      )
      const parsed = yield* parseJsonObject(text, `--certificate ${certificate}`)
      const decoded = yield* Either.mapLeft(decodeCertificate(parsed), (error) => notACertificate(certificate, error))
      const result = yield* withReadStores(
        db,
        Effect.zipRight(
          knownChain(decoded.chain_id, `--certificate ${certificate} names chain ${decoded.chain_id}`),
          TaskCertificate.verify(decoded)
        )
      )
      const report = {
        certificate_id: decoded.certificate_id,
        chain_id: decoded.chain_id,
        valid: result.valid,
        failure_code: result.failure_code,
        detail: result.detail
      }
      yield* Console.log(
        json
          ? JSON.stringify(report, null, 2)
          : result.valid
          ? `valid: ${certificateLine(decoded)}`
          : `NOT valid (${result.failure_code}): ${result.detail}`
      )
      if (!result.valid) yield* setExitCode(1)
    }).pipe(exitOneOnFailure)
).pipe(Command.withDescription(
  "Re-verify a certificate against the database: chain, head, policy, gate summary and grade (exit 1 with the failure code)"
))

/** `writ certificate` and its subcommands. */
export const command = Command.make("certificate").pipe(
  Command.withDescription("Mint and verify task certificates"),
  Command.withSubcommands([mint, verify])
)
