/**
 * What demo and exec share: the demo's actions under a profile's executor on one SQLite file, and a closed task
 * boundary's chain, verification and certificate as JSON fields and as lines of text.
 */
import { Schema } from "effect"
import type { Layer } from "effect"
import type { ActionDefinition } from "../../../../core/action/Action.ts"
import type { ActionExecutionBackend } from "../../../../core/action/ActionExecutionBackend.ts"
import type { TaskBoundary } from "../../../../core/evidence/TaskBoundary.ts"
import * as TaskCertificate from "../../../../core/evidence/TaskCertificate.ts"
import { ExecutionOutcome } from "../../../../core/execution/ExecutionOutcome.ts"
import type { Certified } from "../../../../core/execution/Ingress.ts"
import * as Demo from "../../../Demo.ts"
import * as Embedded from "../../../Embedded.ts"
import { certificateLine } from "./render.ts"

/** An outcome as its JSON encoding. */
export const encodeOutcome = Schema.encodeSync(ExecutionOutcome)
const encodeCertificate = Schema.encodeSync(TaskCertificate.TaskCertificate)

/** The demo's actions on a backend (in-process by default) under a profile's executor, every store on one SQLite file. */
export const embedded = <E = never>(
  filename: string,
  profile: Embedded.Profile,
  backend?: Layer.Layer<ActionExecutionBackend, E>,
  tools?: ReadonlyArray<ActionDefinition>
) => Embedded.layerExecutor({ filename, profile }, Demo.toolsWith(backend, tools), {}, { boundAgent: Demo.agent })

/** The certificate, or why none was minted, as JSON fields. */
export const certificateJson = (certificate: Certified["certificate"]) =>
  certificate === undefined ? {} : certificate.minted
    ? {
      certificate: encodeCertificate(certificate.certificate),
      certificate_verification: {
        valid: certificate.checked.valid,
        failure_code: certificate.checked.failure_code,
        detail: certificate.checked.detail
      }
    }
    : {
      certificate: null,
      certificate_verification: {
        valid: false,
        failure_code: certificate.error.reason,
        detail: certificate.error.detail
      }
    }

/** Whether the certificate (if one was asked for) was minted and verifies. */
export const certificateHolds = (certificate: Certified["certificate"]) =>
  certificate === undefined || (certificate.minted && certificate.checked.valid)

/** A closed boundary's chain, verification and certificate as lines of text. */
export const evidenceLines = (certified: Certified, boundary: TaskBoundary): Array<string> => {
  const { certificate, closed, verification } = certified
  return [
    `task boundary ${boundary.task_boundary_id}: chain ${boundary.chain_id}, ${closed.sequence + 1} records`,
    `head ${closed.head_hash}`,
    verification.valid
      ? `verification: valid (${verification.checked_records} records against the closing head)`
      : `verification: FAILED (${verification.failure_code} at record ${verification.failed_record_id})`,
    ...(certificate === undefined
      ? []
      : certificate.minted
      ? [
        certificateLine(certificate.certificate),
        certificate.checked.valid
          ? "certificate verification: valid"
          : `certificate verification: FAILED (${certificate.checked.failure_code}): ${certificate.checked.detail}`
      ]
      : [`certificate: not minted (${certificate.error.reason}): ${certificate.error.detail}`])
  ]
}
