/**
 * The demo's containment step: the hostile tool asked for a canary file outside every root, once in-process (nothing
 * contains it: it reads the canary) and once under bubblewrap (the file is not in its sandbox), each in a task
 * boundary of its own on the demo's database, with the backend's capability report digest and the preflight report
 * digest as the operation's `operation_started` record carries them.
 */
import { Effect, Layer, Option, Schema, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as InProcessBackend from "../../../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../../../adapters/node/BubblewrapBackend.ts"
import { ActionExecutionBackend } from "../../../../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../../../../core/action/ActionRegistry.ts"
import { EvidenceStore } from "../../../../core/evidence/EvidenceStore.ts"
import { openBoundary } from "../../../../core/evidence/EvidenceWriter.ts"
import { ActionExecutor } from "../../../../core/execution/ActionExecutor.ts"
import type { ExecutionOutcome } from "../../../../core/execution/ExecutionOutcome.ts"
import * as Ingress from "../../../../core/execution/Ingress.ts"
import * as InvocationContext from "../../../../core/policy/InvocationContext.ts"
import type * as PermissionPolicy from "../../../../core/policy/PermissionPolicy.ts"
import * as Demo from "../../../Demo.ts"
import * as Embedded from "../../../Embedded.ts"
import { peek } from "../../DemoHostile.ts"

/** The policy of the containment step: the hostile tool is allowed, so only a backend can stop what it does. */
export const policy: PermissionPolicy.PermissionPolicyEncoded = {
  policy_id: "demo-containment",
  version: "1",
  mode: "rules",
  allow: { "files.peek": ["*"] }
}

/** What one backend made of the hostile call. */
export interface Contained {
  readonly backend: string
  readonly outcome: ExecutionOutcome
  /** Whether the canary's text came back: the tool escaped. */
  readonly escaped: boolean
  readonly enforced: ReadonlyArray<string>
  readonly chain_id: string
  readonly capability_digest: string | undefined
  readonly preflight_digest: string | undefined
}

// The two digests an `operation_started` payload carries: the backend's capability report and the preflight report.
const decodeStarted = Schema.decodeUnknownOption(Schema.parseJson(Schema.Struct({
  backend: Schema.Struct({ capability_digest: Schema.String }),
  preflight: Schema.Struct({ digest: Schema.String })
})))

// The hostile call under the backend in context, in a boundary of its own, and the digests its evidence carries.
const attempt = (canary: string, secret: string) =>
  Effect.gen(function*() {
    const backend = yield* ActionExecutionBackend
    const report = yield* backend.probe
    const ref = yield* Demo.install(policy)
    const boundary = yield* openBoundary(ref)
    const { context, request } = yield* Ingress.prepare(
      { request_id: `demo-containment-${backend.ref.id}`, action: peek.name, arguments: { path: canary } },
      { principal: "demo-user", effect_backend: backend.ref, policy_snapshot: ref }
    )
    const executor = yield* ActionExecutor
    const outcome = yield* InvocationContext.withInvocation(
      executor.execute(request, { context, boundary }),
      InvocationContext.user(
        InvocationContext.human("demo-user"),
        Demo.agent,
        "demo-user",
        {}
      )
    )
    yield* Ingress.closeAndCertify(boundary, false)
    const records = yield* Stream.runCollect((yield* EvidenceStore).read(boundary.chain_id))
    const started = [...records].find((record) => record.record_type === "operation_started")
    const operation = Option.getOrUndefined(
      started === undefined ? Option.none() : decodeStarted(started.payload_json)
    )
    return {
      backend: backend.ref.id,
      outcome,
      escaped: outcome._tag === "succeeded" && outcome.result === secret,
      enforced: (report.capabilities ?? []).filter((c) => c.level === "enforced").map((c) => c.name),
      chain_id: boundary.chain_id,
      capability_digest: operation?.backend.capability_digest,
      preflight_digest: operation?.preflight.digest
    } satisfies Contained
  })

/** Run the hostile tool in-process and under bubblewrap, against a fresh 0600 canary beside the database. */
export const containmentStep = (filename: string) =>
  Effect.gen(function*() {
    const dir = fs.mkdtempSync(path.join(path.dirname(path.resolve(filename)), "writ-demo-canary-"))
    const canary = path.join(dir, "canary.txt")
    const secret = `canary ${crypto.randomUUID()}`
    fs.writeFileSync(canary, secret, { mode: 0o600 })
    const under = <E>(backend: Layer.Layer<ActionExecutionBackend, E>) =>
      Effect.provide(
        attempt(canary, secret),
        Embedded.layerExecutor(
          { filename, profile: "certifiable" },
          Layer.merge(ActionRegistry.layerWith([peek]), backend),
          {},
          { boundAgent: Demo.agent }
        )
      )
    return yield* Effect.all([under(InProcessBackend.layer), under(BubblewrapBackend.layer())]).pipe(
      Effect.ensuring(Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
    )
  })
