import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Either, Exit, Layer } from "effect"
import { spawn } from "node:child_process"
import * as path from "node:path"
import * as MemoryApprovalQueue from "../../adapters/memory/MemoryApprovalQueue.ts"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlApprovalQueue from "../../adapters/sql/SqlApprovalQueue.ts"
import { ApprovalQueue, ApprovalRecord, ApprovalRequest } from "../../core/approval/Approval.ts"
import { Sha256Hex } from "../../core/base/Digest.ts"
import { Uuid } from "../../core/base/IdGenerator.ts"
import * as Time from "../../core/base/Time.ts"
import { bundleChild, root } from "../fixtures/child.ts"
import { sqliteLayer, tempDir } from "../fixtures/sqlite.ts"

const sqlOn = (database: Layer.Layer<SqlClient.SqlClient>) => SqlApprovalQueue.layer.pipe(Layer.provideMerge(database))

const layers = [
  ["memory", MemoryApprovalQueue.layer],
  ["sql", sqlOn(sqliteLayer())]
] as const

const requested = 1_800_000_000_000_000
const hour = 3_600_000_000
const digestOf = (call: string) => Sha256Hex.make(call.padEnd(64, "0"))
const ls = digestOf("a1")
const make = digestOf("b2")

const request = (n: number, approver_class = "maintainer", binding_digest = ls) =>
  ApprovalRequest.make({
    approval_id: Uuid.make(`00000000-0000-4000-8000-${String(n).padStart(12, "0")}`),
    binding_digest,
    action: "shell.exec",
    principal: "alice",
    approver_class,
    policy: { policy_id: "repo-agent", version: "1", digest: digestOf("c3") },
    requested_at: Time.fromMicros(requested),
    expires_at: Time.fromMicros(requested + hour)
  })

const now = Time.fromMicros(requested + 1)
const maya = { id: "maya", approver_class: "maintainer" }
const eve = { id: "eve", approver_class: "intern" }

