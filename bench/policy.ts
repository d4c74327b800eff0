/**
 * The `policy` benchmark: writ's compiled policy evaluation (both parts of a precompiled gate)
 * against cedar-wasm's `statefulIsAuthorized` on a preparsed translation of the same 200-rule
 * policy, same requests, identical decisions asserted first; then writ's time per decision as the
 * rule count grows from 10 to 10,000.
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { setFlagsFromString } from "node:v8"
import type { CompiledGate, PolicyInput } from "../core/policy/PolicyEvaluator.ts"
import * as PolicyEvaluator from "../core/policy/PolicyEvaluator.ts"
import type { ActionRule, InvocationKind, OriginRule, SubsetPolicy, SubsetRequest } from "../test/fixtures/cedar.ts"
import { cedarDecision, compileWrit, toCedar, toCedarRequest, toPolicyInput } from "../test/fixtures/cedar.ts"
import type { Benchmark } from "./internal/measure.ts"
import { collect, median } from "./internal/measure.ts"

const RULES = 200
const REQUESTS = 2_000
const SIZES = [10, 100, 1_000, 10_000] as const
const ROUNDS = 7
const WARMUP = 2
const WRIT_OPS = 200_000
const CEDAR_OPS = 4_000
const PSET = "bench-policy"

/** A seeded xorshift32, so every run benchmarks the same policies and requests. */
const random = (seed: number) => {
  let state = seed >>> 0 || 1
  return {
    int: (n: number): number => {
      state ^= state << 13
      state ^= state >>> 17
      state ^= state << 5
      return (state >>> 0) % n
    },
    pick<A>(values: ReadonlyArray<A>): A {
      return values[this.int(values.length)]!
    }
  }
}

const VERBS = ["read", "write", "list", "delete", "exec"] as const
const service = (k: number) => `svc${k}`

/** One service's rules, as a team would write them: exact and wildcard allows, denies, origin limits. */
const serviceRules = (k: number): ReadonlyArray<ActionRule | OriginRule> => {
  const s = service(k)
  return [
    { kind: "action", effect: "allow", action_patterns: [`${s}.read`, `${s}.list`] },
    { kind: "action", effect: "deny", action_patterns: [`${s}.delete`] },
    { kind: "origin", effect: "allow", action_patterns: [`${s}.write`], callers: ["USER"] },
    { kind: "action", effect: "allow", action_patterns: [`${s}.write`] },
    { kind: "action", effect: "deny", action_patterns: [`${s}.exec`], operations: ["rm", "sudo", "chmod"] },
    { kind: "action", effect: "allow", action_patterns: [`${s}.exec`], operations: ["git *", "ls", "make *"] },
    { kind: "origin", effect: "allow", action_patterns: [`${s}.*`], callers: ["USER", "OTHER_AGENT", "SELF"] },
    { kind: "action", effect: "allow", action_patterns: [`${s}.*`], operations: [`/srv/${s}/*`] }
  ]
}

/** Policy-wide rules: the shell, and a few wildcards over every service. */
const globalRules: ReadonlyArray<ActionRule | OriginRule> = [
  { kind: "action", effect: "deny", action_patterns: ["shell.*"], operations: ["rm", "sudo", "chmod", "kill", "mkfs"] },
  { kind: "action", effect: "allow", action_patterns: ["shell.exec"], operations: ["git *", "ls", "cat *"] },
  { kind: "origin", effect: "allow", action_patterns: ["shell.*"], callers: ["USER"] },
  { kind: "action", effect: "allow", action_patterns: ["*.search"] },
  { kind: "action", effect: "deny", action_patterns: ["*.purge"] }
]

const RULES_PER_SERVICE = serviceRules(0).length

/** A policy of exactly `size` rules over `ceil((size - globals) / 8)` services. */
const policyOf = (size: number): { readonly policy: SubsetPolicy; readonly services: number } => {
  const globals = globalRules.slice(0, Math.min(globalRules.length, Math.floor(size / 4)))
  const services = Math.max(1, Math.ceil((size - globals.length) / RULES_PER_SERVICE))
  const rules = [...globals]
  for (let k = 0; rules.length < size; k++) rules.push(...serviceRules(k).slice(0, size - rules.length))
  return {
    policy: { policy_id: `bench-${size}`, version: "1", principal_scope: ["team-*", "alice", "svc-*"], rules },
    services
  }
}

