/**
 * The legacy `yolo` flag: never a portable claim. Each provider compiles it to one named profile of its own (its
 * flags and environment), and every control the profile touches is reported degraded whatever verify runs say, since
 * those ran under writ's own profile; the report always carries the profile's warning.
 */
import type { Claim } from "./CapabilityReport.ts"
import type { ControlName } from "./HarnessControl.ts"

/** One provider's yolo profile: its versioned name, what it changes, the controls it degrades, and its warning. */
export interface YoloProfile {
  readonly name: string
  /** What the profile does to the provider's invocation, in the provider's own terms. */
  readonly mechanism: string
  readonly degrades: ReadonlyArray<ControlName>
  readonly warning: string
}

/** The report note every run under a yolo profile carries. */
export const note = (profile: YoloProfile) =>
  `yolo: profile ${profile.name} (${profile.mechanism}): ${profile.warning}; not a portable claim`

/** The claims under a profile: each control it touches degraded, with the profile's name as the reason. */
export const degrade = (claims: ReadonlyArray<Claim>, profile: YoloProfile | undefined): ReadonlyArray<Claim> =>
  profile === undefined ? claims : claims.map((claim) =>
    profile.degrades.includes(claim.control)
      ? { ...claim, level: "degraded", note: `degraded by the yolo profile ${profile.name}` }
      : claim
  )
