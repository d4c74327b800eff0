/**
 * The runtime profile whose guarantees stand behind an outcome.
 */
import { Schema } from "effect"

/** minimal: no Run, no durable evidence; durable: Run and StateStore; governed: evidence; certifiable: closed task. */
export const RuntimeProfile = Schema.Literal("minimal", "durable", "governed", "certifiable")

/** The runtime profile whose guarantees stand behind an outcome. */
export type RuntimeProfile = typeof RuntimeProfile.Type

/** A profile this composition cannot stand behind, such as durable or certifiable on a store that forgets. */
export class ProfileUnavailableError extends Schema.TaggedError<ProfileUnavailableError>()("ProfileUnavailableError", {
  profile: RuntimeProfile,
  detail: Schema.String
}) {
  override get message() {
    return `the ${this.profile} profile is unavailable: ${this.detail}`
  }
}