const principals = ["alice", "team-a", "team-b", "svc-build", "mallory"]
const invocations: ReadonlyArray<InvocationKind> = [
  "user",
  "user",
  "autonomous",
  "other_agent",
  "delegated_by_user",
  "none",
  "unknown"
]
const commands = ["git status", "ls -la", "rm -rf /tmp/x", "/usr/bin/sudo ls", "cat a; rm b", "make build", "git log"]

/** Requests spread over the policy's services (and 200 names no rule governs), with shell calls. */
const requestsFor = (services: number, seed: number): ReadonlyArray<SubsetRequest> => {
  const rng = random(seed)
  return Array.from({ length: REQUESTS }, (): SubsetRequest => {
    const principal = rng.pick(principals)
    const invocation = rng.pick(invocations)
    const roll = rng.int(20)
    if (roll < 2) return { action: "shell.exec", principal, invocation, command: rng.pick(commands) }
    if (roll < 4) return { action: `misc${rng.int(200)}.${rng.pick(["search", "purge", "op"])}`, principal, invocation }
    const action = `${service(rng.int(services))}.${rng.pick(VERBS)}`
    if (roll < 7) return { action, principal, invocation, path: `/srv/${action.split(".")[0]}/data` }
    if (roll < 8) return { action, principal, invocation, command: rng.pick(commands) }
    return { action, principal, invocation }
  })
}

let sink = 0

/** writ on a precompiled gate: guard, then policy, as the executor runs them. */
const writRunner = (gate: CompiledGate, inputs: ReadonlyArray<PolicyInput>) => (ops: number) => {
  let allowed = 0
  for (let i = 0; i < ops; i++) {
    const input = inputs[i % inputs.length]!
    if (
      PolicyEvaluator.evaluate(gate, "guard", input).disposition === "allow" &&
      PolicyEvaluator.evaluate(gate, "policy", input).disposition === "allow"
    ) allowed++
  }
  sink += allowed
}

/** Time one batch in microseconds per op, after collecting garbage. */
const time = (run: (ops: number) => void, ops: number): number => {
  collect()
  const start = performance.now()
  run(ops)
  return ((performance.now() - start) * 1000) / ops
}

interface Side {
  readonly run: (ops: number) => void
  readonly ops: number
}

/** Warm both sides up, then alternate which goes first, round by round; the median µs/op of each. */
const alternate = (a: Side, b: Side) => {
  for (let i = 0; i < WARMUP; i++) {
    a.run(a.ops)
    b.run(b.ops)
  }
  const rounds: Array<{ readonly a: number; readonly b: number }> = []
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2 === 0) {
      const first = time(a.run, a.ops)
      rounds.push({ a: first, b: time(b.run, b.ops) })
    } else {
      const first = time(b.run, b.ops)
      rounds.push({ a: time(a.run, a.ops), b: first })
    }
  }
  return { a: median(rounds.map((r) => r.a)), b: median(rounds.map((r) => r.b)), rounds }
}

