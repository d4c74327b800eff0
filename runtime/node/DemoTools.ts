/**
 * The demo's tools for subprocess backends, in a module of their own so a child runner imports them (each declares this
 * module and its export): `api.sign` signs a message with a secret the backend injects by reference, so `writ exec
 * api.sign --backend bubblewrap --secrets FILE` shows a secret used in a sandbox and absent from every output.
 */
import { Effect, Redacted, Schema } from "effect"
import { createHmac } from "node:crypto"
import * as Action from "../../core/action/Action.ts"

/** The secret `api.sign` is injected: its name in the store, and in a policy's `secret_exposure` rule. */
export const signingKey = "demo.api_key"

/** HMAC-SHA256 of a message under the injected `demo.api_key`, hex: the key is used, never returned. */
export const sign = Action.make({
  module: import.meta.url,
  export: "sign",
  name: "api.sign",
  description: "Sign a message with the API key (HMAC-SHA256, hex); the key is a secret injected by reference",
  input: Schema.Struct({ message: Schema.String }),
  output: Schema.String,
  secrets: [{ namespace: signingKey, exposure: "inject" }],
  handler: ({ message }, context) => {
    const key = context.secret(signingKey)
    return key === undefined
      ? Effect.fail(new Action.ActionError({ code: "api.key_missing", message: `${signingKey} was not injected` }))
      : Effect.succeed(createHmac("sha256", Redacted.value(key)).update(message).digest("hex"))
  }
})

/** Every tool of this module. */
export const actions = [sign] as const