for (const [name, layer] of layers) {
  describe(`ApprovalQueue conformance: ${name}`, () => {
    const provided = <A, E>(effect: Effect.Effect<A, E, ApprovalQueue>) => Effect.provide(effect, Layer.fresh(layer))
    const ids = (records: ReadonlyArray<ApprovalRecord>) => records.map((record) => record.request.approval_id)

    it.effect("submit files pending requests; list keeps filing order and filters by class and state", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const [a, b, c] = [request(3), request(1, "security"), request(2)]
        for (const r of [a, b, c]) yield* queue.submit(r)
        const all = yield* queue.list()
        assert.deepStrictEqual(all, [a, b, c].map((r) => ApprovalRecord.make({ request: r, state: "pending" })))
        assert.deepStrictEqual(ids(yield* queue.list({ approver_class: "maintainer" })), [a.approval_id, c.approval_id])
        yield* queue.approve(c.approval_id, maya)
        assert.deepStrictEqual(ids(yield* queue.list({ state: "pending" })), [a.approval_id, b.approval_id])
        assert.deepStrictEqual(ids(yield* queue.list({ approver_class: "maintainer", state: "approved" })), [
          c.approval_id
        ])
        assert.deepStrictEqual(yield* queue.list({ approver_class: "security", state: "approved" }), [])
      })))

    it.effect("approve records who decided, once; the approval is then usable", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        const approved = yield* queue.approve(request(1).approval_id, maya)
        assert.deepStrictEqual(
          approved,
          ApprovalRecord.make({ request: request(1), state: "approved", decided_by: "maya" })
        )
        assert.deepStrictEqual(yield* queue.list({ state: "approved" }), [approved])
        const again = yield* Effect.flip(queue.approve(request(1).approval_id, { ...maya, id: "sam" }))
        assert.strictEqual(again.reason, "decided")
        assert.strictEqual((yield* Effect.flip(queue.reject(request(1).approval_id, maya))).reason, "decided")
        assert.deepStrictEqual(yield* queue.consume(request(1).approval_id, ls, now), request(1))
      })))

    it.effect("reject records who decided; a rejected approval is neither approvable nor usable", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        const rejected = yield* queue.reject(request(1).approval_id, maya)
        assert.deepStrictEqual([rejected.state, rejected.decided_by], ["rejected", "maya"])
        assert.strictEqual((yield* Effect.flip(queue.approve(request(1).approval_id, maya))).reason, "decided")
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, now))).reason, "rejected")
        assert.deepStrictEqual(ids(yield* queue.list({ state: "rejected" })), [request(1).approval_id])
      })))

    it.effect("an approver of another class can neither approve nor reject, and changes nothing", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        assert.strictEqual((yield* Effect.flip(queue.approve(request(1).approval_id, eve))).reason, "wrong_approver")
        assert.strictEqual((yield* Effect.flip(queue.reject(request(1).approval_id, eve))).reason, "wrong_approver")
        assert.deepStrictEqual(yield* queue.list(), [ApprovalRecord.make({ request: request(1), state: "pending" })])
        assert.strictEqual((yield* queue.approve(request(1).approval_id, maya)).state, "approved")
      })))

    it.effect("an approver whose id or class is not an Identifier is invalid_approver, and the approval stays pending", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        const malformed = [
          { id: "  ", approver_class: "maintainer" },
          { id: "", approver_class: "maintainer" },
          { id: " maya", approver_class: "maintainer" },
          { id: "maya", approver_class: "" }
        ]
        for (const approver of malformed) {
          for (const decide of [queue.approve, queue.reject]) {
            const exit = yield* Effect.exit(decide(request(1).approval_id, approver))
            assert.isTrue(Exit.isFailure(exit) && !Cause.isDie(exit.cause), "a typed refusal, not a defect")
            const refused = yield* Effect.flip(decide(request(1).approval_id, approver))
            assert.deepStrictEqual([refused._tag, refused.reason], ["ApprovalError", "invalid_approver"])
          }
        }
        assert.deepStrictEqual(yield* queue.list(), [ApprovalRecord.make({ request: request(1), state: "pending" })])
        assert.strictEqual((yield* queue.approve(request(1).approval_id, maya)).state, "approved")
      })))

    it.effect("an approval is used once: a second use is reused, and filing it again does not revive it", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        yield* queue.approve(request(1).approval_id, maya)
        yield* queue.consume(request(1).approval_id, ls, now)
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, now))).reason, "reused")
        yield* queue.submit(request(1))
        yield* queue.submit(request(1, "intern"))
        assert.deepStrictEqual(
          yield* queue.list(),
          [ApprovalRecord.make({ request: request(1), state: "consumed", decided_by: "maya" })]
        )
        assert.strictEqual((yield* Effect.flip(queue.approve(request(1).approval_id, eve))).reason, "decided")
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, now))).reason, "reused")
      })))

    it.effect("the attempt that used an approval may present it again; another attempt finds it reused", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const id = request(1).approval_id
        yield* queue.submit(request(1))
        yield* queue.approve(id, maya)
        assert.deepStrictEqual(yield* queue.consume(id, ls, now, "r-2", "attempt-1"), request(1))
        // Its recheck (stage 10) is answered as before, even past the expiry; other arguments are a mismatch.
        const later = Time.fromMicros(requested + 2 * hour)
        assert.deepStrictEqual(yield* queue.consume(id, ls, later, "r-2", "attempt-1"), request(1))
        assert.strictEqual((yield* Effect.flip(queue.consume(id, make, now, "r-2", "attempt-1"))).reason, "mismatched")
        for (const attempt of ["attempt-2", undefined]) {
          assert.strictEqual((yield* Effect.flip(queue.consume(id, ls, now, "r-3", attempt))).reason, "reused")
        }
        assert.strictEqual((yield* queue.list({ state: "consumed" })).length, 1)
      })))

    it.effect("an approval is usable until just before it expires, and expired from its expiry on", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        for (const n of [1, 2]) {
          yield* queue.submit(request(n))
          yield* queue.approve(request(n).approval_id, maya)
        }
        const expiry = Time.fromMicros(requested + hour)
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, expiry))).reason, "expired")
        const late = Time.fromMicros(requested + 2 * hour)
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, late))).reason, "expired")
        yield* queue.consume(request(2).approval_id, ls, Time.fromMicros(requested + hour - 1))
        assert.deepStrictEqual(ids(yield* queue.list({ state: "approved" })), [request(1).approval_id])
      })))

    it.effect("an approval presented for another call is mismatched and stays usable for its own", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        yield* queue.approve(request(1).approval_id, maya)
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, make, now))).reason, "mismatched")
        assert.deepStrictEqual(yield* queue.consume(request(1).approval_id, ls, now), request(1))
      })))

    it.effect("the request that escalated cannot use its own approval; it stays usable by a new request", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const filed = ApprovalRequest.make({ ...request(1), request_id: "req-escalated" })
        yield* queue.submit(filed)
        yield* queue.approve(filed.approval_id, maya)
        const refused = yield* Effect.flip(queue.consume(filed.approval_id, ls, now, "req-escalated"))
        assert.strictEqual(refused.reason, "same_request")
        assert.deepStrictEqual(yield* queue.consume(filed.approval_id, ls, now, "req-new"), filed)
      })))

    it.effect("a pending approval is not usable yet", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, now))).reason, "pending")
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, make, now))).reason, "pending")
        assert.deepStrictEqual(ids(yield* queue.list({ state: "pending" })), [request(1).approval_id])
      })))

    it.effect("an unknown approval id is forged for every operation", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        const unknown = request(2).approval_id
        const errors = yield* Effect.all([
          Effect.flip(queue.approve(unknown, maya)),
          Effect.flip(queue.reject(unknown, maya)),
          Effect.flip(queue.consume(unknown, ls, now))
        ])
        assert.deepStrictEqual(errors.map((error) => [error.reason, error.approval_id]), [
          ["forged", unknown],
          ["forged", unknown],
          ["forged", unknown]
        ])
      })))

    it.effect("an operation reads the queue when it runs, not when it is built", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const approval = queue.approve(request(1).approval_id, maya)
        const first = queue.consume(request(1).approval_id, ls, now)
        const second = queue.consume(request(1).approval_id, ls, now)
        yield* queue.submit(request(1))
        yield* approval
        yield* first
        assert.strictEqual((yield* Effect.flip(second)).reason, "reused")
      })))

    it.effect("concurrent consumers of one approval: exactly one wins, every other is reused", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        yield* queue.submit(request(1))
        yield* queue.approve(request(1).approval_id, maya)
        const results = yield* Effect.all(
          Array.from({ length: 16 }, () => Effect.either(queue.consume(request(1).approval_id, ls, now))),
          { concurrency: "unbounded" }
        )
        const outcomes = results.map((result) => Either.isRight(result) ? "won" : result.left.reason)
        assert.deepStrictEqual(outcomes.toSorted(), [...Array(15).fill("reused"), "won"])
      })))

    // The scheduler may yield a fiber between any two steps: each race below starts one racer after k steps of other
    // work, so across k one of them is paused at every point of the other's check-then-write.
    const afterSteps = <A, E, R>(k: number, effect: Effect.Effect<A, E, R>) =>
      Array.from({ length: k }).reduce<Effect.Effect<A, E, R>>((next) => Effect.zipRight(Effect.void, next), effect)
    const STAGGERS = 1100

    it.effect("staggered consumers of one approval: exactly one wins however the scheduler interleaves them", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const twice: Array<number> = []
        for (let k = 0; k < STAGGERS; k++) {
          const r = request(10_000 + k)
          yield* queue.submit(r)
          yield* queue.approve(r.approval_id, maya)
          const use = Effect.either(queue.consume(r.approval_id, ls, now))
          const results = yield* Effect.all([afterSteps(k, use), use], { concurrency: 2 })
          if (results.every(Either.isRight)) twice.push(k)
        }
        assert.deepStrictEqual(twice, [], "a usable-once approval was consumed twice")
      })))

    it.effect("a staggered approve and reject of one request: exactly one decides", () =>
      provided(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        const both: Array<number> = []
        for (let k = 0; k < STAGGERS; k++) {
          const r = request(20_000 + k)
          yield* queue.submit(r)
          const results = yield* Effect.all([
            afterSteps(k, Effect.either(queue.approve(r.approval_id, maya))),
            Effect.either(queue.reject(r.approval_id, { id: "sam", approver_class: "maintainer" }))
          ], { concurrency: 2 })
          if (results.every(Either.isRight)) both.push(k)
        }
        assert.deepStrictEqual(both, [], "both an approval and a rejection succeeded")
      })))
  })
}

