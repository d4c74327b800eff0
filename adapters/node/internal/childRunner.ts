/**
 * The child runner: an entry script that serves exactly one request per spawn. It reads its request, with the
 * spawn's one-use token and the secrets injected for it, from the pipe its parent left on fd 3 (never argv or the
 * environment; the secrets reach the handler as `context.secret`, never `process.env`), and refuses to run
 * anything when that is not an inherited pipe holding a well-formed request. Under Deno, which opens no inherited
 * descriptor beyond the standard three, the request comes on stdin (a terminal there is refused) and the frames
 * leave on stdout (console output goes to stderr), through Deno's own API, so no Node compatibility module loads.
 * Then it says it started, imports the declared module, checks the export is the action the parent described (its
 * descriptor digest), decodes the arguments, and runs the handler through an invocation token of its own; every
 * frame it writes carries the parent's token, which the action's code never sees, so a frame the action forges is
 * not taken for a result.
 */
import type { Layer } from "effect"
import { Cause, Effect, Exit, Option, Redacted, Schema } from "effect"
import type { Stats } from "node:fs"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import { ActionError } from "../../../core/action/Action.ts"
import * as ActionDescriptor from "../../../core/action/ActionDescriptor.ts"
import { refusing } from "../../../core/action/internal/outbox.ts"
import { mint } from "../../../core/action/internal/token.ts"
import { meter } from "../../../core/action/internal/usage.ts"
import type { Digest } from "../../../core/base/Digest.ts"
import * as InProcessBackend from "../../memory/InProcessBackend.ts"
import * as WebCryptoDigest from "../../web/WebCryptoDigest.ts"
import * as Wire from "./childWire.ts"

/** What the runner needs of its runtime: the request read whole, frames written, variables set, a refusal. */
interface Host {
  readonly readRequest: () => string
  readonly write: (bytes: Uint8Array) => void
  readonly setVariable: (name: string, value: string) => void
  readonly refuse: (detail: string) => never
  readonly exit: () => never
  readonly digest: Layer.Layer<Digest>
}

interface DenoApi {
  readonly stdin: { isTerminal(): boolean; readSync(buffer: Uint8Array): number | null }
  readonly stdout: { writeSync(bytes: Uint8Array): number }
  readonly stderr: { writeSync(bytes: Uint8Array): number }
  readonly env: { set(name: string, value: string): void }
  exit(code: number): never
}

const readAll = (read: (buffer: Uint8Array) => number, refuse: (detail: string) => never): string => {
  const chunks: Array<Uint8Array> = []
  const buffer = new Uint8Array(65536)
  let total = 0
  for (let count = read(buffer); count > 0; count = read(buffer)) {
    total += count
    if (total > Wire.maxRequestBytes) return refuse("the request is larger than its bound")
    chunks.push(buffer.slice(0, count))
  }
  const whole = new Uint8Array(total)
  let offset = 0
  for (const chunk of chunks) {
    whole.set(chunk, offset)
    offset += chunk.length
  }
  return new TextDecoder().decode(whole)
}

const writeAll = (write: (bytes: Uint8Array) => number, bytes: Uint8Array) => {
  for (let offset = 0; offset < bytes.length;) offset += write(bytes.subarray(offset))
}

const denoHost = (deno: DenoApi): Host => {
  const refuse = (detail: string): never => {
    writeAll((bytes) => deno.stderr.writeSync(bytes), new TextEncoder().encode(`writ child runner: ${detail}\n`))
    return deno.exit(2)
  }
  return {
    readRequest: () => {
      if (deno.stdin.isTerminal()) return refuse("stdin is a terminal, not a pipe from the parent")
      return readAll((buffer) => deno.stdin.readSync(buffer) ?? 0, refuse)
    },
    write: (bytes) => writeAll((chunk) => deno.stdout.writeSync(chunk), bytes),
    setVariable: (name, value) => deno.env.set(name, value),
    refuse,
    exit: () => deno.exit(0),
    digest: WebCryptoDigest.layer
  }
}

const nodeHost = async (): Promise<Host> => {
  const [fs, NodeDigest] = await Promise.all([import("node:fs"), import("../NodeDigest.ts")])
  const refuse = (detail: string): never => {
    process.stderr.write(`writ child runner: ${detail}\n`)
    return process.exit(2)
  }
  return {
    readRequest: () => {
      let stat: Stats
      try {
        stat = fs.fstatSync(Wire.requestFd)
      } catch {
        return refuse(`no request channel on fd ${Wire.requestFd}`)
      }
      if (!stat.isFIFO() && !stat.isSocket()) return refuse(`fd ${Wire.requestFd} is not a pipe from the parent`)
      const text = readAll((buffer) => fs.readSync(Wire.requestFd, buffer), refuse)
      fs.closeSync(Wire.requestFd)
      return text
    },
    write: (bytes) => writeAll((chunk) => fs.writeSync(Wire.resultFd, chunk), bytes),
    setVariable: (name, value) => {
      process.env[name] = value
    },
    refuse,
    exit: () => process.exit(0),
    digest: NodeDigest.layer
  }
}

const denoApi = (globalThis as { Deno?: DenoApi }).Deno
const host = denoApi === undefined ? await nodeHost() : denoHost(denoApi)

// The request, read whole before any of the action's code can run.
const readRequest = (): Wire.ChildRequest => {
  const request = Wire.parseRequest(host.readRequest())
  return request._tag === "Right" ? request.right : host.refuse(`the request is refused: ${request.left}`)
}

const encoder = new TextEncoder()
const write = (frame: Wire.Frame) => host.write(encoder.encode(Wire.encodeFrame(frame)))

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
  const digest = yield* Effect.either(ActionDescriptor.digestOf(definition))
  if (digest._tag === "Left" || digest.right !== request.descriptor_digest) {
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
if (denoApi !== undefined) console.log = console.info = console.debug = console.error
for (const [name, value] of Object.entries(request.environment)) host.setVariable(name, value)
write({ _tag: "started", token: request.token })
write(await Effect.runPromise(Effect.provide(answer(request), host.digest)))
host.exit()
