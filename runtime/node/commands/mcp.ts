/**
 * `writ mcp serve`: the demo's actions as MCP tools over stdio, each call through the policy-gated executor with a
 * context from these options (principal, origin, policy), never from the client; `--permission-tool NAME` also lists a
 * tool answering Claude's `--permission-prompt-tool` by the same policy evaluation as the harness's hook. stdout is the
 * protocol: nothing else is printed there. Exit codes: 0 when stdin ends, 2 bad input.
 */
import { Command, Options } from "@effect/cli"
import { Effect, Option } from "effect"
import * as McpStdio from "../../../adapters/node/McpStdio.ts"
import * as Time from "../../../core/base/Time.ts"
import * as HarnessPolicy from "../../../core/harness/HarnessPolicy.ts"
import * as McpServer from "../../../core/mcp/McpServer.ts"
import * as PermissionPolicy from "../../../core/policy/PermissionPolicy.ts"
import * as PolicySnapshot from "../../../core/policy/PolicySnapshot.ts"
import { PolicySnapshotStore } from "../../../core/policy/PolicySnapshotStore.ts"
import * as Demo from "../../Demo.ts"
import { choice, CliInputError, parseIdentifier } from "./internal/input.ts"
import { load } from "./internal/policyFile.ts"

const origins = { user: "USER", self: "SELF", "other-agent": "OTHER_AGENT" } as const

/** The snapshot the calls pin: the file's, or the demo's; stored and activated for the executor to pin. */
const snapshotOf = (file: Option.Option<string>) =>
  Effect.gen(function*() {
    const snapshot = Option.isSome(file)
      ? (yield* load(file.value)).snapshot
      : yield* Effect.orDie(Effect.flatMap(PermissionPolicy.decode(Demo.policy), PolicySnapshot.compile))
    const store = yield* PolicySnapshotStore
    yield* Effect.orDie(store.put(snapshot))
    yield* Effect.orDie(store.activate(snapshot.policy_id, snapshot.version, "mcp", yield* Time.now))
    return snapshot
  })

const serveCommand = Command.make("serve", {
  policy: Options.file("policy", { exists: "yes" }).pipe(
    Options.optional,
    Options.withDescription("the policy declaration every call is decided by (default: the demo's)")
  ),
  principal: Options.text("principal").pipe(
    Options.withDefault("mcp-user"),
    Options.withDescription("the principal every call runs for")
  ),
  origin: choice("origin", ["user", "self", "other-agent"]).pipe(
    Options.withDefault("user" as const),
    Options.withDescription("who the calls come from, for the policy's origin rules")
  ),
  permissionTool: Options.text("permission-tool").pipe(
    Options.optional,
    Options.withDescription("also list a permission-prompt tool of this name (claude: mcp__SERVER__NAME)")
  )
}, ({ origin, permissionTool, policy, principal }) =>
  Effect.gen(function*() {
    const who = yield* parseIdentifier(principal, "--principal")
    if (Option.isSome(permissionTool) && !/^[A-Za-z0-9_-]{1,64}$/.test(permissionTool.value)) {
      return yield* new CliInputError({ message: "--permission-tool is a tool name: letters, digits, _ and -" })
    }
    const snapshot = yield* snapshotOf(policy)
    const server = yield* McpServer.make({
      principal: who,
      origin: origins[origin],
      agent: Demo.agent,
      policy_snapshot: { policy_id: snapshot.policy_id, version: snapshot.version, digest: snapshot.digest },
      ...(Option.isSome(permissionTool)
        ? { permission: { name: permissionTool.value, decide: HarnessPolicy.decider(snapshot, who) } }
        : {})
    })
    yield* McpStdio.serve(server, process.stdin, process.stdout)
  })).pipe(Command.withDescription("serve the actions as MCP tools on stdio, through the executor"))

/** `writ mcp`: writ's actions over the Model Context Protocol. */
export const command = Command.make("mcp").pipe(
  Command.withDescription("writ's actions as MCP tools"),
  Command.withSubcommands([serveCommand])
)