/** A child process that opens the database, says "ready", waits for "go", then tries to use every approval given. */
const consumer = `
import { Cause, Effect, Exit, Layer } from "effect"
import * as Sqlite from "../../adapters/node/Sqlite.ts"
import * as SqlApprovalQueue from "../../adapters/sql/SqlApprovalQueue.ts"
import { ApprovalQueue } from "../../core/approval/Approval.ts"
import * as Time from "../../core/base/Time.ts"

const [filename, digest, now, ...ids] = process.argv.slice(2)
const go = new Promise((resolve) => process.stdin.once("data", resolve))
const program = Effect.gen(function*() {
  const queue = yield* ApprovalQueue
  process.stdout.write("ready\\n")
  yield* Effect.promise(() => go)
  const won = []
  for (const id of ids) {
    const exit = yield* Effect.exit(queue.consume(id, digest, Time.fromMicros(Number(now))))
    if (Exit.isSuccess(exit)) won.push(id)
    else {
      const failure = Cause.failureOption(exit.cause)
      if (failure._tag === "None" || failure.value.reason !== "reused") return yield* Effect.die(Cause.pretty(exit.cause))
    }
  }
  process.stdout.write(JSON.stringify(won) + "\\n")
}).pipe(Effect.provide(SqlApprovalQueue.layer.pipe(Layer.provide(Sqlite.layer({ filename })))))
Effect.runPromise(program).then(() => process.exit(0), (error) => {
  process.stderr.write(String(error) + "\\n")
  process.exit(1)
})
`

