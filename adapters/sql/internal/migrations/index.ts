import { Migrator } from "@effect/sql"
import evidence from "./0001_evidence.ts"
import state from "./0002_state.ts"
import policy from "./0003_policy.ts"
import approvals from "./0004_approvals.ts"
import executors from "./0005_executors.ts"
import projectedChains from "./0006_projected_chains.ts"
import enforcement from "./0007_enforcement.ts"
import attemptRecheck from "./0008_attempt_recheck.ts"
import policyReference from "./0009_policy_reference.ts"
import policyRetirements from "./0010_policy_retirements.ts"
import tenantBindings from "./0011_tenant_bindings.ts"
import harnessObservations from "./0012_harness_observations.ts"
import nonces from "./0013_nonces.ts"
import edgeExecutions from "./0014_edge_executions.ts"
import harnessRuns from "./0015_harness_runs.ts"
import harnessVerifications from "./0016_harness_verifications.ts"

/** Every migration of writ's SQL stores, statically imported, in order. */
export const loader = Migrator.fromRecord({
  "0001_evidence": evidence,
  "0002_state": state,
  "0003_policy": policy,
  "0004_approvals": approvals,
  "0005_executors": executors,
  "0006_projected_chains": projectedChains,
  "0007_enforcement": enforcement,
  "0008_attempt_recheck": attemptRecheck,
  "0009_policy_reference": policyReference,
  "0010_policy_retirements": policyRetirements,
  "0011_tenant_bindings": tenantBindings,
  "0012_harness_observations": harnessObservations,
  "0013_nonces": nonces,
  "0014_edge_executions": edgeExecutions,
  "0015_harness_runs": harnessRuns,
  "0016_harness_verifications": harnessVerifications
})
