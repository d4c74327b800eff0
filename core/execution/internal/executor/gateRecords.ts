/**
 * The gate evidence of a governed call: the records of the verdicts its security stages produced, committed at stage 11
 * (and with its terminal record for verdicts produced after).
 */
import { Effect } from "effect"
import { type Uuid, uuidsWith } from "../../../base/IdGenerator.ts"
import * as Time from "../../../base/Time.ts"
import type * as Evidence from "../../../evidence/Evidence.ts"
import type { OperationContext } from "../../../evidence/Governance.ts"
import * as ledger from "../../../evidence/internal/ledger.ts"
import type { Call } from "./call.ts"
import type { Env } from "./env.ts"

type Produced = NonNullable<Call["produced"]>

// A verdict's gate results: a verdict without gates is its evaluator's one hard gate, except a deferral.
const gatesOf = ({ evaluator, verdict }: Produced[number]) =>
  verdict.disposition === "defer" ? [] : verdict.gates ?? [{
    gate_id: evaluator,
    level: "hard" as const,
    decision: verdict.disposition === "allow" ? "allow" as const : "deny" as const,
    reason_code: verdict.code,
    matched_rules: []
  }]

// Gate results whose ids their verdict's decision already references keep them; the rest are minted.
const unnamed = (produced: Produced) =>
  produced.reduce((n, result) => n + (result.result_ids === undefined ? gatesOf(result).length : 0), 0)

const draftsOf = (
  env: Env,
  call: Call,
  operation: OperationContext,
  produced: Produced,
  result_ids: ReadonlyArray<Uuid>,
  evaluated_at: Time.Timestamp
) => {
  const drafts: Array<Evidence.Draft> = []
  let next = 0
  for (const result of produced) {
    const { arguments_digest, evaluator, stage, verdict } = result
    const identity = env.identities.get(evaluator)
    for (const [i, gate] of gatesOf(result).entries()) {
      const result_id = result.result_ids?.[i] ?? result_ids[next++]!
      drafts.push(
        ledger.gateEvaluated(operation, gate, {
          result_id,
          evaluator,
          identity,
          stage,
          arguments_digest,
          evaluated_at,
          recheck: call.recheck
        })
      )
    }
    const exception = verdict.disposition === "allow" ? verdict.exception : undefined
    if (exception !== undefined) drafts.push(ledger.exceptionGranted(operation, exception, { id: evaluator, identity }))
  }
  return drafts
}

/**
 * The gate records of the verdicts produced since the last checkpoint, which it takes from the call: one
 * `gate_evaluated` per gate result (capacity is never a gate result), under the result id its decision references if
 * it does, then any granted exception.
 */
export const producedDrafts = (env: Env, call: Call, operation: OperationContext) => {
  const produced = call.produced ?? []
  call.produced = undefined
  if (produced.length === 0) return Effect.succeed<Array<Evidence.Draft>>([])
  return Effect.clockWith((clock) =>
    Effect.map(
      uuidsWith(env.ids, unnamed(produced)),
      (result_ids) => draftsOf(env, call, operation, produced, result_ids, Time.ofClock(clock))
    )
  )
}

/** `producedDrafts` in the calling step at the call's clock, where ids are synchronous; undefined where they are not. */
export const producedDraftsNow = (env: Env, call: Call, operation: OperationContext) => {
  const uuid = env.ids.uuidSync
  if (uuid === undefined) return undefined
  const produced = call.produced ?? []
  call.produced = undefined
  if (produced.length === 0) return []
  const result_ids = Array.from({ length: unnamed(produced) }, uuid)
  return draftsOf(env, call, operation, produced, result_ids, Time.fromMicros(call.moment.micros()))
}
