/**
 * What an edge handler did under each caller's idempotency key: what `GET /v1/executions/{key}` answers, and what
 * stops one key from running twice. The in-memory log is shared by every handler built over it (the workers of one
 * process or isolate). Runtimes: every one.
 */
import { Effect } from "effect"
import type { RemoteOutcome } from "./EdgeWire.ts"

/** One key's entry: the digest of the request body it was begun with, its state and, once concluded, its outcome. */
export type Entry =
  | { readonly state: "in_progress" | "unconcluded"; readonly digest: string }
  | { readonly state: "concluded"; readonly digest: string; readonly outcome: RemoteOutcome }

/** The log of an edge handler's executions, per caller (the principal its key authenticates) and key. */
export interface ExecutionLog {
  /** Begin `key` for `caller` (true), or return the entry it already has, leaving it as it is. */
  readonly begin: (caller: string, key: string, digest: string) => Effect.Effect<true | Entry>
  /** Record the outcome the key concluded with. */
  readonly conclude: (caller: string, key: string, outcome: RemoteOutcome) => Effect.Effect<void>
  /** Record that the key's execution began and no outcome can be recorded for it. */
  readonly abandon: (caller: string, key: string) => Effect.Effect<void>
  /** The key's entry, if the caller has one. */
  readonly get: (caller: string, key: string) => Effect.Effect<Entry | undefined>
}

/** A fresh in-memory log. */
export const memory = (): ExecutionLog => {
  const entries = new Map<string, Entry>()
  const id = (caller: string, key: string) => `${caller}\u0000${key}`
  return {
    begin: (caller, key, digest) =>
      Effect.sync(() => {
        const known = entries.get(id(caller, key))
        if (known !== undefined) return known
        entries.set(id(caller, key), { state: "in_progress", digest })
        return true as const
      }),
    conclude: (caller, key, outcome) =>
      Effect.sync(() => {
        const known = entries.get(id(caller, key))
        if (known !== undefined) entries.set(id(caller, key), { state: "concluded", digest: known.digest, outcome })
      }),
    abandon: (caller, key) =>
      Effect.sync(() => {
        const known = entries.get(id(caller, key))
        if (known?.state === "in_progress") entries.set(id(caller, key), { state: "unconcluded", digest: known.digest })
      }),
    get: (caller, key) => Effect.sync(() => entries.get(id(caller, key)))
  }
}
