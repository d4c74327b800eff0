import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import fc from "fast-check"
import { spawnSync } from "node:child_process"
import * as PolicyFormat from "../../adapters/memory/PolicyFormat.ts"
import * as WebCryptoDigest from "../../adapters/web/WebCryptoDigest.ts"
import * as PermissionPolicy from "../../core/policy/PermissionPolicy.ts"
import type { PermissionPolicyEncoded } from "../../core/policy/PermissionPolicy.ts"
import * as PolicyComposition from "../../core/policy/PolicyComposition.ts"
import type { PolicyInput } from "../../core/policy/PolicyEvaluator.ts"
import * as PolicySnapshot from "../../core/policy/PolicySnapshot.ts"
import * as Testing from "../../runtime/Testing.ts"

const RUNS = 200
const SLOW = 120_000

/** Compile a declaration: its digest, or its error message. */
const compiled = (policy: PermissionPolicy.PermissionPolicy) =>
  Effect.runPromise(
    PolicySnapshot.compile(policy).pipe(
      Effect.map((snapshot) => ({ digest: snapshot.digest, snapshot })),
      Effect.catchAll((error) => Effect.succeed({ error: error.message })),
      Effect.provide(WebCryptoDigest.layer)
    )
  )

const roundTrip = (policy: PermissionPolicy.PermissionPolicy) => {
  const yaml = PolicyFormat.write(policy, "yaml")
  const fromYaml = Either.getOrThrow(PolicyFormat.parse(yaml, "yaml"))
  const json = PolicyFormat.write(fromYaml, "json")
  return { yaml, json, policy: Either.getOrThrow(PolicyFormat.parse(json, "json")) }
}

/** Declarations that validate but do not compile: a duplicate rule id, or a gate naming a rule that does not exist. */
const uncompilable = fc.tuple(Testing.permissionPolicy(), fc.boolean()).map((
  [wire, duplicate]
): PermissionPolicyEncoded =>
  duplicate
    ? {
      ...wire,
      rules: [
        ...(wire.rules ?? []),
        { kind: "action", effect: "deny", action_patterns: ["shell.exec"], rule_id: "twice" },
        { kind: "action", effect: "allow", action_patterns: ["notes.read"], rule_id: "twice" }
      ]
    }
    : {
      ...wire,
      gates: [...(wire.gates ?? []), { gate_id: "dangling", level: "hard", order: 99, rule_ids: ["nowhere"] }]
    }
)

const decode = (wire: PermissionPolicyEncoded) => Either.getOrThrow(PermissionPolicy.decode(wire))

