/**
 * The effect backends a command can select by name, and how the edge backend is addressed from the command line: its
 * URL and key id as options, its secret only from the environment (`WRIT_EDGE_KEY`), never from argv.
 */
import { Config, Effect, Layer, Option } from "effect"
import * as InProcessBackend from "../../../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../../../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../../../../adapters/node/DenoBackend.ts"
import * as EdgeBackend from "../../../../adapters/web/EdgeBackend.ts"
import { ActionExecutionBackend } from "../../../../core/action/ActionExecutionBackend.ts"
import { CliInputError } from "./input.ts"

/** The backends by name. */
export const names = ["in-process", "bubblewrap", "deno", "edge"] as const

/** A backend's name. */
export type Name = typeof names[number]

/** The environment variable the edge backend's HMAC secret is read from. */
export const edgeKeyVariable = "WRIT_EDGE_KEY"

/** Where the edge handler is, as the command line names it. */
export interface EdgeAddress {
  readonly url: Option.Option<string>
  readonly keyId: Option.Option<string>
}

const edge = (address: EdgeAddress, flags: { readonly url: string; readonly keyId: string }) =>
  Effect.gen(function*() {
    if (Option.isNone(address.url) || Option.isNone(address.keyId)) {
      return yield* new CliInputError({
        message: `the edge backend needs ${flags.url} URL and ${flags.keyId} ID, and its secret in ${edgeKeyVariable}`
      })
    }
    const url = address.url.value
    if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
      return yield* new CliInputError({ message: `${flags.url} ${JSON.stringify(url)} is not an http(s) URL` })
    }
    const key = yield* Config.redacted(edgeKeyVariable).pipe(
      Effect.mapError(() =>
        new CliInputError({ message: `the edge backend's secret is not set: set ${edgeKeyVariable}` })
      )
    )
    return yield* EdgeBackend.make({ url, keyId: address.keyId.value, key }).pipe(
      Effect.mapError((error) => new CliInputError({ message: `the edge backend is refused: ${error.detail}` }))
    )
  })

/** The backend `name` names; the edge one at `address`, refused as bad input when it is incomplete. */
export const make = (
  name: Name,
  address: EdgeAddress,
  flags: { readonly url: string; readonly keyId: string }
): Effect.Effect<ActionExecutionBackend.Service, CliInputError> => {
  switch (name) {
    case "in-process":
      return Effect.succeed(InProcessBackend.make)
    case "bubblewrap":
      return BubblewrapBackend.make()
    case "deno":
      return DenoBackend.make()
    case "edge":
      return edge(address, flags)
  }
}

/** The backend `name` names, as a Layer. */
export const layer = (
  name: Name,
  address: EdgeAddress,
  flags: { readonly url: string; readonly keyId: string }
): Layer.Layer<ActionExecutionBackend, CliInputError> =>
  Layer.effect(ActionExecutionBackend, make(name, address, flags))