const versus = () => {
  const { policy, services } = policyOf(RULES)
  const requests = requestsFor(services, 7)
  const gate = compileWrit(policy)
  const text = toCedar(policy)
  const parsed = cedar.preparsePolicySet(PSET, { staticPolicies: text })
  if (parsed.type === "failure") {
    throw new Error(`policy bench: Cedar rejects the translation: ${parsed.errors[0]?.message}`)
  }
  const inputs = requests.map(toPolicyInput)
  const calls = requests.map((r) => ({ ...toCedarRequest(r), preparsedPolicySetId: PSET, entities: [] }))

  let allowed = 0
  requests.forEach((r, i) => {
    const input = inputs[i]!
    const writ = PolicyEvaluator.evaluate(gate, "guard", input).disposition === "allow" &&
        PolicyEvaluator.evaluate(gate, "policy", input).disposition === "allow"
      ? "allow"
      : "deny"
    const other = cedarDecision(cedar.statefulIsAuthorized(calls[i]!))
    if (writ !== other) {
      throw new Error(`policy bench: writ ${writ}, Cedar ${other} on ${JSON.stringify(r)}`)
    }
    if (writ === "allow") allowed++
  })

  const cedarRun = (ops: number) => {
    let allows = 0
    for (let i = 0; i < ops; i++) {
      const answer = cedar.statefulIsAuthorized(calls[i % calls.length]!)
      if (answer.type === "success" && answer.response.decision === "allow") allows++
    }
    sink += allows
  }
  const result = alternate({ run: writRunner(gate, inputs), ops: WRIT_OPS }, { run: cedarRun, ops: CEDAR_OPS })
  const cedarRules = text.split("\n").filter((line) => /^(permit|forbid) \(/.test(line)).length
  console.log(
    `policy: ${policy.rules.length} rules (${cedarRules} Cedar statements), ${requests.length} requests over ${services} ` +
      `services; identical decisions on all (${allowed} allow, ${requests.length - allowed} deny)`
  )
  console.log(
    `  ${ROUNDS} alternating rounds (${WRIT_OPS} writ / ${CEDAR_OPS} Cedar decisions each), median per decision`
  )
  console.log(`  writ PolicyEvaluator.evaluate (guard + policy, compiled gate): ${result.a.toFixed(3)} µs/decision`)
  console.log(`  cedar-wasm statefulIsAuthorized (preparsed policy set):      ${result.b.toFixed(3)} µs/decision`)
  console.log(
    `  per round (writ / Cedar µs): ${result.rounds.map((r) => `${r.a.toFixed(3)}/${r.b.toFixed(1)}`).join(" ")}`
  )
  return result.b / result.a
}

const curve = () => {
  const sides = SIZES.map((size) => {
    const { policy, services } = policyOf(size)
    const gate = compileWrit(policy)
    const requests = requestsFor(services, 11)
    const inputs = requests.map(toPolicyInput)
    const run = writRunner(gate, inputs)
    const cold = time(run, inputs.length)
    return { size, run, cold, distinct: new Set(requests.map((r) => r.action)).size }
  })
  for (let i = 0; i < WARMUP; i++) for (const side of sides) side.run(WRIT_OPS)
  // Rotate which size goes first each round, so load drift on a shared machine hits every size alike.
  const rounds = sides.map((): Array<number> => [])
  for (let round = 0; round < ROUNDS; round++) {
    for (let j = 0; j < sides.length; j++) {
      const k = (round + j) % sides.length
      rounds[k]!.push(time(sides[k]!.run, WRIT_OPS))
    }
  }
  console.log(`policy curve: writ µs/decision as rules grow (${REQUESTS} requests per size, views warm)`)
  const warm = sides.map((side, k) => {
    const median_ = median(rounds[k]!)
    console.log(
      `  ${String(side.size).padStart(6)} rules, ${String(side.distinct).padStart(4)} action names: ` +
        `${median_.toFixed(3)} µs/decision (first pass, building views: ${side.cold.toFixed(2)} µs)`
    )
    return median_
  })
  return warm[warm.length - 1]! / warm[0]!
}

const run = async (): Promise<void> => {
  // Node 20's V8 aborts ("unreachable code" in Deoptimizer::DoComputeBuiltinContinuation) in about
  // half the runs when it deoptimises a JS->Wasm call it inlined into the hot loop over cedar-wasm.
  // Cedar's time per decision is the same without that inlining.
  setFlagsFromString("--no-turbo-inline-js-wasm-calls")
  const speedup = versus()
  const flatness = curve()
  if (sink < 0) console.log(sink)
  console.log(`policy-vs-cedar: ${speedup.toFixed(1)}x (target >= 100x)`)
  console.log(`policy-flatness: ${flatness.toFixed(1)}x (target <= 2x)`)
}

/** Compiled policy evaluation vs cedar-wasm on the same rules, and writ's time as rules grow. */
export const benchmark: Benchmark = { name: "policy", run }
