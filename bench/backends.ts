/**
 * The `backends` benchmark: per subprocess backend (bubblewrap, deno), the latency of one execute through writ against
 * the same sandbox (the bwrap argv, seccomp filter and cgroup, or the deno flags, that writ builds) running the same
 * action module through a minimal hand-written runner; alternating rounds, medians, absolute milliseconds. Then the
 * price of containment (in-process against bubblewrap), and the peak RSS of the capacity load test (10,000 concurrent
 * requests against 8 permits) in a process of its own, against its floor, under V8's default heap and with a 1 GB old
 * space, with the floor that loads writ's modules as the control. `WRIT_BENCH_BACKENDS` picks parts (a comma-separated
 * list of `bubblewrap`, `deno`, `in-process`, `capacity`; all by default).
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { Writable } from "node:stream"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as InProcessBackend from "../adapters/memory/InProcessBackend.ts"
import * as BubblewrapBackend from "../adapters/node/BubblewrapBackend.ts"
import * as DenoBackend from "../adapters/node/DenoBackend.ts"
import * as Bwrap from "../adapters/node/internal/bwrap.ts"
import * as Cgroup from "../adapters/node/internal/cgroup.ts"
import * as Deno from "../adapters/node/internal/deno.ts"
import * as HostPaths from "../adapters/node/internal/hostPaths.ts"
import * as Seccomp from "../adapters/node/internal/seccomp.ts"
import * as NodeDigest from "../adapters/node/NodeDigest.ts"
import type { ActionExecutionBackend } from "../core/action/ActionExecutionBackend.ts"
import { ActionExecutionBackend as BackendTag } from "../core/action/ActionExecutionBackend.ts"
import * as ActionRegistry from "../core/action/ActionRegistry.ts"
import * as IdGenerator from "../core/base/IdGenerator.ts"
import * as ActionExecutor from "../core/execution/ActionExecutor.ts"
import * as Ingress from "../core/execution/Ingress.ts"
import { add } from "./internal/backendAction.ts"
import type { Benchmark } from "./internal/measure.ts"
import { compare, loop, median } from "./internal/measure.ts"

const ITERATIONS = 5
const ROUNDS = 7
const WARMUP = 1
const ARGS = { a: 1, b: 2 }
// An explicit old-space limit, as a deployed service would set: far above the load test's live heap (under 30 MB),
// below the 2,048 MB from which V8 lets the old space grow fourfold between full collections.
const SIZED_OLD_SPACE_MB = 1024

const sibling = (name: string) =>
  fileURLToPath(new URL(`./internal/${name}${import.meta.url.endsWith(".ts") ? ".ts" : ".js"}`, import.meta.url))

/** One spawn to its exit: its stdout, refused unless it is the expected sum. */
const spawnOnce = (
  command: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>,
  filter?: Uint8Array,
  descriptors: ReadonlyArray<number> = []
) =>
  new Promise<void>((resolve, reject) => {
    const stdio: Array<"ignore" | "pipe" | number> = filter === undefined
      ? ["ignore", "pipe", "pipe"]
      : ["ignore", "pipe", "pipe", "ignore", "ignore", "pipe", ...descriptors]
    const child = spawn(command, args, { env, stdio })
    if (filter !== undefined) ((child.stdio as Array<unknown>)[5] as Writable).end(filter)
    let out = ""
    let err = ""
    child.stdout!.on("data", (chunk) => (out += chunk))
    child.stderr!.on("data", (chunk) => (err += chunk))
    child.on("error", reject)
    child.on(
      "close",
      (code) =>
        code === 0 && out === "3" ? resolve() : reject(new Error(`floor run: exit ${code}, stdout ${out}, ${err}`))
    )
  })

const runner = sibling("handRunner")
const handArgs = [add.module!, add.export!, JSON.stringify(ARGS)]
const modules = [...new Set(HostPaths.moduleRoots([pathToFileURL(runner).href, add.module!]))]

/** The hand-written floor in bubblewrap: writ's flags, binds by descriptor (opened per call), seccomp filter and cgroup. */
const bubblewrapFloor = (cgroups: boolean) => {
  const bwrap = HostPaths.which("bwrap", process.env.PATH)!
  const node = process.execPath
  const sandbox: Bwrap.Sandbox = {
    runtime: Bwrap.runtimeBinds(node),
    read: modules.map((dir) => ({ source: dir, target: dir })),
    write: [],
    seccomp: true
  }
  const filter = Seccomp.program({})
  return async (n: number) => {
    for (let i = 0; i < n; i++) {
      const prepared = Bwrap.prepare(sandbox, [node, runner, ...handArgs])
      try {
        if (!cgroups) {
          await spawnOnce(bwrap, prepared.argv, {}, filter, prepared.descriptors)
          continue
        }
        const group = Cgroup.create("/sys/fs/cgroup", `bench-${randomBytes(8).toString("hex")}`, {
          memoryBytes: 512 * 1024 * 1024,
          processes: 64
        })
        const wrapped = Cgroup.wrap(group, bwrap, prepared.argv)
        try {
          await spawnOnce(wrapped.command, wrapped.args, {}, filter, prepared.descriptors)
        } finally {
          await Effect.runPromise(Cgroup.remove(group))
        }
      } finally {
        Bwrap.close(prepared)
      }
    }
  }
}

