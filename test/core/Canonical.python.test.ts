import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import fc from "fast-check"
import { spawnSync } from "node:child_process"
import * as Canonical from "../../core/base/Canonical.ts"

const oracle = `
import json, sys
for line in sys.stdin.buffer.read().decode("utf-8").split("\\n"):
    if line:
        value = json.loads(line)
        out = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        sys.stdout.write(out.encode("utf-8").hex() + "\\n")
`

// python3 may be a slow launcher script (pyenv): resolve the interpreter once.
const python = spawnSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf-8" }).stdout.trim()

const pythonBytes = (values: ReadonlyArray<unknown>): Array<string> => {
  const input = values.map((value) => JSON.stringify(value)).join("\n") + "\n"
  const result = spawnSync(python, ["-c", oracle], { input, encoding: "utf-8", maxBuffer: 64 * 1024 * 1024 })
  assert.strictEqual(result.status, 0, result.stderr)
  return result.stdout.trim().split("\n")
}

const hex = (text: string) =>
  Array.from(new TextEncoder().encode(text), (byte) => byte.toString(16).padStart(2, "0")).join("")

const tricky = fc.constantFrom(
  "\u0000",
  "\u0008",
  "\u001f",
  "\u007f",
  "\u0080",
  "\u2028",
  "\u2029",
  "\ud7ff",
  "\ue000",
  "\ufeff",
  "\uffff",
  "\u{10000}",
  "\u{1f600}",
  "\u{10ffff}",
  "\"",
  "\\",
  "/",
  "é"
)
const text = fc.oneof(
  fc.string({ unit: "binary" }),
  fc.array(fc.oneof(tricky, fc.string({ unit: "binary", maxLength: 3 })), { maxLength: 8 }).map((parts) =>
    parts.join("")
  )
)

const { json } = fc.letrec<{ json: unknown }>((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.maxSafeInteger(),
    text,
    fc.array(tie("json"), { maxLength: 6 }),
    fc.dictionary(text, tie("json"), { maxKeys: 6 })
  )
}))

const deep = (depth: number): unknown => {
  let value: unknown = "\u{1f600}"
  for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value] : { ["k" + i]: value, "\uffff": i }
  return value
}

describe("Canonical JSON against Python's json.dumps", () => {
  it("is byte-for-byte equal for generated values", () => {
    fc.assert(
      fc.property(fc.array(json, { minLength: 1, maxLength: 40 }), (values) => {
        const expected = pythonBytes(values)
        values.forEach((value, i) => {
          assert.strictEqual(hex(Either.getOrThrow(Canonical.stringify(value))), expected[i])
        })
      }),
      { numRuns: 40 }
    )
  }, 60_000)

  it("is byte-for-byte equal for deep nesting", () => {
    const values = [deep(50), deep(200)]
    const expected = pythonBytes(values)
    values.forEach((value, i) => assert.strictEqual(hex(Either.getOrThrow(Canonical.stringify(value))), expected[i]))
  })
})
