/**
 * `npm run bench [-- NAME...]`: runs every benchmark, or the named ones. Re-executes itself under
 * `node --expose-gc` so benchmarks can collect garbage between timed runs and read a settled heap.
 */
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as Backends from "./backends.ts"
import * as Evidence from "./evidence.ts"
import * as Executor from "./executor.ts"
import * as Governed from "./governed.ts"
import * as Harness from "./harness.ts"
import type { Benchmark } from "./internal/measure.ts"
import * as Policy from "./policy.ts"
import * as Testing from "./testing.ts"

const benchmarks: ReadonlyArray<Benchmark> = [
  Executor.benchmark,
  Governed.benchmark,
  Policy.benchmark,
  Evidence.benchmark,
  Testing.benchmark,
  Backends.benchmark,
  Harness.benchmark
]

const main = async (names: ReadonlyArray<string>): Promise<number> => {
  const unknown = names.filter((name) => !benchmarks.some((benchmark) => benchmark.name === name))
  if (unknown.length > 0) {
    console.error(`unknown benchmark: ${unknown.join(", ")}`)
    console.error(`known benchmarks: ${benchmarks.map((benchmark) => benchmark.name).join(", ")}`)
    return 2
  }
  if (globalThis.gc === undefined) {
    const child = spawnSync(
      process.execPath,
      ["--expose-gc", ...process.execArgv, fileURLToPath(import.meta.url), ...names],
      { stdio: "inherit" }
    )
    return child.status ?? 1
  }
  const selected = names.length === 0
    ? benchmarks
    : benchmarks.filter((benchmark) => names.includes(benchmark.name))
  for (const benchmark of selected) await benchmark.run()
  return 0
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  }
)
