/**
 * What an action's definition compiles to beside its table: the strict decoder of its input, the field names its input
 * declares, and the stage-5 interceptor of the origins it declares.
 */
import { Effect, Either, Option, Schema, SchemaAST } from "effect"
import type { ActionDefinition } from "../../../action/Action.ts"
import * as Time from "../../../base/Time.ts"
import * as Origin from "../../../policy/Origin.ts"
import type { Evaluation, Interceptor, Verdict } from "../../Interceptor.ts"
import type { Env } from "./env.ts"

/** A decoder that refuses unknown fields, including for `Schema.Struct({})`, which Effect reads as "any object". */
export const strictDecoder = (schema: Schema.Schema<any, any>) => {
  const decode = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })
  const ast = SchemaAST.encodedAST(schema.ast)
  const empty = SchemaAST.isTypeLiteral(ast) && ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0
  if (!empty) return decode
  const nothing = Schema.decodeUnknownEither(Schema.Record({ key: Schema.String, value: Schema.Never }))
  return (input: unknown) => Either.flatMap(nothing(input), () => decode(input))
}

/** The string field names an input schema declares (none, when its type has no property signatures to read). */
export const declaredFields = (input: Schema.Schema.Any): ReadonlySet<string> => {
  try {
    return new Set(
      SchemaAST.getPropertySignatures(SchemaAST.typeAST(input.ast)).flatMap((signature) =>
        typeof signature.name === "string" ? [signature.name] : []
      )
    )
  } catch {
    return new Set()
  }
}

const verdictOf = (check: Origin.OriginCheck): Verdict =>
  check._tag === "origin_denied"
    ? { disposition: "deny", code: check.code, detail: check.detail }
    : { disposition: "allow", code: check.code }

/** Stage 5 for an action that declares its origins: the invocation must come from one of them. */
export const originsOf = (env: Env, definition: ActionDefinition): Interceptor => {
  const optionsOf = (evaluation: Evaluation) => ({
    restriction: definition.origins,
    boundAgent: env.boundAgent,
    principal: evaluation.context.authenticated_principal,
    action_type: definition.name
  })
  return {
    id: "action.origins",
    stage: "authorise",
    evaluate: (evaluation) => Effect.map(Origin.authorize(optionsOf(evaluation)), verdictOf),
    decide: (evaluation, moment) =>
      verdictOf(
        Origin.checkOrigin(
          Option.getOrUndefined(moment.invocation),
          Object.assign({}, optionsOf(evaluation), { now: Time.fromMicros(moment.micros()) })
        )
      )
  }
}
