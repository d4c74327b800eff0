/**
 * A backend that runs each invocation in a fresh child runner process, launched directly or through a wrapper (a
 * sandbox such as bubblewrap) that the backend supplies. The parent spends the executor's invocation token, mints the
 * spawn's one-use token, encodes the arguments by the action's input Schema and decodes the child's answer by its
 * output Schema; the handler itself is reached only in the child.
 */
import { Effect, Either, Redacted, Schema } from "effect"
import type { Duration, Scope } from "effect"
import { randomBytes } from "node:crypto"
import type { ActionDefinition } from "../../../core/action/Action.ts"
import { ActionError } from "../../../core/action/Action.ts"
import * as ActionDescriptor from "../../../core/action/ActionDescriptor.ts"
import type { ActionBackendCapabilityReport, Invocation } from "../../../core/action/ActionExecutionBackend.ts"
import type { ActionBackendError, ActionExecutionBackend } from "../../../core/action/ActionExecutionBackend.ts"
import { issue } from "../../../core/action/internal/backendFailure.ts"
import * as InvocationToken from "../../../core/action/InvocationToken.ts"
import * as SecretStore from "../../../core/action/SecretStore.ts"
import type { Sha256Hex } from "../../../core/base/Digest.ts"
import { Digest } from "../../../core/base/Digest.ts"
import type { ActionBackendRef } from "../../../core/base/Refs.ts"
import * as StrictJson from "../../../core/base/StrictJson.ts"
import * as NodeDigest from "../NodeDigest.ts"
import type { Launch } from "./childProcess.ts"
import * as ChildProcess from "./childProcess.ts"
import * as Wire from "./childWire.ts"

