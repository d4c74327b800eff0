/**
 * The effect backends a command can select by name, how a sandbox is configured from the command line (`--read`,
 * `--write`, `--wall-clock`, and bubblewrap's `--memory-mb` and `--processes`), and how the edge backend is
 * addressed: its URL and key id as options, its secret only from the environment (`WRIT_EDGE_KEY`), never from argv.
 */
import { HelpDoc, Options, ValidationError } from "@effect/cli"
import { Config, Effect, Option } from "effect"
import * as path from "node:path"
import * as InProcessBackend from "../../../../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../../../../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../../../../adapters/node/DenoBackend.ts"
import * as EdgeBackend from "../../../../adapters/web/EdgeBackend.ts"
import type { ActionExecutionBackend } from "../../../../core/action/ActionExecutionBackend.ts"
import { SecretStore } from "../../../../core/action/SecretStore.ts"
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

/** How a sandbox is set up, as the command line gives it. */
export interface Sandbox {
  readonly read: ReadonlyArray<string>
  readonly write: ReadonlyArray<string>
  readonly wallClockSeconds: Option.Option<number>
  readonly memoryMb: Option.Option<number>
  readonly processes: Option.Option<number>
}

const directories = (name: string, description: string) =>
  Options.directory(name, { exists: "yes" }).pipe(
    Options.repeated,
    Options.map((dirs) => dirs.map((dir) => path.resolve(dir))),
    Options.withDescription(description)
  )

const positive = (name: string, description: string) =>
  Options.integer(name).pipe(
    Options.optional,
    Options.withDescription(description),
    Options.mapEffect((value) =>
      Option.isSome(value) && value.value <= 0
        ? Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${name} ${value.value} is not a positive integer`)))
        : Effect.succeed(value)
    )
  )

/** The sandbox options `writ exec --backend` and `writ backend probe` share. */
export const sandboxOptions = {
  read: directories("read", "bubblewrap, deno: a directory the action may read (repeatable)"),
  write: directories("write", "bubblewrap, deno: a directory the action may write (repeatable)"),
  wallClockSeconds: positive("wall-clock", "bubblewrap, deno: seconds one call may run before it is killed (30)"),
  memoryMb: positive("memory-mb", "bubblewrap: MiB one call's sandbox may use (512)"),
  processes: positive("processes", "bubblewrap: tasks one call's sandbox may have at once (64)")
}

/** No sandbox options: what a command that takes none passes. */
export const noSandbox: Sandbox = {
  read: [],
  write: [],
  wallClockSeconds: Option.none(),
  memoryMb: Option.none(),
  processes: Option.none()
}

// The options a backend cannot honour are bad input, not silently dropped.
const refuseUnused = (name: Name, sandbox: Sandbox) => {
  const given = [
    ...(sandbox.read.length > 0 ? ["--read"] : []),
    ...(sandbox.write.length > 0 ? ["--write"] : []),
    ...(Option.isSome(sandbox.wallClockSeconds) ? ["--wall-clock"] : []),
    ...(Option.isSome(sandbox.memoryMb) ? ["--memory-mb"] : []),
    ...(Option.isSome(sandbox.processes) ? ["--processes"] : [])
  ]
  const honoured = name === "bubblewrap"
    ? given
    : name === "deno"
    ? ["--read", "--write", "--wall-clock"]
    : []
  const refused = given.filter((flag) => !honoured.includes(flag))
  return refused.length === 0
    ? Effect.void
    : Effect.fail(new CliInputError({ message: `the ${name} backend takes no ${refused.join(", ")}` }))
}

const optional = <K extends string, A>(key: K, value: Option.Option<A>) =>
  (Option.isSome(value) ? { [key]: value.value } : {}) as Partial<Record<K, A>>

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

/**
 * The backend `name` names, set up as `sandbox` says (an option it cannot honour is bad input), injecting secrets from
 * `secrets` when given; the edge one at `address`, refused as bad input when it is incomplete.
 */
export const make = (
  name: Name,
  address: EdgeAddress,
  flags: { readonly url: string; readonly keyId: string },
  sandbox: Sandbox = noSandbox,
  secrets?: SecretStore.Service
): Effect.Effect<ActionExecutionBackend.Service, CliInputError> =>
  Effect.gen(function*() {
    yield* refuseUnused(name, sandbox)
    const wallClock = Option.map(sandbox.wallClockSeconds, (seconds) => `${seconds} seconds` as const)
    const withSecrets = <A, E>(effect: Effect.Effect<A, E, never>) =>
      secrets === undefined ? effect : Effect.provideService(effect, SecretStore, secrets)
    switch (name) {
      case "in-process":
        return InProcessBackend.make
      case "bubblewrap":
        return yield* withSecrets(BubblewrapBackend.make({
          read: sandbox.read,
          write: sandbox.write,
          ...optional("wallClock", wallClock),
          ...optional("memoryBytes", Option.map(sandbox.memoryMb, (mb) => mb * 1024 * 1024)),
          ...optional("processes", sandbox.processes)
        }))
      case "deno":
        return yield* withSecrets(DenoBackend.make({
          read: sandbox.read,
          write: sandbox.write,
          ...optional("wallClock", wallClock)
        }))
      case "edge":
        return yield* edge(address, flags)
    }
  })
