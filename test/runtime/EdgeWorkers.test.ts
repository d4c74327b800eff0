/**
 * Two edge handler processes on 127.0.0.1 sharing one SQLite nonce store (SqlNonceStore) and execution log
 * (SqlEdgeExecutionLog): a request replayed to the other process is refused there before any policy and runs
 * nothing; the same request sent to both at once runs once; nonces whose retention has passed are purged from the
 * shared table, and their requests stay refused; an idempotency key run on one process is replayed, never re-run, by
 * the other, which reconciles it too.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect, Layer, Redacted } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as EdgeSignature from "../../adapters/web/EdgeSignature.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as ActionDescriptor from "../../core/action/ActionDescriptor.ts"
import { bundleChild, root } from "../fixtures/child.ts"
import * as Edge from "../fixtures/edgeActions.ts"

const encoder = new TextEncoder()
const skewSeconds = 2
const key: EdgeSignature.Key = { keyId: Edge.key.keyId, secret: Redacted.make(Edge.key.secret) }

let dir: string
let filename: string
const workers: Array<{ readonly child: ChildProcess; readonly url: string }> = []

const start = (script: string) =>
  new Promise<{ child: ChildProcess; url: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [script, filename, String(skewSeconds)], {
      env: { PATH: process.env.PATH ?? "", NODE_PATH: path.join(root, "node_modules") },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      const found = /listening (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (found !== null) resolve({ child, url: found[1]! })
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
    child.once("exit", (code) => reject(new Error(`worker exited ${code}: ${output}`)))
  })

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-edge-workers-"))
  filename = path.join(dir, "edge.db")
  // Migrated once here, so the workers start on a database that has its tables.
  await Effect.runPromise(Effect.scoped(Layer.build(Sqlite.layer({ filename, synchronous: "NORMAL" }))))
  const script = path.join(dir, "worker.cjs")
  await bundleChild({ entry: path.join(root, "test/fixtures/edgeWorker.ts") }, script)
  workers.push(...await Promise.all([start(script), start(script)]))
}, 120_000)

afterAll(() => {
  for (const { child } of workers) child.kill("SIGKILL")
  if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true })
})

const descriptorDigest = Effect.runPromise(
  Effect.map(Effect.provide(ActionDescriptor.describe(Edge.actions[0]!), WebCryptoDigest.layer), (d) => d.digest)
)

/** A request signed once (for `lifetimeSeconds`), as bytes and headers that can be sent to any worker, again. */
const signed = async (idempotencyKey: string, lifetimeSeconds = 30) => {
  const body = encoder.encode(JSON.stringify({
    idempotency_key: idempotencyKey,
    request_id: `req-${idempotencyKey}`,
    action: "calc.add",
    version: "1",
    descriptor_digest: await descriptorDigest,
    arguments: { a: 2, b: 40 }
  }))
  const headers = await Effect.runPromise(
    EdgeSignature.sign(key, { method: "POST", path: "/v1/execute", body }, lifetimeSeconds)
  )
  return { body, headers }
}

const send = async (worker: number, request: Awaited<ReturnType<typeof signed>>) => {
  const response = await fetch(new URL("/v1/execute", workers[worker]!.url), {
    method: "POST",
    headers: { ...request.headers, "content-type": "application/json" },
    body: request.body as BodyInit
  })
  return { status: response.status, body: await response.json() as Record<string, any> }
}

const counters = async (worker: number) =>
  (await fetch(new URL("/test/invocations", workers[worker]!.url))).json() as Promise<Record<string, number>>

const nonceRows = () => {
  const db = new Database(filename)
  try {
    return db.prepare("SELECT nonce FROM nonces").all() as Array<{ nonce: string }>
  } finally {
    db.close()
  }
}