/** Run `count` consumer processes against one database at once; each resolves to the ids it won. */
const raceProcesses = (dir: string, count: number, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const script = path.join(dir, "consumer.cjs")
    yield* Effect.promise(() => bundleChild({ contents: consumer, resolveDir: import.meta.dirname }, script))
    return yield* Effect.async<ReadonlyArray<ReadonlyArray<string>>, string>((resume) => {
      let ready = 0
      const children = Array.from({ length: count }, () =>
        spawn(process.execPath, [script, ...args], {
          env: { ...process.env, NODE_PATH: path.join(root, "node_modules") },
          stdio: ["pipe", "pipe", "pipe"]
        }))
      const killAll = () => children.forEach((child) => child.kill("SIGKILL"))
      const results = children.map((child) =>
        new Promise<ReadonlyArray<string>>((resolve, reject) => {
          let out = ""
          let err = ""
          child.stdout.on("data", (chunk) => {
            const wasReady = out.includes("ready\n")
            out += chunk
            // Start every consumer at once, when the last one has opened the database.
            if (!wasReady && out.includes("ready\n") && ++ready === count) {
              for (const each of children) each.stdin.write("go\n")
            }
          })
          child.stderr.on("data", (chunk) => err += chunk)
          child.on(
            "close",
            (code) => code === 0 ? resolve(JSON.parse(out.trim().split("\n").at(-1)!)) : reject(`exit ${code}: ${err}`)
          )
        })
      )
      Promise.all(results).then((won) => resume(Effect.succeed(won)), (error) => {
        killAll()
        resume(Effect.fail(String(error)))
      })
      return Effect.sync(killAll)
    })
  })

describe("ApprovalQueue: sql", () => {
  it.scoped("decisions and uses survive closing and reopening the database", () =>
    Effect.gen(function*() {
      const database = Sqlite.layer({ filename: path.join(yield* tempDir, "writ.db") })
      const run = <A, E>(effect: Effect.Effect<A, E, ApprovalQueue>) => Effect.provide(effect, sqlOn(database))
      yield* run(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        for (const n of [1, 2, 3]) yield* queue.submit(request(n))
        yield* queue.approve(request(1).approval_id, maya)
        yield* queue.reject(request(2).approval_id, maya)
      }))
      yield* run(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        assert.deepStrictEqual(yield* queue.list(), [
          ApprovalRecord.make({ request: request(1), state: "approved", decided_by: "maya" }),
          ApprovalRecord.make({ request: request(2), state: "rejected", decided_by: "maya" }),
          ApprovalRecord.make({ request: request(3), state: "pending" })
        ])
        assert.deepStrictEqual(yield* queue.consume(request(1).approval_id, ls, now), request(1))
      }))
      yield* run(Effect.gen(function*() {
        const queue = yield* ApprovalQueue
        assert.strictEqual((yield* Effect.flip(queue.consume(request(1).approval_id, ls, now))).reason, "reused")
        assert.strictEqual((yield* Effect.flip(queue.consume(request(2).approval_id, ls, now))).reason, "rejected")
        assert.strictEqual((yield* Effect.flip(queue.consume(request(3).approval_id, ls, now))).reason, "pending")
      }))
    }))

  it.effect("the database refuses any state change but pending -> approved|rejected -> consumed", () =>
    Effect.gen(function*() {
      const queue = yield* ApprovalQueue
      const sql = yield* SqlClient.SqlClient
      yield* queue.submit(request(1))
      yield* queue.approve(request(1).approval_id, maya)
      yield* queue.consume(request(1).approval_id, ls, now, undefined, "attempt-1")
      const revive = yield* Effect.flip(sql`UPDATE approvals SET state = 'approved'`)
      const rebind = yield* Effect.flip(sql`UPDATE approvals SET binding_digest = ${make}`)
      const reassign = yield* Effect.flip(sql`UPDATE approvals SET consumed_by = 'attempt-2'`)
      for (const refused of [revive, rebind, reassign]) assert.include(String(refused.cause), "approvals move only")
    }).pipe(Effect.provide(sqlOn(sqliteLayer()))))

  it.scopedLive(
    "consumers in separate processes racing for the same approvals: each approval is used exactly once",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const filename = path.join(dir, "writ.db")
        const approvals = Array.from({ length: 40 }, (_, i) => request(i + 1))
        yield* Effect.gen(function*() {
          const queue = yield* ApprovalQueue
          for (const r of approvals) {
            yield* queue.submit(r)
            yield* queue.approve(r.approval_id, maya)
          }
        }).pipe(Effect.provide(sqlOn(Sqlite.layer({ filename }))))
        const ids = approvals.map((r) => r.approval_id)
        const won = yield* raceProcesses(dir, 4, [filename, ls, String(Time.toMicros(now)), ...ids])
        assert.deepStrictEqual(won.flat().toSorted(), ids.toSorted())
      }),
    { timeout: 60_000 }
  )
})