/** The hand-written floor under deno: writ's flags and grants, its own cache. */
const denoFloor = (denoDir: string) => {
  const deno = Deno.resolve(undefined, process.env.PATH)!
  const args = [...Deno.argv({ read: modules, write: [], net: [], env: [] }, runner), ...handArgs]
  return async (n: number) => {
    for (let i = 0; i < n; i++) await spawnOnce(deno, args, { ...Deno.environment(denoDir) })
  }
}

/** Executes of `add` through a minimal executor over `backend`, `n` at a time, and the runtime to dispose. */
const throughWrit = async (backend: ActionExecutionBackend.Service) => {
  const runtime = ManagedRuntime.make(
    ActionExecutor.layerMinimal().pipe(
      Layer.provideMerge(
        ActionRegistry.layerWith([add]).pipe(
          Layer.provideMerge(Layer.merge(NodeDigest.layer, IdGenerator.layerCrypto)),
          Layer.merge(Layer.succeed(BackendTag, backend))
        )
      )
    )
  )
  const executor = await runtime.runPromise(ActionExecutor.ActionExecutor)
  const { context, request } = await runtime.runPromise(
    Ingress.prepare({ action: add.name, arguments: ARGS }, { principal: "bench", effect_backend: backend.ref })
  )
  const execute = () =>
    Effect.flatMap(
      executor.execute(request, { context }),
      (outcome) =>
        outcome._tag === "succeeded" && outcome.result === 3
          ? Effect.void
          : Effect.dieMessage(`backends bench: ${backend.ref.id} concluded ${outcome._tag}`)
    )
  return { runtime, run: (n: number) => runtime.runPromise(loop(execute, n)) }
}

const ms = (micros: number) => (micros / 1000).toFixed(1)

// The CPU milliseconds this process's ended children used (user and system, from /proc/self/stat; 100 ticks a second).
const childCpu = () => {
  const fields = fs.readFileSync("/proc/self/stat", "utf-8").split(") ")[1]!.split(" ")
  return (Number(fields[13]) + Number(fields[14])) * 10
}

/** `side`, counting the CPU time its children and this process spent in `spent`, per call. */
const counted =
  (side: (n: number) => Promise<void>, spent: { children: number; parent: number; calls: number }) =>
  async (n: number) => {
    const children = childCpu()
    const parent = process.cpuUsage()
    await side(n)
    const used = process.cpuUsage(parent)
    spent.children += childCpu() - children
    spent.parent += (used.user + used.system) / 1000
    spent.calls += n
  }

const measureBackend = async (
  name: string,
  backend: ActionExecutionBackend.Service,
  floor: (n: number) => Promise<void>
) => {
  const writ = await throughWrit(backend)
  const floorCpu = { children: 0, parent: 0, calls: 0 }
  const writCpu = { children: 0, parent: 0, calls: 0 }
  try {
    const result = await compare(counted(floor, floorCpu), counted(writ.run, writCpu), {
      iterations: ITERATIONS,
      rounds: ROUNDS,
      warmup: WARMUP
    })
    const cpu = (spent: typeof floorCpu) =>
      `CPU ${(spent.children / spent.calls).toFixed(0)} ms in the child, ${
        (spent.parent / spent.calls).toFixed(0)
      } ms in the parent`
    console.log(`  ${name}: hand-written runner in the same sandbox ${ms(result.baseline)} ms/call; ${cpu(floorCpu)}`)
    console.log(`  ${name}: writ execute                            ${ms(result.subject)} ms/call; ${cpu(writCpu)}`)
    console.log(
      `  ${name}: per round (floor / writ ms): ${
        result.perRound.map((r) => `${ms(r.baseline)}/${ms(r.subject)}`).join(" ")
      }`
    )
    return result
  } finally {
    await writ.runtime.dispose()
  }
}

/** A load test process's options: its old-space limit (V8's own when absent), and whether the floor first loads writ's modules. */
interface LoadProcess {
  readonly oldSpaceMegabytes?: number
  readonly withWritModules?: boolean
}

/** The capacity load test in a child process (`capacityLoad` on writ, `capacityFloor` its floor): its summary line. */
const capacityLoad = (entry: "capacityLoad" | "capacityFloor", options: LoadProcess = {}) =>
  new Promise<
    {
      requests: number
      peak_in_flight: number
      max_attempts: number
      stopped_at_lease: number
      seconds: number
      heap_waiting_bytes: number
      heap_limit_bytes: number
      max_rss_bytes: number
    }
  >((resolve, reject) => {
    const child = spawn(process.execPath, [
      ...process.execArgv.filter((flag) => flag !== "--expose-gc" && !flag.startsWith("--max-old-space-size")),
      ...(options.oldSpaceMegabytes === undefined ? [] : [`--max-old-space-size=${options.oldSpaceMegabytes}`]),
      sibling(entry),
      ...(options.withWritModules === true ? ["--with-writ-modules"] : [])
    ], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.on(
      "close",
      (code) => code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`capacity load: exit ${code}`))
    )
  })

