/**
 * A SecretStore over an environment file: one `NAME=value` a line, `#` comments and blank lines ignored, a value
 * wrapped in matching single or double quotes taken without them, no escapes and no interpolation. A name is a
 * secret's name as policy and actions write it (`github.token`, `OPENAI_API_KEY`). The file is read on each resolve,
 * so a rotated secret is used from the next call; an error names the line or the secret, never a value.
 * Runtimes: Node (and Deno's node: compatibility layer).
 */
import { Config, Effect, Layer, Redacted } from "effect"
import type { ConfigError } from "effect/ConfigError"
import * as fs from "node:fs/promises"
import { SecretStore, SecretStoreError } from "../../core/action/SecretStore.ts"

/** Where the file is. */
export interface Options {
  /** The environment file's path. */
  readonly path: string
}

const line = /^([^\s=#*]+)=(.*)$/

// The file's entries, or why it is not an environment file (a line number, never a line's content).
const parse = (text: string): Map<string, string> | string => {
  const entries = new Map<string, string>()
  for (const [i, raw] of text.split(/\r?\n/).entries()) {
    const trimmed = raw.trim()
    if (trimmed === "" || trimmed.startsWith("#")) continue
    const found = line.exec(trimmed)
    if (found === null) return `line ${i + 1} is not NAME=value`
    const [, name, value] = found as unknown as [string, string, string]
    if (entries.has(name)) return `line ${i + 1} names ${name} again`
    const quoted = value.length >= 2 && (value[0] === "\"" || value[0] === "'") && value.at(-1) === value[0]
    entries.set(name, quoted ? value.slice(1, -1) : value)
  }
  return entries
}

/** A store over the environment file at `options.path`. */
export const make = (options: Options): SecretStore.Service => ({
  resolve: Effect.fn("EnvFileSecretStore.resolve")(function*(name: string) {
    const unavailable = (detail: string) => new SecretStoreError({ reason: "unavailable", name, detail })
    const text = yield* Effect.tryPromise({
      try: () => fs.readFile(options.path, "utf-8"),
      catch: (error) =>
        unavailable(`${options.path} could not be read (${(error as { code?: string }).code ?? "error"})`)
    })
    const entries = parse(text)
    if (typeof entries === "string") return yield* unavailable(`${options.path}: ${entries}`)
    const value = entries.get(name)
    if (value === undefined) {
      return yield* new SecretStoreError({ reason: "not_found", name, detail: `${options.path} has no such entry` })
    }
    return Redacted.make(value)
  })
})

/** The environment-file store as a Layer. */
export const layer = (options: Options): Layer.Layer<SecretStore> => Layer.succeed(SecretStore, make(options))

/** The environment-file store, its path from `WRIT_SECRETS_FILE`. */
export const layerConfig: Layer.Layer<SecretStore, ConfigError> = Layer.effect(
  SecretStore,
  Effect.map(Config.string("WRIT_SECRETS_FILE"), (path) => make({ path }))
)
