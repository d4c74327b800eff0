import { Migrator } from "@effect/sql"
import evidence from "./0001_evidence.ts"

/** Every migration of writ's SQL stores, statically imported, in order. */
export const loader = Migrator.fromRecord({
  "0001_evidence": evidence
})