const parts = new Set((process.env.WRIT_BENCH_BACKENDS ?? "bubblewrap,deno,in-process,capacity").split(","))

const run = async (): Promise<void> => {
  console.log(
    `backends: ${ROUNDS} alternating rounds of ${ITERATIONS} sequential calls per side, median per call (${os.cpus().length} cpus, load ${
      os.loadavg()[0]!.toFixed(2)
    })`
  )
  const overhead = (result: { ratio: number }) => `${((result.ratio - 1) * 100).toFixed(1)}%`
  let bwrapResult
  if (parts.has("bubblewrap")) {
    const bubblewrap = await Effect.runPromise(BubblewrapBackend.make())
    const report = await Effect.runPromise(bubblewrap.probe)
    const cgroups = report.capabilities?.some((claim) =>
      claim.name === "writ.memory@1" && claim.level === "enforced"
    ) ?? false
    bwrapResult = await measureBackend("bubblewrap", bubblewrap, bubblewrapFloor(cgroups))
    console.log(`backends-bubblewrap-overhead: ${overhead(bwrapResult)} (target < 10%)`)
  }

  if (parts.has("deno")) {
    const denoDir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-bench-deno-"))
    try {
      const denoResult = await measureBackend("deno", await Effect.runPromise(DenoBackend.make()), denoFloor(denoDir))
      console.log(`backends-deno-overhead: ${overhead(denoResult)} (target < 10%)`)
    } finally {
      fs.rmSync(denoDir, { recursive: true, force: true })
    }
  }

  if (parts.has("in-process")) {
    const inProcess = await throughWrit(InProcessBackend.make)
    const inProcessMicros: Array<number> = []
    try {
      await inProcess.run(1000)
      for (let round = 0; round < ROUNDS; round++) {
        const started = performance.now()
        await inProcess.run(1000)
        inProcessMicros.push((performance.now() - started) * 1000 / 1000)
      }
    } finally {
      await inProcess.runtime.dispose()
    }
    const inProcessPerCall = median(inProcessMicros)
    console.log(`  in-process: writ execute ${inProcessPerCall.toFixed(1)} µs/call`)
    if (bwrapResult !== undefined) {
      console.log(
        `backends-containment-price: ${
          (bwrapResult.subject / inProcessPerCall).toFixed(0)
        }x (bubblewrap / in-process, for information)`
      )
    }
  }

  if (parts.has("capacity")) {
    const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(0)
    const sized = { oldSpaceMegabytes: SIZED_OLD_SPACE_MB }
    const floor = await capacityLoad("capacityFloor")
    const load = await capacityLoad("capacityLoad")
    const control = await capacityLoad("capacityFloor", { withWritModules: true })
    const sizedFloor = await capacityLoad("capacityFloor", sized)
    const sizedLoad = await capacityLoad("capacityLoad", sized)
    const defaultHeap = `V8's default heap (${mb(load.heap_limit_bytes)} MB here)`
    const sizedHeap = `a ${SIZED_OLD_SPACE_MB} MB old space`
    for (
      const [name, run] of [
        [`floor (the same capacity and handler, no executor), ${defaultHeap}`, floor],
        [`writ, ${defaultHeap}`, load],
        [`floor with writ's modules loaded and unused, ${defaultHeap}`, control],
        [`floor, ${sizedHeap}`, sizedFloor],
        [`writ, ${sizedHeap}`, sizedLoad]
      ] as const
    ) {
      console.log(
        `  capacity load, ${name}: ${run.requests} requests, 8 permits, at most ${run.peak_in_flight} in flight, at most ${run.max_attempts} attempts each, ${run.stopped_at_lease} stopped at their lease, ${
          run.seconds.toFixed(1)
        } s; peak RSS ${mb(run.max_rss_bytes)} MB`
      )
    }
    console.log(
      `backends-capacity-peak-rss: ${mb(sizedLoad.max_rss_bytes)} MB with ${sizedHeap}, ${
        (sizedLoad.max_rss_bytes / sizedFloor.max_rss_bytes).toFixed(2)
      }x its floor's ${mb(sizedFloor.max_rss_bytes)} MB (target < 200 MB); under ${defaultHeap} ${
        mb(load.max_rss_bytes)
      } MB, ${(load.max_rss_bytes / floor.max_rss_bytes).toFixed(2)}x its floor's ${
        mb(floor.max_rss_bytes)
      } MB, and the floor with writ's modules loaded ${mb(control.max_rss_bytes)} MB`
    )
  }
}

/** Writ's overhead over a hand-written runner in the same sandbox, per backend; containment's price; load RSS. */
export const benchmark: Benchmark = { name: "backends", run }
