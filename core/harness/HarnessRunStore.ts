/**
 * A durable Run's record of its harness run: the plan and capability report it was admitted under, with their digests,
 * attached before spawn (so a crash before or during the spawn leaves them on the Run), the governed operation and
 * chain the run's evidence is on, and the observations its provider's stream produced. None of it is evidence: the
 * chain holds only the digests.
 */
import { Context, Schema } from "effect"
import type { Effect, Option } from "effect"
import { Sha256Hex } from "../base/Digest.ts"
import { Uuid } from "../base/IdGenerator.ts"
import { Timestamp } from "../base/Time.ts"
import { CapabilityReport } from "./CapabilityReport.ts"
import { HarnessPlan } from "./HarnessPlan.ts"
import type { ProviderObservation } from "./ProviderObservation.ts"

/** What a Run carries of its harness run: the plan and report it was admitted under, and the operation it is. */
export class HarnessAttachment extends Schema.Class<HarnessAttachment>("HarnessAttachment")({
  run_id: Uuid,
  operation_id: Uuid,
  chain_id: Uuid,
  plan: HarnessPlan,
  plan_digest: Sha256Hex,
  report: CapabilityReport,
  report_digest: Sha256Hex,
  attached_at: Timestamp
}) {}

/** The harness runs attached to durable Runs; a storage failure is a defect, as in the ObservationLog. */
export class HarnessRunStore extends Context.Tag("writ/HarnessRunStore")<HarnessRunStore, HarnessRunStore.Service>() {}

/** The HarnessRunStore service. */
export declare namespace HarnessRunStore {
  /** Attach once per Run, read the attachment back, and read the observations of the Run's harness run. */
  export interface Service {
    /** Attach a harness run to its Run, committed before it returns; a Run takes one attachment, a second is a defect. */
    readonly attach: (attachment: HarnessAttachment) => Effect.Effect<void>
    /** A Run's attachment, if it has one. */
    readonly get: (run_id: string) => Effect.Effect<Option.Option<HarnessAttachment>>
    /** The observations of a Run's harness run, in order (none without an attachment). */
    readonly observations: (run_id: string) => Effect.Effect<ReadonlyArray<ProviderObservation>>
  }
}