/** The runner's entry script beside this module, as built (`.js`) or as run from source (`.ts`, under a loader). */
export const runnerEntry = (): URL =>
  new URL(`./childRunner${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url)

/** What a subprocess backend is made of. */
export interface Options {
  readonly ref: ActionBackendRef
  readonly probe: Effect.Effect<ActionBackendCapabilityReport>
  /** How to launch the runner: `node` is the runtime's argv; what it acquires is released once the runner ended. */
  readonly launch: (
    node: ReadonlyArray<string>,
    definition: ActionDefinition,
    invocation: Invocation
  ) => Effect.Effect<Launch, ActionBackendError, Scope.Scope>
  /** The node binary and the flags it runs the runner with (a loader, under tests). */
  readonly node: string
  readonly execArgv: ReadonlyArray<string>
  readonly wallClock: Duration.Duration
  readonly outputBytes: number
  /** The host environment the variables an action declares it reads are taken from. */
  readonly hostEnvironment: Readonly<Record<string, string | undefined>>
  /** The store the secrets an action declares with `exposure: inject` are resolved from (none: such an action is refused). */
  readonly secrets?: SecretStore.SecretStore.Service | undefined
  /** Why the backend cannot contain an action it could otherwise run (checked at admission, after its module). */
  readonly admits?: (definition: ActionDefinition) => string | undefined
}

/** The opaque failure a handler's non-public failure becomes in the parent (its code is `handler.failed`). */
class ChildFailure {
  readonly _tag = "ChildFailure"
}

/** A backend failure before the action's code started. */
export const issued = (reason: ActionBackendError["reason"], detail: string): ActionBackendError =>
  issue({ outcome: "failed", reason, started: false, detail })

/** A backend failure before the action's code started, as an Effect. */
export const failed = (reason: ActionBackendError["reason"], detail: string) => Effect.fail(issued(reason, detail))

/** A subprocess backend over `options`. */
export const make = (options: Options): ActionExecutionBackend.Service => {
  const digests = new WeakMap<ActionDefinition, Sha256Hex>()
  const digestOf = (definition: ActionDefinition) => {
    const known = digests.get(definition)
    if (known !== undefined) return Effect.succeed(known)
    return ActionDescriptor.describe(definition).pipe(
      Effect.provideService(Digest, NodeDigest.make),
      Effect.map((descriptor) => {
        digests.set(definition, descriptor.digest)
        return descriptor.digest
      }),
      Effect.catchAll(() => failed("input_invalid", "the action's descriptor cannot be digested"))
    )
  }

  const request = (invocation: Invocation, module: string, name: string) =>
    Effect.gen(function*() {
      const definition = invocation.definition
      const input = Schema.encodeEither(definition.input)(invocation.input)
      if (Either.isLeft(input) || StrictJson.violation(input.right) !== undefined) {
        return yield* failed("input_invalid", "the arguments do not encode to JSON by the input Schema")
      }
      const environment: Record<string, string> = {}
      for (const need of definition.environment ?? []) {
        const value = options.hostEnvironment[need.variable]
        if (need.exposure === "read" && value !== undefined) environment[need.variable] = value
      }
      const injected = (definition.secrets ?? []).flatMap((need) => need.exposure === "inject" ? [need.namespace] : [])
      const secrets: Record<string, string> = {}
      if (injected.length > 0) {
        if (options.secrets === undefined) return yield* failed("secret_unavailable", "the backend has no secret store")
        const values = yield* Effect.mapError(
          SecretStore.resolveAll(options.secrets, injected),
          (error) => issued("secret_unavailable", error.message)
        )
        for (const [name, value] of values) secrets[name] = Redacted.value(value)
      }
      return Wire.ChildRequest.make({
        protocol: Wire.protocol,
        token: randomBytes(32).toString("hex"),
        module,
        export: name,
        action: definition.name,
        version: definition.version,
        descriptor_digest: yield* digestOf(definition),
        input: input.right,
        request_id: invocation.context.request_id,
        attempt_id: invocation.context.attempt_id,
        environment,
        secrets
      })
    })

  const concluded = (invocation: Invocation, answer: ChildProcess.Answer): Effect.Effect<unknown, unknown> => {
    const started = (reason: ActionBackendError["reason"], detail: string) =>
      Effect.fail(issue({ outcome: "failed", reason, started: true, detail }))
    switch (answer._tag) {
      case "refused":
        return started(answer.reason, answer.detail)
      case "threw": {
        const error = answer.public
          ? new ActionError({ code: answer.code, message: answer.message ?? "" })
          : new ChildFailure()
        return Effect.zipRight(
          Effect.ignore(invocation.usage.report(answer.usage)),
          answer.defect ? Effect.die(error) : Effect.fail(error)
        )
      }
      case "returned": {
        const output = Schema.decodeUnknownEither(invocation.definition.output)(answer.output)
        return Either.isLeft(output)
          ? started("output_invalid", "the child's result does not decode by the output Schema")
          : Effect.as(
            Effect.mapError(
              invocation.usage.report(answer.usage),
              () => issue({ outcome: "ambiguous", reason: "result_invalid", started: true, detail: "usage refused" })
            ),
            output.right
          )
      }
    }
  }

  const invoke = (token: InvocationToken.InvocationToken, invocation: Invocation): Effect.Effect<unknown, unknown> =>
    Effect.suspend(() => {
      // The executor's token is spent here, in the parent; the child mints its own only once it holds this spawn's.
      const redeemed = InvocationToken.redeem(token, invocation.definition)
      if (Either.isLeft(redeemed)) return redeemed
      const { definition } = invocation
      if (definition.module === undefined || definition.export === undefined) {
        return failed("module_unavailable", `${definition.name} declares no module, so no subprocess can import it`)
      }
      const node = [options.node, ...options.execArgv, runnerEntry().pathname]
      return Effect.gen(function*() {
        const wire = yield* request(invocation, definition.module!, definition.export!)
        const { answer } = yield* Effect.scoped(Effect.flatMap(
          options.launch(node, definition, invocation),
          (launch) => ChildProcess.run(launch, wire, { wallClock: options.wallClock, outputBytes: options.outputBytes })
        ))
        return yield* concluded(invocation, answer)
      })
    })

  const admits = (definition: ActionDefinition) =>
    definition.module === undefined || definition.export === undefined
      ? `${definition.name} declares no module and export, so no subprocess can import it`
      : options.secrets === undefined && definition.secrets?.some((need) => need.exposure === "inject") === true
      ? `${definition.name} needs secrets injected, and the backend has no secret store`
      : options.admits?.(definition)
  return { ref: options.ref, probe: options.probe, admits, invoke }
}
