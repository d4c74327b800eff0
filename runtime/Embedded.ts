/**
 * The embedded default: every store on one SQLite file (evidence, state, policies, approvals, executors),
 * node:crypto digests, random ids, and the one evidence writer a process shares; and the durable,
 * governed and certifiable executors over them.
 */
import { Effect, Layer } from "effect"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import * as SqlExecutorRegistry from "../adapters/node/SqlExecutorRegistry.ts"
import * as Sqlite from "../adapters/node/Sqlite.ts"
import * as SqliteEvidenceStore from "../adapters/node/SqliteEvidenceStore.ts"
import * as SqlApprovalQueue from "../adapters/sql/SqlApprovalQueue.ts"
import * as SqlBudgetLedger from "../adapters/sql/SqlBudgetLedger.ts"
import * as SqlEvidenceStore from "../adapters/sql/SqlEvidenceStore.ts"
import * as SqlPolicySnapshotStore from "../adapters/sql/SqlPolicySnapshotStore.ts"
import * as SqlStateStore from "../adapters/sql/SqlStateStore.ts"
import type { ActionExecutionBackend } from "../core/action/ActionExecutionBackend.ts"
import type { ActionRegistry } from "../core/action/ActionRegistry.ts"
import type { Digest } from "../core/base/Digest.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import * as Governance from "../core/evidence/Governance.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import * as Governed from "../core/execution/Governed.ts"
import * as PolicyGate from "../core/policy/PolicyGate.ts"

/** Digest and ids for a Node process. */
export const layerPlatform = Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)

/** Where the embedded stores live, and when the evidence commit thread starts (`off`: never). */
export interface StoreOptions extends Sqlite.Options {
  readonly commitThread?: "overlap" | "now" | "off"
}

/**
 * Every store on one SQLite file, with the shared EvidenceWriter, the digest and the id generator. Overlapping
 * evidence appends are committed by a worker thread, started the first time appends overlap (`commitThread:
 * "overlap"`, the default), before the stores are used (`"now"`), or never (`"off"`).
 */
export const layerStores = (options: StoreOptions) =>
  Governance.layerWriter.pipe(
    Layer.provideMerge(
      Layer.mergeAll(
        options.commitThread === "off"
          ? SqlEvidenceStore.layer
          : SqliteEvidenceStore.layerCommitThread({ ...options, start: options.commitThread ?? "overlap" }),
        SqlStateStore.layer,
        SqlPolicySnapshotStore.layer,
        SqlApprovalQueue.layer,
        SqlBudgetLedger.layer,
        SqlExecutorRegistry.layer
      )
    ),
    Layer.provideMerge(Sqlite.layer(options)),
    Layer.provideMerge(layerPlatform)
  )

/**
 * The stores of an existing database file, read-only and unmigrated, every committed transaction seen and nothing
 * created beside the file (`Sqlite.layerReadOnly`): what commands that only read (verify, log, certificates) run on.
 * A write through them fails as the store's own error.
 */
export const layerReadStores = (filename: string) =>
  Layer.mergeAll(
    SqlEvidenceStore.layer,
    SqlStateStore.layer,
    SqlPolicySnapshotStore.layer,
    SqlApprovalQueue.layer
  ).pipe(
    Layer.provideMerge(Sqlite.layerReadOnly(filename)),
    Layer.provideMerge(layerPlatform)
  )

/** A durable executor (each attempt committed inside its running Run) whose stages 5-7 enforce the pinned policy, and stage 3 its quota. */
export const layerDurableExecutor = (
  config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance"> = {},
  options: PolicyGate.Options = {}
) =>
  Layer.unwrapEffect(
    Effect.map(PolicyGate.make(options), (gate) =>
      ActionExecutor.layerDurable({
        ...config,
        capacity: [...(config.capacity ?? []), gate.capacity],
        interceptors: [...gate.interceptors, ...(config.interceptors ?? [])]
      }))
  )

/** Which executor to compose over the embedded stores. */
export type Profile = "durable" | "governed" | "certifiable"

/** The executor of a profile over every store on one SQLite file, with the actions and backend `tools` provides. */
export const layerExecutor = <E, R extends Digest | IdGenerator.IdGenerator>(
  options: StoreOptions & { readonly profile: Profile },
  tools: Layer.Layer<ActionRegistry | ActionExecutionBackend, E, R>,
  config: Omit<ActionExecutor.Config, "runs" | "attempts" | "governance"> = {},
  policy: PolicyGate.Options = {}
) => {
  // A profile the stores cannot stand behind, or a configured interceptor without an identity, fails as its typed error.
  const executor: Layer.Layer<
    ActionExecutor.ActionExecutor,
    | Layer.Layer.Error<ReturnType<typeof layerDurableExecutor>>
    | Layer.Layer.Error<ReturnType<typeof Governed.layer>>,
    | Layer.Layer.Context<ReturnType<typeof layerDurableExecutor>>
    | Layer.Layer.Context<ReturnType<typeof Governed.layer>>
  > = options.profile === "durable"
    ? layerDurableExecutor(config, policy)
    : Governed.layer(config, { ...policy, certifiable: options.profile === "certifiable" })
  return executor.pipe(Layer.provideMerge(tools), Layer.provideMerge(layerStores(options)))
}
