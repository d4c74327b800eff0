/**
 * The demo's harness step: the real claude CLI (the quickest of the three to start) under a plan writ compiled, driven
 * by the scripted model on 127.0.0.1 to make two shell calls, each delegated to writ's hook and decided by the step's
 * policy: `touch` is allowed and runs, `cp` is denied and does not. Checked by effect (which file exists), with the
 * capability report the run was admitted under (enforced only where `writ harness probe --verify` recorded a pass).
 */
import { Effect, Either, Redacted } from "effect"
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as ClaudeCodeHarness from "../../../../adapters/node/ClaudeCodeHarness.ts"
import * as HarnessStore from "../../../../adapters/node/HarnessStore.ts"
import * as NodeDigest from "../../../../adapters/node/NodeDigest.ts"
import * as NodeHarnessProcess from "../../../../adapters/node/NodeHarnessProcess.ts"
import * as Scripted from "../../../../adapters/node/ScriptedAnthropic.ts"
import type { CapabilityReport } from "../../../../core/harness/CapabilityReport.ts"
import type { CallbackRecord } from "../../../../core/harness/HarnessAdapter.ts"
import * as HarnessAdapter from "../../../../core/harness/HarnessAdapter.ts"
import * as HarnessPolicy from "../../../../core/harness/HarnessPolicy.ts"
import * as HarnessSpec from "../../../../core/harness/HarnessSpec.ts"
import * as PermissionPolicy from "../../../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../../../core/policy/PolicySnapshot.ts"

/** The step's policy: the agent's shell may `touch`, nothing else. */
export const policy: PermissionPolicy.PermissionPolicyEncoded = {
  policy_id: "demo-harness",
  version: "1",
  mode: "rules",
  allow: { "shell.exec": ["touch *"] }
}

/** What the harness step came to, or why it could not run. */
export type HarnessStep =
  | {
    readonly ran: true
    readonly provider: "claude-code"
    /** The step's temporary directory (workspace and config home), removed after. */
    readonly dir: string
    readonly report: CapabilityReport
    readonly decisions: ReadonlyArray<CallbackRecord>
    /** The allowed call's file exists: it ran. */
    readonly allowed_file_exists: boolean
    /** The blocked call's file exists: it ran anyway (it must not). */
    readonly blocked_file_exists: boolean
    readonly exit_code: number | null
  }
  | { readonly ran: false; readonly reason: string }

const KEY = "sk-demo-scripted-model-key"

/** Run the step in a temporary directory, removed after; a missing CLI or a failed spawn is reported, not thrown. */
export const harnessStep: Effect.Effect<HarnessStep> = Effect.gen(function*() {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "writ-demo-harness-")))
  const ws = join(dir, "ws")
  mkdirSync(ws)
  const allowed = join(ws, "allowed.txt")
  const blocked = join(ws, "blocked.txt")
  return yield* Effect.gen(function*() {
    const model = yield* Effect.acquireRelease(
      Effect.promise(() =>
        Scripted.start([
          { name: "Bash", input: { command: `cp /etc/hostname ${blocked}`, description: "copy a system file" } },
          { name: "Bash", input: { command: `touch ${allowed}`, description: "create a file" } }
        ])
      ),
      (model) => Effect.promise(() => model.close())
    )
    const spec = yield* Either.mapLeft(
      HarnessSpec.decode({
        spec_version: 1,
        provider: "claude-code",
        model: { name: "scripted", endpoint: model.baseUrl, api_key: "writ:demo.key" },
        policy: { policy_id: policy.policy_id, version: policy.version },
        workspace: ws,
        tools: { allow: ["Bash"], callback: true },
        budget: { wall_clock_seconds: 60 }
      }),
      (e) => e.message
    )
    const snapshot = yield* Effect.mapError(
      Effect.flatMap(PermissionPolicy.decode(policy), PolicySnapshot.compile).pipe(Effect.provide(NodeDigest.layer)),
      (e) => e.message
    )
    const store = HarnessStore.make()
    const adapter = yield* Effect.provide(ClaudeCodeHarness.make({ store }), NodeHarnessProcess.layer)
    const admitted = yield* HarnessAdapter.prepare(adapter, {
      spec,
      prompt: "make the two scripted shell calls",
      home: join(dir, "home"),
      verifications: yield* store.verifications
    }).pipe(Effect.mapError((e) => e.message))
    const run = yield* adapter.spawn(admitted, {
      secrets: new Map([["writ:demo.key", Redacted.make(KEY)]]),
      decide: HarnessPolicy.decider(snapshot, "demo-harness")
    }).pipe(Effect.mapError((e) => e.detail))
    const exit = run.observations.at(-1)
    return {
      ran: true,
      provider: "claude-code",
      dir,
      report: admitted.report,
      decisions: run.decisions,
      allowed_file_exists: existsSync(allowed),
      blocked_file_exists: existsSync(blocked),
      exit_code: exit?._tag === "exit" ? exit.code : null
    } satisfies HarnessStep
  }).pipe(
    Effect.scoped,
    Effect.catchAll((reason) => Effect.succeed<HarnessStep>({ ran: false, reason: String(reason) })),
    Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
  )
})