describe("PolicyFormat: lossless round trip", () => {
  it("property: declaration -> YAML -> parse -> JSON -> parse keeps the declaration and its digest", async () => {
    let checked = 0
    await fc.assert(
      fc.asyncProperty(Testing.permissionPolicy(), async (wire) => {
        const policy = decode(wire)
        const back = roundTrip(policy)
        assert.deepStrictEqual(back.policy, policy, back.yaml)
        const [before, after] = await Promise.all([compiled(policy), compiled(back.policy)])
        assert.isTrue("digest" in before, JSON.stringify(before))
        assert.deepStrictEqual(
          "digest" in after ? after.digest : after,
          "digest" in before ? before.digest : before
        )
        checked++
      }),
      { numRuns: RUNS }
    )
    assert.strictEqual(checked, RUNS)
  }, SLOW)

  it("property: a declaration that does not compile fails with the same error after the round trip", async () => {
    await fc.assert(
      fc.asyncProperty(uncompilable, async (wire) => {
        const policy = decode(wire)
        const [before, after] = await Promise.all([compiled(policy), compiled(roundTrip(policy).policy)])
        assert.isTrue("error" in before)
        assert.deepStrictEqual(after, before)
        assert.match("error" in before ? before.error : "", /^\$\.(rules\.\d+\.rule_id|gates\.\d+\.rule_ids\.0): /)
      }),
      { numRuns: 100 }
    )
  }, SLOW)

  it.effect("awkward keys and values read back unchanged", () =>
    Effect.gen(function*() {
      const awkward = ["null", "~", "a: b", "- x", "#x", "'q'", "&a", " lead", "a\nb", "\u2028", "__proto__"] as const
      const declared = decode({
        policy_id: "p",
        version: "1",
        deny: Object.fromEntries(awkward.slice(0, -1).map((key) => [key, awkward])),
        rules: [{ kind: "action", effect: "deny", action_patterns: awkward, operations: awkward }]
      })
      const { policy } = roundTrip(declared)
      assert.deepStrictEqual(Object.keys(policy.deny ?? {}), awkward.slice(0, -1))
      assert.deepStrictEqual(policy, declared)
      const [before, after] = yield* Effect.all([PolicySnapshot.compile(declared), PolicySnapshot.compile(policy)])
      assert.strictEqual(after.compiled_rules.length, awkward.length)
      assert.strictEqual(after.digest, before.digest)
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  // On Node, Schema.Record decoding assigns a `__proto__` key through the prototype setter, so it would vanish (Deno
  // keeps it) and one file would compile to different digests on the two runtimes: PatternMap refuses the key.
  it("a `__proto__` rules-mode key is refused with its path, in JSON and YAML, on every runtime", () => {
    const cases: ReadonlyArray<[string, PolicyFormat.Format, string]> = [
      [
        "{\"policy_id\":\"p\",\"version\":\"1\",\"deny\":{\"__proto__\":[\"rm\"],\"shell.exec\":[\"sudo\"]}}",
        "json",
        "$.deny.__proto__"
      ],
      ["policy_id: p\nversion: \"1\"\nallow:\n  notes.read: [\"*\"]\n  __proto__: [rm]\n", "yaml", "$.allow.__proto__"]
    ]
    for (const [text, format, path] of cases) {
      const result = PolicyFormat.parse(text, format)
      assert.isTrue(Either.isLeft(result), `accepted: ${text}`)
      if (Either.isLeft(result)) assert.strictEqual(result.left.path, path)
    }
    // The key is refused in every rules-mode map, not only when it comes from a file.
    for (const map of ["deny", "allow", "escalate"] as const) {
      const result = PermissionPolicy.decode(
        JSON.parse(`{"policy_id":"p","version":"1","${map}":{"__proto__":["rm"]}}`)
      )
      assert.isTrue(Either.isLeft(result), map)
      if (Either.isLeft(result)) assert.strictEqual(result.left.path, `$.${map}.__proto__`)
    }
  })

  it("the writer is canonical: writing what was read gives the same text", () =>
    fc.assert(
      fc.property(Testing.permissionPolicy(), fc.constantFrom("yaml" as const, "json" as const), (wire, format) => {
        const text = PolicyFormat.write(decode(wire), format)
        assert.strictEqual(PolicyFormat.write(Either.getOrThrow(PolicyFormat.parse(text, format)), format), text)
      }),
      { numRuns: RUNS }
    ))
})

// PyYAML (Debian's python3-yaml) is a YAML 1.1 reader: it takes a plain `no` for false, `1:20` for 4800, `2001-12-14`
// for a date, `=` for the value key. Each text is read exactly as `yaml.safe_load(open(file))` reads a file `fmt` wrote.
const python = spawnSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf-8" }).stdout.trim()
const pyyaml = (texts: ReadonlyArray<string>): Array<unknown> => {
  // A text PyYAML cannot read becomes its error, and a key or value JSON would not keep apart from a string (a boolean
  // key, a date, a float) a marker naming its type, so an assertion names what PyYAML made of which string.
  const script = [
    "import datetime, json, sys, yaml",
    "def mark(v): return 'pyyaml ' + type(v).__name__ + ' ' + repr(v)",
    "def plain(v):",
    "    if isinstance(v, dict): return {k if isinstance(k, str) else mark(k): plain(x) for k, x in v.items()}",
    "    if isinstance(v, list): return [plain(x) for x in v]",
    "    return mark(v) if isinstance(v, (float, datetime.date, bytes)) else v",
    "def read(text):",
    "    try: return plain(yaml.safe_load(text))",
    "    except yaml.YAMLError as error: return {'pyyaml error': str(error)}",
    "print(json.dumps([read(t) for t in json.load(sys.stdin)]))"
  ].join("\n")
  const result = spawnSync(python, ["-c", script], {
    input: JSON.stringify(texts),
    encoding: "utf-8",
    maxBuffer: 64 << 20
  })
  assert.strictEqual(result.status, 0, result.stderr)
  return JSON.parse(result.stdout)
}

/** The YAML 1.1 forms of booleans, nulls, numbers, dates and timestamps, and its value and merge keys. */
const yaml11Forms = [
  ...["y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE"],
  ...["on", "On", "ON", "off", "Off", "OFF"],
  ...["~", "null", "Null", "NULL", ""],
  ...["0", "-0", "+12", "017", "0o17", "0x1F", "-0x_1f", "0b1010", "+0b1_0", "1_000", "-1_0", "1:20", "-190:20:30"],
  ...["1.5", "+.5", "0.", "1_000.5", "6.8523015e+5", "685.230_15e+03", "1e3", "1:20.5", ".inf", "-.Inf", "+.INF"],
  ...[".nan", ".NaN", ".NAN"],
  ...["2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14T21:59:43.10Z", "2001-12-14 21:59:43.10 -5"],
  ...["2001-1-1 1:1:1", "2026-11-29T18:33:51.123456Z"],
  ...["=", "<<"]
]

/** A declaration holding `text` in every kind of place a string goes: ids, versions, scopes, map keys and patterns, provenance. */
const holding = (text: string): PermissionPolicyEncoded => {
  const id = text === "" ? "-" : text
  return {
    policy_id: id,
    version: id,
    principal_scope: [id],
    tenant_scope: [id, "*"],
    mode: "rules",
    approver_class: id,
    deny: { [id]: [id] },
    allow: { [id]: [id, "*"] },
    escalate: { [id]: [id] },
    rules: [
      { rule_id: `${id}!`, kind: "action", effect: "deny", action_patterns: [id], operations: [id], provenance: text },
      { kind: "mcp", effect: "allow", server_patterns: [id], tool_patterns: [id], resource_patterns: [] },
      { kind: "expiry", effect: "allow", not_before: "2001-12-14T21:59:43.100000Z" }
    ],
    gates: [{ gate_id: id, adapter_id: id, level: "hard", order: 0, tool_ids: [id] }],
    provenance: { source: text, author: id }
  }
}

/** For each declaration: what PyYAML reads from `fmt`'s YAML, and what writ itself reads back from it (wire form). */
const readings = (declarations: ReadonlyArray<PermissionPolicyEncoded>) => {
  const texts = declarations.map((wire) => PolicyFormat.write(decode(wire), "yaml"))
  const read = pyyaml(texts)
  return texts.map((yaml, i) => {
    const writ = Either.getOrThrow(PolicyFormat.parse(yaml, "yaml"))
    return { yaml, pyyaml: read[i], writ: JSON.parse(PolicyFormat.write(writ, "json")), policy: writ }
  })
}

describe("PolicyFormat: fmt's YAML reads back identically in a YAML 1.1 parser (PyYAML)", () => {
  it("every YAML 1.1 boolean, null, number, date, timestamp, value and merge key form, wherever a string goes", () => {
    const declarations = yaml11Forms.map(holding)
    for (const [i, read] of readings(declarations).entries()) {
      assert.deepStrictEqual(read.pyyaml, read.writ, `${JSON.stringify(yaml11Forms[i])}:\n${read.yaml}`)
      assert.deepStrictEqual(read.policy, decode(declarations[i]!))
      assert.deepStrictEqual(decode(read.pyyaml as PermissionPolicyEncoded), read.policy)
    }
  })

  // Strings built from the pieces of those forms, plus the characters YAML 1.1 reads differently from 1.2 (a tab in a
  // plain scalar, NEL, LS and PS line breaks, a byte-order mark, C1 controls): one PyYAML run reads them all.
  it("property: strings assembled from YAML 1.1 scalar syntax read back identically", () => {
    const piece = fc.constantFrom(
      ..."0123456789",
      "-",
      "+",
      ":",
      ".",
      "_",
      "e",
      "E",
      "x",
      "b",
      "o",
      "t",
      "T",
      "Z",
      " ",
      "~",
      "=",
      "<<",
      "y",
      "n",
      "on",
      "off",
      "yes",
      "no",
      "true",
      "null",
      ".inf",
      ".nan",
      "2001-12-14",
      "21:59:43",
      "\t",
      "\n",
      "\u0085",
      "\u2028",
      "\u2029",
      "\ufeff",
      "\u0090",
      "\u007f",
      "#",
      "'",
      "\"",
      "\\",
      "é",
      "\u{1f600}"
    )
    const text = fc.array(piece, { minLength: 1, maxLength: 6 }).map((pieces) => pieces.join(""))
      .filter((t) => t.trim() === t)
    const texts = fc.sample(fc.uniqueArray(text, { minLength: 400, maxLength: 400 }), { numRuns: 1, seed: 16 })[0]!
    for (const [i, read] of readings(texts.map(holding)).entries()) {
      assert.deepStrictEqual(read.pyyaml, read.writ, `${JSON.stringify(texts[i])}:\n${read.yaml}`)
    }
  })
})

describe("PolicyFormat: the seed's P3 defect cannot happen", () => {
  const decide = (snapshot: PolicySnapshot.PolicySnapshot) => {
    const decider = PolicyComposition.decider(snapshot)
    return (command: string) => {
      const input: PolicyInput = {
        action: "shell.exec",
        effects: ["shell.exec"],
        arguments: { command },
        principal: "alice",
        now: 0
      }
      const verdict = decider(input)
      return `${verdict.disposition} ${verdict.code} [${verdict.matched_rules.join(",")}]`
    }
  }

  it.effect("{mode: rules, deny: {shell.exec: [rm]}} survives YAML and JSON as a non-empty policy that still denies", () =>
    Effect.gen(function*() {
      const declared = decode({ policy_id: "agent", version: "1", mode: "rules", deny: { "shell.exec": ["rm"] } })
      const { json, policy, yaml } = roundTrip(declared)
      assert.include(yaml, "deny:\n  shell.exec:\n    - rm\n")
      assert.deepStrictEqual(JSON.parse(json).deny, { "shell.exec": ["rm"] })
      assert.deepStrictEqual(policy.deny, { "shell.exec": ["rm"] })
      const original = yield* PolicySnapshot.compile(declared)
      const reread = yield* PolicySnapshot.compile(policy)
      assert.strictEqual(reread.digest, original.digest)
      assert.deepStrictEqual(
        reread.compiled_rules.map((r) => [r.kind, r.effect, r.provenance]),
        [["action", "deny", "rules-mode"]]
      )
      assert.strictEqual(decide(reread)("rm -rf /"), "deny policy.denied [rule-0]")
    }).pipe(Effect.provide(WebCryptoDigest.layer)))

  it.effect("with an allow beside it, the deny is what refuses: dropping it would turn rm into an allow", () =>
    Effect.gen(function*() {
      const declared = decode({
        policy_id: "agent",
        version: "1",
        deny: { "shell.exec": ["rm"] },
        allow: { "shell.exec": ["*"] }
      })
      const reread = yield* PolicySnapshot.compile(roundTrip(declared).policy)
      assert.strictEqual(decide(reread)("rm -rf /"), "deny policy.denied [rule-0]")
      assert.strictEqual(decide(reread)("ls"), "allow policy.allowed [rule-1]")
      const withoutDeny = yield* PolicySnapshot.compile(
        decode({ policy_id: "agent", version: "1", allow: declared.allow })
      )
      assert.strictEqual(decide(withoutDeny)("rm -rf /"), "allow policy.allowed [rule-0]")
    }).pipe(Effect.provide(WebCryptoDigest.layer)))
})

describe("PolicyFormat: bad input fails loudly", () => {
  const failure = (text: string, format: PolicyFormat.Format) => {
    const result = PolicyFormat.parse(text, format)
    assert.isTrue(Either.isLeft(result), `accepted: ${text}`)
    return Either.isLeft(result) ? result.left : undefined!
  }

  it("malformed YAML names the line", () => {
    const error = failure("policy_id: p\nversion: \"1\"\ndeny: [rm\n", "yaml")
    assert.strictEqual(error._tag, "PolicyValidationError")
    assert.strictEqual(error.path, "$")
    assert.match(error.message, /^\$: is not valid YAML: .* at line \d+, column \d+/)
  })

  it("a duplicate YAML key is refused, at any depth, naming its line", () => {
    const top = failure("policy_id: p\nversion: \"1\"\nversion: \"2\"\n", "yaml")
    assert.match(top.message, /Map keys must be unique at line 3, column 1/)
    const nested = failure(
      "policy_id: p\nversion: \"1\"\ndeny:\n  shell.exec: [rm]\n  shell.exec: [sudo]\n",
      "yaml"
    )
    assert.strictEqual(nested._tag, "PolicyValidationError")
    assert.match(nested.message, /Map keys must be unique at line 5, column 3/)
  })

  it("a mapping that does not validate names the field path, in YAML and JSON", () => {
    const yaml = failure("policy_id: p\nversion: \"1\"\nrules:\n  - kind: teleport\n    effect: allow\n", "yaml")
    assert.strictEqual(yaml.path, "$.rules.0.kind")
    const json = failure("{\"policy_id\":\"p\",\"version\":\"1\",\"deny\":{\"shell.exec\":[]}}", "json")
    assert.strictEqual(json.path, "$.deny.shell.exec.0")
    assert.strictEqual(failure("{\"policy_id\":\"p\",\"version\":\"1\",\"colour\":1}", "json").path, "$.colour")
    assert.strictEqual(failure("{\"policy_id\":\"p\",", "json").path, "$")
  })

  it("YAML past the JSON bounds (too large, nested too deep, even past what the parser can recurse into) is refused", () => {
    for (const levels of [200, 3000]) {
      const flow = failure(
        `policy_id: p\nversion: "1"\nprovenance: ${"[".repeat(levels)}${"]".repeat(levels)}\n`,
        "yaml"
      )
      assert.match(flow.message, /: (is )?nested deeper than 128 levels$/, String(levels))
      assert.isBelow(flow.message.length, 300)
    }
    let block = "policy_id: p\nversion: \"1\"\nprovenance:\n"
    for (let i = 1; i <= 1000; i++) block += `${"  ".repeat(i)}a:\n`
    assert.match(failure(block, "yaml").message, /nested deeper than 128 levels$/)
    const padded = `policy_id: p\nversion: "1"\n${"# padding\n".repeat(120_000)}`
    assert.strictEqual(
      failure(padded, "yaml").message,
      `$: ${padded.length} characters, more than the size limit of 1048576`
    )
    const proto = failure("policy_id: p\nversion: \"1\"\nprovenance:\n  __proto__: {author: x}\n", "yaml")
    assert.strictEqual(proto.path, "$.provenance.__proto__")
  })

  it("an error names a huge key or value by a bounded excerpt, and still says what is wrong", () => {
    const key = failure(
      JSON.stringify({ policy_id: "p", version: "1", allow: { ["a".repeat(1_000_000)]: [7] } }),
      "json"
    )
    assert.isBelow(key.message.length, 1000)
    assert.match(key.path, /^\$\.allow\.a{64}…$/)
    const value = failure(JSON.stringify({ policy_id: "x".repeat(900_000), version: "1" }), "json")
    assert.isBelow(value.message.length, 1000)
    assert.match(value.message, /^\$\.policy_id: Expected a string at most 200 character/)
  })

  // JSON.parse would keep the last of duplicate keys, so a second `deny` would silently erase the first: the P3
  // direction (toward fewer restrictions). JSON is parsed strictly instead, and YAML-only syntax is not JSON.
  it("a duplicate JSON key is refused, at any depth, naming its path; YAML-only syntax in a .json file is refused", () => {
    const top = failure(
      "{\"policy_id\":\"p\",\"version\":\"1\",\"deny\":{\"shell.exec\":[\"rm\"]},\"deny\":{}}",
      "json"
    )
    assert.strictEqual(top._tag, "PolicyValidationError")
    assert.strictEqual(top.message, "$.deny: duplicate key \"deny\"")
    const nested = failure(
      "{\"policy_id\":\"p\",\"version\":\"1\",\n\"deny\":{\"shell.exec\":[\"rm\"],\n\"shell.exec\":[]}}",
      "json"
    )
    assert.strictEqual(nested.message, "$.deny[\"shell.exec\"]: duplicate key \"shell.exec\"")
    for (const yamlOnly of ["policy_id: p\nversion: \"1\"\n", "{policy_id: p, version: \"1\"}"]) {
      assert.isTrue(Either.isRight(PolicyFormat.parse(yamlOnly, "yaml")), yamlOnly)
      assert.match(failure(yamlOnly, "json").message, /^\$: is not valid JSON/, yamlOnly)
    }
  })
})
