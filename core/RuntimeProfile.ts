/**
 * The runtime profile whose guarantees stand behind an outcome.
 */
import { Schema } from "effect"

/** minimal: no Run, no durable evidence; durable: Run and StateStore; governed: evidence; certifiable: closed task. */
export const RuntimeProfile = Schema.Literal("minimal", "durable", "governed", "certifiable")

/** The runtime profile whose guarantees stand behind an outcome. */
export type RuntimeProfile = typeof RuntimeProfile.Type
