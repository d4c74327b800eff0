/**
 * The hostile actions `writ backend probe NAME --verify` runs on a backend, in a module of their own so a subprocess
 * backend's child imports them (each declares this module and its export). Each attempts one act a containment claim
 * must stop and answers with what it saw; the verifier judges the attempt by its effect on the host, not by the answer.
 */
import { Redacted, Schema } from "effect"
import { Buffer } from "node:buffer"
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as Action from "../../core/action/Action.ts"

const at = import.meta.url

/** What an attempt saw: `ok` with what it got, or the error code that stopped it. */
export const Seen = Schema.Struct({ ok: Schema.Boolean, value: Schema.String })

/** The secret the secrets attack is granted, by reference. */
export const grantedSecret = "writ.verify.granted"

const attempt = (act: () => string): typeof Seen.Type => {
  try {
    return { ok: true, value: act() }
  } catch (error) {
    return { ok: false, value: String((error as { code?: unknown }).code ?? error) }
  }
}

const connectTo = (options: net.NetConnectOpts) =>
  new Promise<typeof Seen.Type>((resolve) => {
    const socket = net.connect(options)
    socket.setTimeout(3000, () => (socket.destroy(), resolve({ ok: false, value: "timeout" })))
    socket.on("connect", () => (socket.end(), resolve({ ok: true, value: "connected" })))
    socket.on("error", (error: NodeJS.ErrnoException) => resolve({ ok: false, value: error.code ?? "error" }))
  })

/** One attempt to reach a host listener: directly, or through the sandbox's proxy with a raw request. */
export const Reach = Schema.Struct({
  host: Schema.String,
  port: Schema.Number,
  /** The raw request (latin1) sent to the proxy; absent: a direct connection. */
  request: Schema.optional(Schema.String),
  /** Hex bytes sent once the proxy answered 200 (a TLS ClientHello), before the ping. */
  after: Schema.optional(Schema.String)
})

const proxyOf = () => {
  try {
    const address = process.env.HTTP_PROXY
    return address === undefined ? undefined : new URL(address)
  } catch {
    return undefined // No proxy, or (under deno) no permission to read the variable.
  }
}

// Reached when a listener answered `writ-reached`; through the proxy, else straight to `host:port` (no proxy given).
const reachOne = ({ after, host, port, request }: typeof Reach.Type) =>
  new Promise<typeof Seen.Type>((resolve) => {
    const proxy = request === undefined ? undefined : proxyOf()
    const socket = proxy === undefined
      ? net.connect({ host, port })
      : net.connect({ host: proxy.hostname, port: Number(proxy.port) })
    const ping = Buffer.concat([Buffer.from(after ?? "", "hex"), Buffer.from("ping\n")])
    let seen = ""
    let tunnelled = proxy === undefined
    const done = (value: typeof Seen.Type) => (socket.destroy(), resolve(value))
    socket.setTimeout(5000, () => done({ ok: false, value: `timeout ${seen.split("\r\n")[0]}` }))
    socket.on("connect", () => socket.write(tunnelled ? ping : Buffer.from(request!, "latin1")))
    socket.on("data", (chunk: Buffer) => {
      seen += chunk.toString("latin1")
      if (seen.includes("writ-reached")) return done({ ok: true, value: "reached" })
      if (!tunnelled && seen.startsWith("HTTP/1.1 200 ") && seen.includes("\r\n\r\n")) {
        tunnelled = true
        seen = ""
        socket.write(ping)
      }
    })
    socket.on("error", (error: NodeJS.ErrnoException) => done({ ok: false, value: error.code ?? "error" }))
    socket.on("close", () => done({ ok: false, value: seen.split("\r\n")[0] || "closed" }))
  })

/** Tries to reach each listener in turn (directly, or through its proxy where it has one), and answers what each saw. */
export const reach = Action.make({
  module: at,
  export: "reach",
  name: "verify.reach",
  input: Schema.Struct({ attempts: Schema.Array(Reach) }),
  output: Schema.Array(Seen),
  handler: async ({ attempts }) => {
    const seen: Array<typeof Seen.Type> = []
    for (const attempt of attempts) seen.push(await reachOne(attempt))
    return seen
  }
})

/** Reads a file. */
export const readFile = Action.make({
  module: at,
  export: "readFile",
  name: "verify.read_file",
  input: Schema.Struct({ path: Schema.String }),
  output: Seen,
  handler: ({ path }) => attempt(() => fs.readFileSync(path, "utf-8"))
})

/** Writes a file. */
export const writeFile = Action.make({
  module: at,
  export: "writeFile",
  name: "verify.write_file",
  input: Schema.Struct({ path: Schema.String }),
  output: Seen,
  handler: ({ path }) => attempt(() => (fs.writeFileSync(path, "escaped"), "written"))
})

/** Opens a TCP connection. */
export const connect = Action.make({
  module: at,
  export: "connect",
  name: "verify.connect",
  input: Schema.Struct({ host: Schema.String, port: Schema.Number }),
  output: Seen,
  handler: ({ host, port }) => connectTo({ host, port })
})

