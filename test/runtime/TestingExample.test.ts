// The README's "Testing your policy" example, verbatim but for the import paths.
import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import { Action } from "../../core/index.ts"
import * as Testing from "../../runtime/Testing.ts"

const actions = [
  Action.make({
    name: "shell.exec",
    input: Schema.Struct({ command: Schema.String }),
    output: Schema.String,
    effects: ["shell.exec"],
    handler: ({ command }) => `ran ${command}`
  }),
  Action.make({
    name: "notes.write",
    input: Schema.Struct({ text: Schema.String }),
    output: Schema.String,
    handler: () => "saved"
  })
]

const policy = {
  policy_id: "repo-agent",
  version: "1",
  mode: "safe",
  approver_class: "maintainer",
  rules: [{ kind: "origin", effect: "allow", action_patterns: ["notes.*"], callers: ["USER", "OTHER_AGENT"] }]
} as const

describe("my agent's policy", () => {
  it("holds my properties and writ's laws", async () => {
    await Testing.check({
      policy,
      actions,
      runs: 50,
      seed: 1,
      properties: [
        ...Testing.laws(),
        Testing.property(
          "no SELF call reaches notes.write",
          (call, outcome) =>
            !(call.action === "notes.write" && call.origin._tag === "autonomous" && outcome._tag === "succeeded")
        ),
        Testing.property(
          "no shell command containing rm succeeds",
          (call, outcome) =>
            !(call.action === "shell.exec" && String(call.arguments.command).includes("rm") &&
              outcome._tag === "succeeded")
        ),
        Testing.property(
          "every denial names a reason code",
          (_call, outcome) => outcome._tag !== "denied" || outcome.reason.code.includes(".")
        )
      ]
    })
  })

  it("version 2 changes only what I meant", async () => {
    const next = { ...policy, version: "2", deny: { "notes.write": ["*"] } } as const
    const { groups } = await Testing.diff(policy, next, actions, { runs: 200, seed: 1 })
    expect(groups.map((g) => `${g.action}: ${g.old} -> ${g.new}`)).toEqual(["notes.write: succeeded -> denied"])
  })
})
