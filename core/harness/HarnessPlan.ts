/**
 * The compiled, immutable plan of one native agent run: the executable and its digest, the whole argv, every config
 * file's content and the whole environment, secrets only as references. Canonical and hashed, so the report and the
 * evidence can name exactly what was spawned.
 */
import type { Effect } from "effect"
import { Schema } from "effect"
import type { CanonicalJsonError } from "../base/Canonical.ts"
import * as Digest from "../base/Digest.ts"
import { ExecutableIdentity } from "./CapabilityReport.ts"
import { ControlName, Provider } from "./HarnessControl.ts"
import { AbsolutePath, EnvName, SecretRef } from "./HarnessSpec.ts"

/** A config file the plan writes before spawn, whole. */
export class ConfigFile
  extends Schema.Class<ConfigFile>("ConfigFile")({ path: AbsolutePath, content: Schema.String })
{}

/** A variable the plan sets to a literal value. */
export class SetVar extends Schema.TaggedClass<SetVar>()("set", { name: EnvName, value: Schema.String }) {}

/** A variable passed through from the harness's own environment (its value is not recorded). */
export class InheritVar extends Schema.TaggedClass<InheritVar>()("inherit", { name: EnvName }) {}

/** A variable whose value is a secret, resolved at spawn: the plan holds only the reference. */
export class SecretVar extends Schema.TaggedClass<SecretVar>()("secret", { name: EnvName, ref: SecretRef }) {}

/** A file written at spawn whose content is a secret: the plan holds only its path and reference. */
export class SecretFile extends Schema.Class<SecretFile>("SecretFile")({ path: AbsolutePath, ref: SecretRef }) {}

/** One variable of the CLI's whole environment. */
export const EnvEntry = Schema.Union(SetVar, InheritVar, SecretVar)

/** One variable of the CLI's whole environment. */
export type EnvEntry = typeof EnvEntry.Type

/** A control the plan expects evidence for, and the scenario that verifies it. */
export class ExpectedEvidence extends Schema.Class<ExpectedEvidence>("ExpectedEvidence")({
  control: ControlName,
  scenario: Schema.String
}) {}

/** The compiled plan of one native agent run. */
export class HarnessPlan extends Schema.Class<HarnessPlan>("HarnessPlan")({
  plan_version: Schema.Literal(1),
  provider: Provider,
  provider_version: Schema.String,
  executable: ExecutableIdentity,
  argv: Schema.Array(Schema.String),
  config_files: Schema.Array(ConfigFile),
  secret_files: Schema.Array(SecretFile),
  environment: Schema.Array(EnvEntry),
  workspace: AbsolutePath,
  /** The fresh config home the CLI starts in (created at spawn, removed after). */
  home: AbsolutePath,
  /** writ's own deadline: SIGTERM to the process group at this many seconds, SIGKILL after a grace. */
  wall_clock_seconds: Schema.Int,
  declared_controls: Schema.Array(ControlName),
  expected_evidence: Schema.Array(ExpectedEvidence)
}) {}

const encodePlan = Schema.encodeSync(HarnessPlan)

/** The plan's wire form: what its digest covers. */
export const encode = (plan: HarnessPlan): typeof HarnessPlan.Encoded => encodePlan(plan)

/** The plan's `sha256-v1` digest. */
export const digest = (plan: HarnessPlan): Effect.Effect<Digest.Sha256Hex, CanonicalJsonError, Digest.Digest> =>
  Digest.canonical(encode(plan))

/** The secret references a plan's environment needs resolved at spawn. */
export const secretRefs = (plan: HarnessPlan): ReadonlyArray<string> => [
  ...plan.environment.flatMap((entry) => (entry._tag === "secret" ? [entry.ref] : [])),
  ...plan.secret_files.map((file) => file.ref)
]
