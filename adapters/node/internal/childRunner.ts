/**
 * The child runner: an entry script that serves exactly one request per spawn. It reads its request, with the
 * spawn's one-use token and the secrets injected for it, from the pipe its parent left on fd 3 (never argv or the
 * environment; the secrets reach the handler as `context.secret`, never `process.env`), and refuses to run
 * anything when that is not an inherited pipe holding a well-formed request. Under Deno, which opens no inherited
 * descriptor beyond the standard three, the request comes on stdin and the frames leave on stdout (console output
 * goes to stderr). Then it says it started, imports the
 * declared module, checks the export is the action the parent described (its descriptor digest), decodes the
 * arguments, and runs the handler through an invocation token of its own; every frame it writes on fd 4 carries the
 * parent's token, which the action's code never sees, so a frame the action forges is not taken for a result.
 */
import { Cause, Effect, Exit, Option, Redacted, Schema } from "effect"
import * as fs from "node:fs"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import { ActionError } from "../../../core/action/Action.ts"
import * as ActionDescriptor from "../../../core/action/ActionDescriptor.ts"
import { refusing } from "../../../core/action/internal/outbox.ts"
import { mint } from "../../../core/action/internal/token.ts"
import { meter } from "../../../core/action/internal/usage.ts"
import * as InProcessBackend from "../../memory/InProcessBackend.ts"
import * as NodeDigest from "../NodeDigest.ts"
import * as Wire from "./childWire.ts"

// Deno reaches no inherited descriptor past stderr: there the request is stdin and the result channel stdout.
const deno = "Deno" in globalThis
const requestFd = deno ? 0 : Wire.requestFd
const resultFd = deno ? 1 : Wire.resultFd

const refuse = (detail: string): never => {
  process.stderr.write(`writ child runner: ${detail}\n`)
  process.exit(2)
}

// The request, read whole before any of the action's code can run; a file or a terminal there is refused.
const readRequest = (): Wire.ChildRequest => {
  let stat: fs.Stats
  try {
    stat = fs.fstatSync(requestFd)
  } catch {
    return refuse(`no request channel on fd ${requestFd}`)
  }
  if (!stat.isFIFO() && !stat.isSocket()) return refuse(`fd ${requestFd} is not a pipe from the parent`)
  const chunks: Array<Buffer> = []
  const buffer = Buffer.alloc(65536)
  let total = 0
  for (;;) {
    const read = fs.readSync(requestFd, buffer)
    if (read === 0) break
    total += read
    if (total > Wire.maxRequestBytes) return refuse("the request is larger than its bound")
    chunks.push(Buffer.from(buffer.subarray(0, read)))
  }
  fs.closeSync(requestFd)
  const request = Wire.parseRequest(Buffer.concat(chunks).toString("utf-8"))
  return request._tag === "Right" ? request.right : refuse(`the request is refused: ${request.left}`)
}

const write = (frame: Wire.Frame) => {
  const bytes = Buffer.from(Wire.encodeFrame(frame))
  for (let offset = 0; offset < bytes.length;) offset += fs.writeSync(resultFd, bytes, offset)
}

const isDefinition = (value: unknown): value is ActionDefinition =>
  typeof value === "object" && value !== null && "name" in value && "input" in value && "output" in value

type Answer = Exclude<Wire.Frame, { readonly _tag: "started" }>

const answer = Effect.fnUntraced(function*(request: Wire.ChildRequest) {
  const token = request.token
  const refused = (reason: typeof Wire.Refused.Type["reason"], detail: string): Answer => ({
    _tag: "refused",
    token,
    reason,
    detail
  })
  const namespace = yield* Effect.either(Effect.tryPromise(() => import(request.module)))
  if (namespace._tag === "Left") return refused("module_unavailable", `${request.module} could not be imported`)
  const definition: unknown = (namespace.right as Record<string, unknown>)[request.export]
  if (!isDefinition(definition) || definition.name !== request.action || definition.version !== request.version) {
    return refused("module_unavailable", `${request.export} of ${request.module} is not ${request.action}`)
  }
  const descriptor = yield* Effect.either(ActionDescriptor.describe(definition))
  if (descriptor._tag === "Left" || descriptor.right.digest !== request.descriptor_digest) {
    return refused("descriptor_mismatch", `${request.action} is not the action the parent described`)
  }
  const input = Schema.decodeUnknownEither(definition.input)(request.input)
  if (input._tag === "Left") return refused("input_invalid", "the arguments do not decode by the input Schema")
  const usage = meter()
  const exit = yield* Effect.exit(InProcessBackend.make.invoke(mint(definition), {
    definition,
    input: input.right,
    context: { request_id: request.request_id, attempt_id: request.attempt_id },
    usage: usage.service,
    outbox: refusing,
    secrets: new Map(Object.entries(request.secrets).map(([name, value]) => [name, Redacted.make(value)]))
  }))
  const { cost_microunits, tokens } = usage.close(0)
  if (Exit.isSuccess(exit)) {
    const output = Schema.encodeEither(definition.output)(exit.value)
    return output._tag === "Right"
      ? { _tag: "returned", token, output: output.right, usage: { tokens, cost_microunits } } satisfies Answer
      : refused("output_invalid", "the result does not encode by the output Schema")
  }
  const failure = Cause.failureOption(exit.cause)
  const error = Option.getOrUndefined(failure)
  return {
    _tag: "threw",
    token,
    ...(error instanceof ActionError
      ? { code: error.code, message: error.message }
      : { code: Option.isNone(failure) ? "handler.defect" : "handler.failed" }),
    public: error instanceof ActionError,
    defect: Option.isNone(failure),
    usage: { tokens, cost_microunits }
  } satisfies Answer
})

const request = readRequest()
if (deno) console.log = console.info = console.debug = console.error
for (const [name, value] of Object.entries(request.environment)) process.env[name] = value
write({ _tag: "started", token: request.token })
const frame = await Effect.runPromise(Effect.provide(answer(request), NodeDigest.layer))
write(frame)
process.exit(0)