/** Connects to a unix socket (creating an AF_UNIX socket first). */
export const unixConnect = Action.make({
  module: at,
  export: "unixConnect",
  name: "verify.unix_connect",
  input: Schema.Struct({ path: Schema.String }),
  output: Seen,
  handler: ({ path }) => connectTo({ path })
})

/** Reads an environment variable, from its own environment and from /proc/1/environ and /proc/self/environ. */
export const readEnvironment = Action.make({
  module: at,
  export: "readEnvironment",
  name: "verify.read_environment",
  input: Schema.Struct({ variable: Schema.String }),
  output: Schema.Struct({ env: Seen, init: Seen, self: Seen }),
  handler: ({ variable }) => ({
    env: attempt(() => process.env[variable] ?? "(unset)"),
    init: attempt(() => fs.readFileSync("/proc/1/environ", "utf-8")),
    self: attempt(() => fs.readFileSync("/proc/self/environ", "utf-8"))
  })
})

/**
 * Answers the SHA-256 of the secret it is granted (injected), never the value, and tries for one it is not: from its
 * handler's context, the store's file, and the environment and command line of its init and itself.
 */
export const readSecret = Action.make({
  module: at,
  export: "readSecret",
  name: "verify.read_secret",
  input: Schema.Struct({ ungranted: Schema.String, file: Schema.String }),
  output: Schema.Struct({ granted: Schema.String, tried: Schema.Array(Seen) }),
  secrets: [{ namespace: grantedSecret, exposure: "inject" }],
  handler: ({ file, ungranted }, context) => {
    const granted = context.secret(grantedSecret)
    const read = (path: string) => attempt(() => fs.readFileSync(path, "utf-8"))
    return {
      granted: granted === undefined ? "(none)" : createHash("sha256").update(Redacted.value(granted)).digest("hex"),
      tried: [
        attempt(() => {
          const value = context.secret(ungranted)
          return value === undefined ? "(none)" : Redacted.value(value)
        }),
        ...[file, "/proc/1/environ", "/proc/1/cmdline", "/proc/self/environ", "/proc/self/cmdline"].map(read)
      ]
    }
  }
})

/** Allocates (and touches) `megabytes` MiB, and answers how many it holds. */
export const allocate = Action.make({
  module: at,
  export: "allocate",
  name: "verify.allocate",
  input: Schema.Struct({ megabytes: Schema.Number }),
  output: Schema.Number,
  handler: ({ megabytes }) => {
    const held: Array<Buffer> = []
    for (let i = 0; i < megabytes; i++) held.push(Buffer.alloc(1024 * 1024, 1))
    return held.length
  }
})

/**
 * Starts up to `children` node processes one after another, stopping at the first refused; a moment later counts
 * those still alive (each at least one task, beside its own), then stops them all.
 */
export const forkBomb = Action.make({
  module: at,
  export: "forkBomb",
  name: "verify.fork_bomb",
  input: Schema.Struct({ children: Schema.Number }),
  output: Schema.Struct({ spawned: Schema.Number, alive: Schema.Number, refused: Schema.Number }),
  handler: async ({ children }) => {
    const started: Array<ReturnType<typeof spawn>> = []
    let refused = 0
    for (let i = 0; i < children && refused === 0; i++) {
      const outcome = await new Promise<"spawned" | "refused">((resolve) => {
        try {
          const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 20000)"], { stdio: "ignore" })
          child.once("error", () => resolve("refused"))
          child.once("spawn", () => (started.push(child), resolve("spawned")))
        } catch {
          resolve("refused")
        }
      })
      if (outcome === "refused") refused++
    }
    await new Promise((resolve) => setTimeout(resolve, 500))
    const alive = started.filter((child) => child.exitCode === null && child.signalCode === null).length
    for (const child of started) child.kill("SIGKILL")
    return { spawned: started.length, alive, refused }
  }
})

/** Spawns a shell that waits five seconds, `token` on its command line so the host can look for it. */
export const spawnProcess = Action.make({
  module: at,
  export: "spawnProcess",
  name: "verify.spawn",
  input: Schema.Struct({ token: Schema.String }),
  output: Seen,
  handler: ({ token }) =>
    attempt(() => {
      const child = spawn("/bin/sh", ["-c", "sleep 5", token], { stdio: "ignore", detached: true })
      child.on("error", () => undefined)
      child.unref()
      if (child.pid === undefined) throw { code: "no pid" }
      return "spawned"
    })
})

/** Loops forever. */
export const spin = Action.make({
  module: at,
  export: "spin",
  name: "verify.spin",
  input: Schema.Struct({}),
  output: Schema.Void,
  handler: () => {
    for (;;) {
      // spin
    }
  }
})

/** Every hostile action of this module. */
export const all = [
  readFile,
  writeFile,
  connect,
  unixConnect,
  readEnvironment,
  readSecret,
  allocate,
  forkBomb,
  spawnProcess,
  spin,
  reach
] as const
