/**
 * The child runner's wire: one request in on fd 3, result frames out on fd 4, each a JSON text parsed with writ's
 * strict parser and decoded by Schema. Arguments and results are the action's Schema-encoded values (canonical JSON
 * refuses floats, so it is not the wire). Every frame the child writes carries the one-use token of its spawn.
 */
import { Either, ParseResult, Schema } from "effect"
import * as StrictJson from "../../../core/base/StrictJson.ts"

/** The protocol name, in every request. */
export const protocol = "writ.child/v1"

/** The fd the request arrives on, and the fd result frames leave on. */
export const requestFd = 3
export const resultFd = 4
/** The first descriptor a launch's extra files (a sandbox's seccomp program) are inherited on. */
export const filesFd = 5

/** The largest request and the largest result channel content, in bytes. */
export const maxRequestBytes = 8 * 1024 * 1024
export const maxResultBytes = 8 * 1024 * 1024

/** The limits both sides parse with: the strict parser's depth, and a size to match the byte bounds. */
export const limits: StrictJson.Limits = { maxDepth: 128, maxSize: maxResultBytes }

/** A spawn's one-use token: 32 random bytes, hex. */
export const Token = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/))

/** What the parent asks of one spawn. */
export class ChildRequest extends Schema.Class<ChildRequest>("ChildRequest")({
  protocol: Schema.Literal(protocol),
  token: Token,
  module: Schema.String,
  export: Schema.String,
  action: Schema.String,
  version: Schema.String,
  descriptor_digest: Schema.String,
  input: Schema.Unknown,
  request_id: Schema.String,
  attempt_id: Schema.String,
  /** Variables the action declared it reads, with the host's values: set in the child before its module loads. */
  environment: Schema.Record({ key: Schema.String, value: Schema.String }),
  /** The secrets the action declared it needs injected, by name: handed to its handler, never set in the environment. */
  secrets: Schema.Record({ key: Schema.String, value: Schema.String })
}) {}

/** The usage the handler reported, relayed to the parent's meter. */
export const RelayedUsage = Schema.Struct({ tokens: Schema.Number, cost_microunits: Schema.Number })

/** About to load the action's module: from here on the action's own code may run. */
export const Started = Schema.TaggedStruct("started", { token: Token })

/** The handler returned; `output` is its result as its output Schema encodes it. */
export const Returned = Schema.TaggedStruct("returned", { token: Token, output: Schema.Unknown, usage: RelayedUsage })

/** The handler failed: an ActionError's code and message, or only a code. */
export const Threw = Schema.TaggedStruct("threw", {
  token: Token,
  code: Schema.String,
  message: Schema.optional(Schema.String),
  public: Schema.Boolean,
  defect: Schema.Boolean,
  usage: RelayedUsage
})

/** The runner refused before or around the handler: a bad module, export, descriptor, input or output. */
export const Refused = Schema.TaggedStruct("refused", {
  token: Token,
  reason: Schema.Literal("module_unavailable", "descriptor_mismatch", "input_invalid", "output_invalid"),
  detail: Schema.String
})

/** One frame on the result channel. */
export const Frame = Schema.Union(Started, Returned, Threw, Refused)

/** One frame on the result channel. */
export type Frame = typeof Frame.Type

const decodeFrame = Schema.decodeUnknownEither(Frame, { onExcessProperty: "error" })
const decodeRequest = Schema.decodeUnknownEither(ChildRequest, { onExcessProperty: "error" })

/** A frame as one line of the result channel (JSON has no raw newline). */
export const encodeFrame = (frame: Frame): string => JSON.stringify(Schema.encodeSync(Frame)(frame)) + "\n"

/** A request as the text written to fd 3. */
export const encodeRequest = (request: ChildRequest): string => JSON.stringify(Schema.encodeSync(ChildRequest)(request))

const parsed = <A>(text: string, decode: (value: unknown) => Either.Either<A, ParseResult.ParseError>) =>
  Either.flatMap(
    Either.mapLeft(StrictJson.parse(text, limits), (error) => error.message),
    (value) => Either.mapLeft(decode(value), (error) => ParseResult.TreeFormatter.formatErrorSync(error))
  )

/** A request text as the child reads it: strict JSON, then the Schema; a refusal says why. */
export const parseRequest = (text: string): Either.Either<ChildRequest, string> => parsed(text, decodeRequest)

/** Every line of the result channel as a frame, or why the channel is not a sequence of frames. */
export const parseFrames = (text: string): Either.Either<ReadonlyArray<Frame>, string> => {
  if (text === "") return Either.right([])
  if (!text.endsWith("\n")) return Either.left("the result channel does not end with a complete frame")
  const frames: Array<Frame> = []
  for (const [i, line] of text.slice(0, -1).split("\n").entries()) {
    const frame = parsed(line, decodeFrame)
    if (Either.isLeft(frame)) return Either.left(`frame ${i}: ${frame.left}`)
    frames.push(frame.right)
  }
  return Either.right(frames)
}