describe("edge handler workers in two processes sharing one SQLite nonce store", () => {
  it.live(
    "a request replayed to the other process is refused there before any policy, and ran once",
    () =>
      Effect.promise(async () => {
        const [before0, before1] = await Promise.all([counters(0), counters(1)])
        const request = await signed("replayed-across")
        const first = await send(0, request)
        assert.strictEqual(first.status, 200, JSON.stringify(first.body))
        assert.strictEqual(first.body.outcome.result, 42)
        const replayed = await send(1, request)
        assert.strictEqual(replayed.status, 401)
        assert.deepInclude(replayed.body, { _tag: "EdgeRequestRefused", reason: "replayed" })
        const [after0, after1] = await Promise.all([counters(0), counters(1)])
        assert.strictEqual(after0["calc.add"], before0["calc.add"]! + 1)
        // The other process ran nothing and its executor (its policy included) concluded no call.
        assert.deepStrictEqual(after1, before1)
        assert.include(nonceRows().map((row) => row.nonce), request.headers["writ-nonce"])
      }),
    60_000
  )

  it.live("the same requests sent to both processes at once each run exactly once", () =>
    Effect.promise(async () => {
      const before = await Promise.all([counters(0), counters(1)])
      const requests = await Promise.all(Array.from({ length: 20 }, (_, i) => signed(`raced-${i}`)))
      const answers = await Promise.all(requests.map((request) => Promise.all([send(0, request), send(1, request)])))
      for (const pair of answers) {
        assert.deepStrictEqual(pair.map((answer) => answer.status).sort(), [200, 401], JSON.stringify(pair))
        assert.strictEqual(pair.find((answer) => answer.status === 401)?.body.reason, "replayed")
      }
      const after = await Promise.all([counters(0), counters(1)])
      const ran = (counts: Array<Record<string, number>>) => counts[0]!["calc.add"]! + counts[1]!["calc.add"]!
      assert.strictEqual(ran(after) - ran(before), 20)
    }), 60_000)

  it.live(
    "nonces past their retention are purged from the shared table; their requests stay refused",
    () =>
      Effect.promise(async () => {
        const old = await signed("purged-old", 1)
        assert.strictEqual((await send(0, old)).status, 200)
        assert.include(nonceRows().map((row) => row.nonce), old.headers["writ-nonce"])
        // Kept until its expiry plus the skew bound plus a second: at most 1 + 2 + 1 s after it was created.
        await new Promise((resolve) => setTimeout(resolve, (1 + skewSeconds + 2) * 1000))
        const fresh = await signed("purged-new")
        assert.strictEqual((await send(1, fresh)).status, 200)
        const kept = nonceRows().map((row) => row.nonce)
        assert.notInclude(kept, old.headers["writ-nonce"], "the other process purged it")
        assert.include(kept, fresh.headers["writ-nonce"])
        // Purged, not reopened: the old request is refused as expired by either process.
        const again = await send(1, old)
        assert.strictEqual(again.status, 401)
        assert.strictEqual(again.body.reason, "expired")
      }),
    60_000
  )

  it.live(
    "a key run on one process is replayed by the other, not re-run, and either reconciles it",
    () =>
      Effect.promise(async () => {
        const before = await Promise.all([counters(0), counters(1)])
        const first = await send(0, await signed("shared-key"))
        assert.deepStrictEqual([first.status, first.body.replayed, first.body.outcome.result], [200, false, 42])
        // The same body, signed anew (a fresh nonce): the other process answers the stored outcome.
        const again = await send(1, await signed("shared-key"))
        assert.deepStrictEqual([again.status, again.body.replayed, again.body.outcome.result], [200, true, 42])
        const after = await Promise.all([counters(0), counters(1)])
        assert.strictEqual(after[0]!["calc.add"]! - before[0]!["calc.add"]!, 1)
        assert.deepStrictEqual(after[1], before[1])
        const path = "/v1/executions/shared-key"
        const headers = await Effect.runPromise(
          EdgeSignature.sign(key, { method: "GET", path, body: new Uint8Array() })
        )
        const record = await (await fetch(new URL(path, workers[1]!.url), { headers })).json()
        assert.deepInclude(record, { idempotency_key: "shared-key", state: "concluded" })
        assert.strictEqual(record.outcome.result, 42)
      }),
    60_000
  )

  it.live("one key begun on both processes at once runs once", () =>
    Effect.promise(async () => {
      const before = await Promise.all([counters(0), counters(1)])
      const keys = Array.from({ length: 10 }, (_, i) => `both-at-once-${i}`)
      const answers = await Promise.all(keys.map(async (k) => {
        const [one, two] = await Promise.all([signed(k), signed(k)])
        return Promise.all([send(0, one), send(1, two)])
      }))
      for (const pair of answers) {
        const ran = pair.filter((answer) => answer.status === 200 && answer.body.replayed === false)
        assert.strictEqual(ran.length, 1, JSON.stringify(pair))
        const other = pair.find((answer) => answer !== ran[0])!
        assert.isTrue(
          (other.status === 200 && other.body.replayed === true) ||
            (other.status === 409 && other.body.reason === "in_progress"),
          JSON.stringify(other)
        )
      }
      const after = await Promise.all([counters(0), counters(1)])
      const total = (counts: Array<Record<string, number>>) => counts[0]!["calc.add"]! + counts[1]!["calc.add"]!
      assert.strictEqual(total(after) - total(before), keys.length)
    }), 60_000)
})
