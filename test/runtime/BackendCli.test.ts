/**
 * `writ backend probe NAME`: the report a backend gives here, from bubblewrap's and deno's trial runs, with the
 * digest a governed call admitted on it records; an unknown backend is bad input. With `--verify`, the attack matrix
 * run live: every claim of bubblewrap and deno holds (the network grants attacked by governed calls), a bubblewrap
 * whose read roots include the canary's directory still claims read roots and escapes, one whose attack policy grants
 * 127.0.0.3 too lets the destinations attack reach it, and the in-process backend claims nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { createHmac, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as BubblewrapBackend from "../../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../../adapters/node/DenoBackend.ts"
import * as NodeDigest from "../../adapters/node/NodeDigest.ts"
import { ActionBackendCapabilityReport } from "../../core/action/ActionExecutionBackend.ts"
import * as Digest from "../../core/base/Digest.ts"
import { bin, build, run, writ } from "../fixtures/cli.ts"

beforeAll(async () => {
  const built = await build()
  assert.strictEqual(built.status, 0, built.stdout)
}, 240_000)

describe("writ backend probe", () => {
  it("prints bubblewrap's verified report and its digest, which recomputes from the report", async () => {
    const probed = await writ("backend", "probe", "bubblewrap", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { capability_digest, report } = JSON.parse(probed.stdout)
    const decoded = Schema.decodeUnknownSync(ActionBackendCapabilityReport)(report)
    assert.deepStrictEqual(decoded.containment, {
      filesystem: "enforced",
      network: "enforced",
      subprocess: "unsupported",
      environment: "enforced",
      secrets: "enforced"
    })
    const claimed = (decoded.capabilities ?? []).filter((claim) => claim.level === "enforced").map((claim) =>
      claim.name
    )
    assert.deepStrictEqual(claimed, [...BubblewrapBackend.claimed])
    const digest = await Effect.runPromise(Digest.canonical(report).pipe(Effect.provide(NodeDigest.layer)))
    assert.strictEqual(capability_digest, digest)
    const text = await writ("backend", "probe", "bubblewrap")
    assert.include(text.stdout, "writ.network.none@1            enforced")
    assert.include(text.stdout, `capability digest: ${digest}`)
  }, 60_000)

  it("prints deno's report from its trial run: enforced by the runtime, with the deno version", async () => {
    const probed = await writ("backend", "probe", "deno", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { capability_digest, report } = JSON.parse(probed.stdout)
    const decoded = Schema.decodeUnknownSync(ActionBackendCapabilityReport)(report)
    assert.deepStrictEqual(decoded.containment, {
      filesystem: "enforced",
      network: "enforced",
      subprocess: "enforced",
      environment: "enforced",
      secrets: "enforced"
    })
    const enforced = (decoded.capabilities ?? []).filter((claim) => claim.level === "enforced")
    assert.deepStrictEqual(enforced.map((claim) => claim.name), [...DenoBackend.claimed])
    assert.isTrue(enforced.every((claim) => claim.by === "runtime"))
    assert.strictEqual(decoded.mechanism?.name, "deno")
    assert.match(decoded.mechanism?.version ?? "", /^2\.\d+\.\d+$/)
    const digest = await Effect.runPromise(Digest.canonical(report).pipe(Effect.provide(NodeDigest.layer)))
    assert.strictEqual(capability_digest, digest)
    const text = await writ("backend", "probe", "deno")
    assert.include(text.stdout, "(deno 2.")
    assert.match(text.stdout, /writ\.subprocess\.spawn@1 +enforced +runtime +probe/)
  }, 60_000)

  it("reports the in-process backend as containing nothing", async () => {
    const probed = await writ("backend", "probe", "in-process", "--json")
    assert.strictEqual(probed.status, 0, probed.stderr)
    const { report } = JSON.parse(probed.stdout)
    assert.deepStrictEqual(Object.values(report.containment), Array(5).fill("unsupported"))
  }, 60_000)

  it("an unknown backend is bad input, naming the ones there are", async () => {
    const refused = await writ("backend", "probe", "docker")
    assert.strictEqual(refused.status, 2)
    assert.include(refused.stderr + refused.stdout, "in-process, bubblewrap, deno")
  }, 60_000)
})

describe("writ backend probe --verify", () => {
  // Outside /tmp, which a bubblewrap sandbox replaces with its own.
  const planted = fs.mkdtempSync("/var/tmp/writ-verify-test-")
  // Small limits, so passing them is cheap on a shared machine; a short wall clock, so looping past it is quick.
  const limits = ["--wall-clock", "8", "--memory-mb", "160", "--processes", "24"]
  const matrix = (stdout: string) => {
    const parsed = JSON.parse(stdout)
    return {
      escaped: parsed.escaped as number,
      rows: new Map<string, { verdict: string; detail: string }>(
        parsed.matrix.map((row: { claim: string; verdict: string; detail: string }) => [row.claim, row])
      ),
      enforced: (parsed.report.capabilities ?? []).filter((claim: { level: string }) => claim.level === "enforced")
        .map((claim: { name: string }) => claim.name) as Array<string>
    }
  }

  // The network grants, attacked by governed calls under a policy granting 127.0.0.2 on one port: it was reached.
  const networked = (rows: ReturnType<typeof matrix>["rows"]) => {
    for (const claim of ["writ.network.loopback@1", "writ.network.destinations@1"]) {
      assert.deepStrictEqual(rows.get(claim), {
        ...rows.get(claim)!,
        verdict: "blocked",
        detail: "only the granted listener was reached (1 connection(s))"
      }, claim)
    }
  }

  afterAll(() => fs.rmSync(planted, { recursive: true, force: true }))

  it(
    "bubblewrap: every claimed row is blocked (the network grants reached only the granted listener), exit 0",
    async () => {
      const verified = await writ("backend", "probe", "bubblewrap", "--verify", "--json", ...limits)
      assert.strictEqual(verified.status, 0, verified.stdout + verified.stderr)
      const { enforced, escaped, rows } = matrix(verified.stdout)
      assert.strictEqual(escaped, 0)
      assert.deepStrictEqual(enforced, [...BubblewrapBackend.claimed])
      for (const claim of enforced) assert.strictEqual(rows.get(claim)?.verdict, "blocked", claim)
      networked(rows)
      assert.strictEqual(rows.get("writ.subprocess.spawn@1")?.verdict, "not claimed")
      assert.strictEqual(rows.get("writ.unix_sockets@1")?.detail, "refused: EAFNOSUPPORT")
      assert.match(rows.get("writ.memory@1")?.detail ?? "", /memory_exceeded/)
      assert.match(rows.get("writ.wall_clock@1")?.detail ?? "", /^timed_out/)
    },
    240_000
  )

  it(
    "deno: every claimed row is blocked (the network grants reached only the granted listener), the rest not claimed, exit 0",
    async () => {
      const verified = await writ("backend", "probe", "deno", "--verify", "--json", "--wall-clock", "8")
      assert.strictEqual(verified.status, 0, verified.stdout + verified.stderr)
      const { enforced, escaped, rows } = matrix(verified.stdout)
      assert.strictEqual(escaped, 0)
      assert.deepStrictEqual(enforced, [...DenoBackend.claimed])
      for (const claim of enforced) assert.strictEqual(rows.get(claim)?.verdict, "blocked", claim)
      networked(rows)
      for (const claim of ["writ.unix_sockets@1", "writ.memory@1", "writ.process_count@1"]) {
        assert.strictEqual(rows.get(claim)?.verdict, "not claimed", claim)
      }
      assert.include(rows.get("writ.subprocess.spawn@1")?.detail, "NotCapable")
    },
    240_000
  )

  it(
    "a bubblewrap whose read roots include the canary's directory, and whose attack policy also grants 127.0.0.3, escapes both, exit 1",
    async () => {
      const verified = await writ(
        "backend",
        "probe",
        "bubblewrap",
        "--verify",
        "--json",
        "--read",
        planted,
        "--verify-dir",
        planted,
        "--verify-grant",
        "127.0.0.3:*",
        ...limits
      )
      assert.strictEqual(verified.status, 1, verified.stdout + verified.stderr)
      const { enforced, escaped, rows } = matrix(verified.stdout)
      assert.include(enforced, "writ.filesystem.read_roots@1")
      assert.deepStrictEqual(rows.get("writ.filesystem.read_roots@1"), {
        claim: "writ.filesystem.read_roots@1",
        attack: "read a 0600 canary file outside the read roots",
        verdict: "escaped",
        detail: "the canary's text came back"
      } as any)
      // The store's file lies in the same directory, so the ungranted secret is read from it too; nothing else escapes.
      assert.strictEqual(rows.get("writ.secrets.by_reference@1")?.verdict, "escaped")
      // The wider grant lets the destinations attack through the proxy to 127.0.0.3; the other port stays unreached.
      assert.deepStrictEqual(
        [rows.get("writ.network.destinations@1")?.verdict, rows.get("writ.network.destinations@1")?.detail],
        ["escaped", "127.0.0.3 saw a connection"]
      )
      assert.strictEqual(rows.get("writ.network.loopback@1")?.verdict, "blocked")
      assert.strictEqual(escaped, 3)
      assert.strictEqual(rows.get("writ.filesystem.write_roots@1")?.detail, "refused: EROFS")
      assert.deepStrictEqual(fs.readdirSync(planted), [], "the planted directory was removed")
      const text = await writ(
        "backend",
        "probe",
        "bubblewrap",
        "--verify",
        "--read",
        planted,
        "--verify-dir",
        planted,
        ...limits
      )
      assert.strictEqual(text.status, 1)
      assert.match(
        text.stdout,
        /writ\.filesystem\.read_roots@1 +read a 0600 canary file outside the read roots +escaped/
      )
      assert.include(text.stdout, "2 enforced claim(s) escaped")
    },
    360_000
  )

  it("in-process claims nothing: every row not claimed, no attack run, exit 0", async () => {
    const verified = await writ("backend", "probe", "in-process", "--verify", "--json")
    assert.strictEqual(verified.status, 0, verified.stderr)
    const { escaped, rows } = matrix(verified.stdout)
    assert.strictEqual(escaped, 0)
    assert.strictEqual(rows.size, 12)
    for (const [claim, row] of rows) assert.deepStrictEqual([claim, row.verdict], [claim, "not claimed"])
  }, 60_000)

  it("options a backend cannot honour, and --verify on edge, are bad input", async () => {
    for (
      const args of [
        ["in-process", "--verify", "--read", planted],
        ["deno", "--memory-mb", "64"],
        ["bubblewrap", "--verify-dir", planted],
        ["bubblewrap", "--verify-grant", "127.0.0.3:*"],
        ["edge", "--verify"]
      ]
    ) {
      const refused = await writ("backend", "probe", ...args)
      assert.strictEqual(refused.status, 2, args.join(" ") + refused.stdout + refused.stderr)
    }
  }, 240_000)
})

describe("writ exec --secrets", () => {
  // The store's file, and the database, outside every root the sandbox is given.
  const dir = fs.mkdtempSync("/var/tmp/writ-exec-secrets-")
  const key = randomBytes(16).toString("hex")
  const file = path.join(dir, "secrets.env")
  fs.writeFileSync(file, `demo.api_key=${key}\n`, { mode: 0o600 })
  const signed = createHmac("sha256", key).update("hello").digest("hex")
  const args = ["exec", "api.sign", "--args", "{\"message\":\"hello\"}", "--json"]
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

  it("bubblewrap, governed: the declared secret is injected and used, and is in no output or evidence", async () => {
    const db = path.join(dir, "governed.db")
    const ran = await writ(...args, "--backend", "bubblewrap", "--secrets", file, "--profile", "governed", "--db", db)
    assert.strictEqual(ran.status, 0, ran.stdout + ran.stderr)
    const outcome = JSON.parse(ran.stdout)
    assert.strictEqual(outcome.result, signed, "the handler signed with the key from the store")
    assert.notInclude(ran.stdout + ran.stderr, key)
    assert.isAbove(outcome.records, 2)
    const stored = fs.readdirSync(dir).filter((name) => name.startsWith("governed.db"))
    assert.include(stored, "governed.db")
    for (const name of stored) assert.notInclude(fs.readFileSync(path.join(dir, name), "latin1"), key, name)
    const evidence = await writ("evidence", "log", "--db", db, "--chain", outcome.chain_id, "--json")
    assert.strictEqual(evidence.status, 0, evidence.stderr)
    assert.include(evidence.stdout, "operation_started")
    assert.notInclude(evidence.stdout, key)
  }, 240_000)

  it("deno, from WRIT_SECRETS_FILE: the secret is injected, and absent from the outcome", async () => {
    const ran = await run("node", [bin, ...args, "--backend", "deno"], undefined, { WRIT_SECRETS_FILE: file })
    assert.strictEqual(ran.status, 0, ran.stdout + ran.stderr)
    assert.strictEqual(JSON.parse(ran.stdout).result, signed)
    assert.notInclude(ran.stdout + ran.stderr, key)
  }, 240_000)

  it(
    "with no store the call is denied before it starts; --secrets on a backend that injects none is bad input",
    async () => {
      const denied = await run("node", [bin, ...args, "--backend", "bubblewrap"], undefined, { WRIT_SECRETS_FILE: "" })
      assert.strictEqual(denied.status, 1, denied.stdout + denied.stderr)
      assert.strictEqual(JSON.parse(denied.stdout)._tag, "denied")
      assert.include(denied.stdout, "containment.unsupported")
      const refused = await writ(...args, "--secrets", file)
      assert.strictEqual(refused.status, 2, refused.stdout + refused.stderr)
      assert.include(refused.stdout + refused.stderr, "--secrets is for bubblewrap and deno")
    },
    240_000
  )
})
