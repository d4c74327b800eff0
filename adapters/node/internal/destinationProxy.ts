/**
 * The destination proxy a sandbox reaches the network through: it listens on a unix socket outside the sandbox and
 * serves one HTTP CONNECT or absolute-form plain-HTTP request per connection. It parses the target's host and port
 * (refusing a NUL byte or any character a DNS name or IP literal does not have, and normalising IPv4 forms as URLs
 * do), and connects only to a destination the call's NetworkGrant permits, by that parsed host, never by a header.
 * A plain-HTTP request whose Host header names another authority than its target is refused. Through a tunnel it
 * waits for the client's first bytes: a TLS ClientHello whose SNI, or a plain request whose Host header, names
 * another host than the CONNECT target is refused before anything reaches the destination. Later requests on a
 * proxied keep-alive connection go to the same (permitted) destination and are not parsed again.
 *
 * A destination named by a DNS name is resolved once, by the proxy, and dialed at the address it resolved to (never
 * by its name again, so a second answer cannot redirect it); a name that resolves to a loopback, private, link-local,
 * shared, unspecified or multicast address is refused unless the grant also names that address (DNS rebinding).
 * `localhost` is not resolved: it is 127.0.0.1, as the policy wrote it.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as dns from "node:dns"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import * as NetworkGrant from "../../../core/policy/NetworkGrant.ts"

/** A parsed target: the host as the grant matches it (IPv6 bracketed), the host to dial, and the port. */
export interface Target {
  readonly destination: string
  readonly host: string
  readonly dial: string
  readonly port: number
}

/** One refused request: why, and the target as the client wrote it. */
export interface Refusal {
  readonly reason: string
  readonly target: string
}

/** A listening proxy: its socket's path and what it refused so far. */
export interface Proxy {
  readonly path: string
  readonly refusals: ReadonlyArray<Refusal>
}

/** A resolver: every address a DNS name has (the system's `getaddrinfo` unless a test injects its own). */
export type Resolve = (name: string) => Promise<ReadonlyArray<string>>

/** How a proxy resolves the names it is asked for. */
export interface Options {
  readonly resolve?: Resolve
  /**
   * One smuggling check left out, so a test can show the attack matrix judges a smuggled request `escaped`: a plain
   * request's Host header naming another host than its target, or a tunnel's TLS SNI naming another host. Writ never
   * sets it.
   */
  readonly unchecked?: "host_header" | "tls_sni"
}

const systemResolve: Resolve = (name) =>
  dns.promises.lookup(name, { all: true, verbatim: true }).then((all) => all.map((entry) => entry.address))

const resolveWait = 5000

// The ranges a name may not lead to unless the grant names the address itself (IPv4-mapped IPv6 is checked as IPv4).
const internal = new net.BlockList()
for (
  const [prefix, bits] of [
    ["0.0.0.0", 8],
    ["10.0.0.0", 8],
    ["100.64.0.0", 10],
    ["127.0.0.0", 8],
    ["169.254.0.0", 16],
    ["172.16.0.0", 12],
    ["192.0.0.0", 24],
    ["192.168.0.0", 16],
    ["198.18.0.0", 15],
    ["224.0.0.0", 4],
    ["240.0.0.0", 4]
  ] as const
) internal.addSubnet(prefix, bits, "ipv4")
for (
  const [prefix, bits] of [["::", 128], ["::1", 128], ["fc00::", 7], ["fe80::", 10], ["fec0::", 10], [
    "ff00::",
    8
  ]] as const
) internal.addSubnet(prefix, bits, "ipv6")

/** Whether `address` is loopback, private, link-local, shared, unspecified, reserved or multicast (IPv4 or IPv6). */
export const isInternal = (address: string): boolean => {
  const family = net.isIP(address)
  return family === 0 || internal.check(address, family === 4 ? "ipv4" : "ipv6")
}

/**
 * The one address to dial for a permitted `target`: its IP literal; for `localhost`, 127.0.0.1; for a DNS name, the
 * first address it resolves to, provided none of them is internal unless the grant names that address and port. Or
 * why it is refused.
 */
export const dialAddress = async (
  grant: NetworkGrant.NetworkGrant,
  target: Target,
  resolve: Resolve = systemResolve
): Promise<{ readonly address: string } | { readonly refused: string }> => {
  if (net.isIP(target.dial) !== 0) return { address: target.dial }
  if (target.host === "localhost") return { address: "127.0.0.1" }
  let timer: ReturnType<typeof setTimeout> | undefined
  const addresses = await Promise.race([
    resolve(target.host).catch(() => []),
    new Promise<ReadonlyArray<string>>((done) => (timer = setTimeout(() => done([]), resolveWait)))
  ]).finally(() => clearTimeout(timer))
  if (addresses.length === 0) return { refused: `${target.host} did not resolve` }
  for (const address of addresses) {
    const named = `${net.isIPv6(address) ? `[${address.toLowerCase()}]` : address}:${target.port}`
    if (net.isIP(address) === 0 || (isInternal(address) && !NetworkGrant.permits(grant, named))) {
      return { refused: `${target.host} resolved to ${address}, an internal address the grant does not name` }
    }
  }
  return { address: addresses[0]! }
}

/** How long a tunnel waits for the client's first bytes before it connects without them (a server-first protocol). */
export const firstBytesWait = 2000

const maxHead = 16 * 1024
const maxHello = 16 * 1024 + 5

/**
 * A `host[:port]` authority parsed and normalised, or why it is refused: a NUL byte, a character outside printable
 * ASCII, userinfo, a malformed host or a port outside 1..65535.
 */
export const parseAuthority = (authority: string, defaultPort?: number): Target | string => {
  if (authority.includes("\0")) return "a NUL byte in the host"
  if (!/^[\x21-\x7e]+$/.test(authority)) return "an invalid character in the host"
  if (authority.includes("@")) return "userinfo in the authority"
  const found = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::([0-9]{1,5}))?$/.exec(authority)
  if (found === null) return "a malformed authority"
  const port = found[2] === undefined ? defaultPort : Number(found[2])
  if (port === undefined || port < 1 || port > 65535) return "no valid port"
  if (!URL.canParse(`http://${found[1]}/`)) return "a malformed host"
  const host = new URL(`http://${found[1]}/`).hostname.replace(/\.+$/, "").toLowerCase()
  const destination = `${host}:${port}`
  if (!NetworkGrant.destinationPattern.test(destination)) return "a malformed host"
  return { destination, host, dial: host.startsWith("[") ? host.slice(1, -1) : host, port }
}

/** A request head: its method, target, version and headers (names lowercased). */
export interface Head {
  readonly method: string
  readonly target: string
  readonly version: string
  readonly headers: ReadonlyArray<readonly [string, string]>
}

/** A request head's text (without its blank line) parsed, or why it is malformed. */
export const parseHead = (text: string): Head | string => {
  const [line, ...rest] = text.split("\r\n")
  const found = /^([A-Z]+) (\S+) (HTTP\/1\.[01])$/.exec(line ?? "")
  if (found === null) return "a malformed request line"
  const headers: Array<readonly [string, string]> = []
  for (const header of rest) {
    const field = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/.exec(header)
    if (field === null || /[\0\r\n]/.test(field[2]!)) return "a malformed header"
    headers.push([field[1]!.toLowerCase(), field[2]!])
  }
  return { method: found[1]!, target: found[2]!, version: found[3]!, headers }
}

const hostHeaders = (head: Head) => head.headers.filter(([name]) => name === "host").map(([, value]) => value)

/**
 * The SNI of a TLS ClientHello record, `null` when it names none, or why the bytes are not one ClientHello record
 * carrying at most one host name.
 */
export const clientHelloSni = (bytes: Buffer): string | null | { readonly refused: string } => {
  const refused = (why: string) => ({ refused: why })
  if (bytes.length < 5 || bytes[0] !== 0x16) return refused("not a TLS handshake record")
  const end = 5 + bytes.readUInt16BE(3)
  if (bytes.length < end) return refused("a truncated TLS record")
  let at = 5
  const need = (n: number) => at + n <= end
  if (!need(4) || bytes[at] !== 0x01) return refused("not a ClientHello")
  const helloEnd = at + 4 + bytes.readUIntBE(at + 1, 3)
  if (helloEnd > end) return refused("a ClientHello split across records")
  at += 4 + 2 + 32
  if (!need(1)) return refused("a truncated ClientHello")
  at += 1 + bytes[at]!
  if (!need(2)) return refused("a truncated ClientHello")
  at += 2 + bytes.readUInt16BE(at)
  if (!need(1)) return refused("a truncated ClientHello")
  at += 1 + bytes[at]!
  if (at === helloEnd) return null
  if (!need(2)) return refused("a truncated ClientHello")
  const extensionsEnd = at + 2 + bytes.readUInt16BE(at)
  at += 2
  if (extensionsEnd > helloEnd) return refused("truncated extensions")
  let sni: string | null = null
  while (at < extensionsEnd) {
    if (at + 4 > extensionsEnd) return refused("a truncated extension")
    const type = bytes.readUInt16BE(at)
    const length = bytes.readUInt16BE(at + 2)
    const data = bytes.subarray(at + 4, at + 4 + length)
    if (at + 4 + length > extensionsEnd) return refused("a truncated extension")
    if (type === 0) {
      if (sni !== null || data.length < 2 || data.readUInt16BE(0) !== data.length - 2) return refused("a bad SNI")
      let entry = 2
      while (entry < data.length) {
        if (entry + 3 > data.length) return refused("a bad SNI")
        const size = data.readUInt16BE(entry + 1)
        if (data[entry] !== 0 || sni !== null || entry + 3 + size > data.length) return refused("a bad SNI")
        sni = data.subarray(entry + 3, entry + 3 + size).toString("latin1")
        entry += 3 + size
      }
      if (sni === null) return refused("a bad SNI")
    }
    at += 4 + length
  }
  return sni
}

const sameHost = (name: string, target: Target) => {
  const parsed = parseAuthority(name, target.port)
  return typeof parsed !== "string" && parsed.host === target.host
}

const reply = (socket: net.Socket, status: string, body: string) => {
  socket.end(
    `HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `Connection: close\r\n\r\n${body}`
  )
}

/** Serve one client connection against `grant`; a refusal is recorded and answered, and the destination never dialed. */
const serve = (
  grant: NetworkGrant.NetworkGrant,
  resolve: Resolve,
  refusals: Array<Refusal>,
  client: net.Socket,
  unchecked?: Options["unchecked"]
) => {
  client.on("error", () => client.destroy())
  let buffered = Buffer.alloc(0)
  const refuse = (reason: string, target: string, tunnelled = false) => {
    refusals.push({ reason, target })
    if (tunnelled) client.destroy()
    else reply(client, "403 Forbidden", `writ proxy: refused: ${reason}\n`)
  }
  // Dial the address the target resolved to (once, before anything was answered), never its name.
  const relay = (target: Target, first: Buffer) => {
    const upstream = net.connect({ host: target.dial, port: target.port })
    upstream.on("error", () => client.destroy())
    client.on("close", () => upstream.destroy())
    upstream.on("close", () => client.destroy())
    upstream.write(first)
    client.pipe(upstream)
    upstream.pipe(client)
  }

  // Through a tunnel: the client's first bytes must not name another host (TLS SNI, or a plain Host header).
  const tunnel = (target: Target, raw: string, early: Buffer) => {
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n")
    let first = early
    let decided = false
    const decide = () => {
      if (decided) return
      if (first.length > 0 && first[0] === 0x16) {
        if (first.length < 5 || first.length < 5 + first.readUInt16BE(3)) {
          if (first.length <= maxHello) return
        }
        decided = true
        const sni = clientHelloSni(first)
        if (sni !== null && typeof sni !== "string") return refuse(`TLS: ${sni.refused}`, raw, true)
        if (sni !== null && !sameHost(sni, target) && unchecked !== "tls_sni") {
          return refuse(`TLS SNI ${sni} is not the CONNECT host`, raw, true)
        }
      } else if (first.length > 0 && /^[A-Z]+ /.test(first.subarray(0, 16).toString("latin1"))) {
        const end = first.indexOf("\r\n\r\n")
        if (end < 0 && first.length <= maxHead) return
        decided = true
        const head = end < 0 ? "a request head past its bound" : parseHead(first.subarray(0, end).toString("latin1"))
        if (typeof head === "string") return refuse(head, raw, true)
        const hosts = hostHeaders(head)
        if (hosts.length > 1 || (hosts.length === 1 && !sameHost(hosts[0]!, target))) {
          return refuse(`a Host header (${hosts.join(", ")}) that is not the CONNECT host`, raw, true)
        }
      } else if (first.length === 0) return
      decided = true
      clearTimeout(timer)
      client.removeListener("data", more)
      relay(target, first)
    }
    const more = (chunk: Buffer) => {
      first = Buffer.concat([first, chunk])
      decide()
      if (decided) clearTimeout(timer)
    }
    const timer = setTimeout(() => {
      if (decided) return
      decided = true
      client.removeListener("data", more)
      relay(target, first)
    }, firstBytesWait)
    client.on("data", more)
    client.on("close", () => clearTimeout(timer))
    client.resume()
    decide()
  }

  // Resolve a permitted target's name, then go on with the address it resolved to, or refuse it.
  const resolved = (target: Target, raw: string, next: (dialed: Target) => void) => {
    client.pause()
    void dialAddress(grant, target, resolve).then((dial) => {
      if ("refused" in dial) return refuse(dial.refused, raw)
      next({ ...target, dial: dial.address })
    })
  }

  const onHead = (text: string, rest: Buffer) => {
    const head = parseHead(text)
    if (typeof head === "string") return refuse(head, text.split("\r\n", 1)[0]!)
    const hosts = hostHeaders(head)
    if (hosts.length > 1) return refuse("more than one Host header", head.target)
    if (head.method === "CONNECT") {
      const target = parseAuthority(head.target)
      if (typeof target === "string") return refuse(target, head.target)
      if (!NetworkGrant.permits(grant, target.destination)) {
        return refuse(`${target.destination} is not granted`, head.target)
      }
      if (hosts.length === 1 && !sameHost(hosts[0]!, target)) {
        return refuse(`the Host header ${hosts[0]} is not the CONNECT target`, head.target)
      }
      return resolved(target, head.target, (dialed) => tunnel(dialed, head.target, rest))
    }
    const absolute = /^http:\/\/([^/?#]*)([/?][^#]*)?$/.exec(head.target)
    if (absolute === null) return refuse("not an absolute http:// target", head.target)
    const target = parseAuthority(absolute[1]!, 80)
    if (typeof target === "string") return refuse(target, head.target)
    if (!NetworkGrant.permits(grant, target.destination)) {
      return refuse(`${target.destination} is not granted`, head.target)
    }
    const named = hosts.length === 1 ? parseAuthority(hosts[0]!, 80) : "no Host header"
    if ((typeof named === "string" || named.destination !== target.destination) && unchecked !== "host_header") {
      return refuse(`the Host header ${hosts[0] ?? "(none)"} is not the request's target`, head.target)
    }
    const path = absolute[2] === undefined ? "/" : absolute[2].startsWith("?") ? `/${absolute[2]}` : absolute[2]
    const headers = head.headers.filter(([name]) => !name.startsWith("proxy-"))
      .map(([name, value]) => `${name}: ${value}\r\n`).join("")
    const forwarded = Buffer.concat([Buffer.from(`${head.method} ${path} ${head.version}\r\n${headers}\r\n`), rest])
    resolved(target, head.target, (dialed) => (client.resume(), relay(dialed, forwarded)))
  }

  const onData = (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk])
    const end = buffered.indexOf("\r\n\r\n")
    if (end < 0) {
      if (buffered.length > maxHead) {
        client.removeListener("data", onData)
        refuse("a request head past its bound", "")
      }
      return
    }
    client.removeListener("data", onData)
    onHead(buffered.subarray(0, end).toString("latin1"), buffered.subarray(end + 4))
  }
  client.on("data", onData)
}

/**
 * A proxy for `grant` listening on a fresh unix socket in a directory of its own (mode 0700, outside any sandbox);
 * closed, its connections ended and its directory removed when the scope closes.
 */
export const listen = (
  grant: NetworkGrant.NetworkGrant,
  options: Options = {}
): Effect.Effect<Proxy, Error, Scope.Scope> =>
  Effect.map(
    Effect.acquireRelease(
      Effect.async<
        { readonly proxy: Proxy; readonly server: net.Server; readonly sockets: Set<net.Socket>; readonly dir: string },
        Error
      >((resume) => {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), "writ-proxy-"))
        const refusals: Array<Refusal> = []
        const sockets = new Set<net.Socket>()
        const server = net.createServer((socket) => {
          sockets.add(socket)
          socket.on("close", () => sockets.delete(socket))
          serve(grant, options.resolve ?? systemResolve, refusals, socket, options.unchecked)
        })
        const at = path.join(dir, "proxy.sock")
        server.once("error", (error) => resume(Effect.fail(error)))
        server.listen(at, () => resume(Effect.succeed({ proxy: { path: at, refusals }, server, sockets, dir })))
      }),
      ({ dir, server, sockets }) =>
        Effect.async<void>((resume) => {
          server.close(() => {
            fs.rmSync(dir, { recursive: true, force: true })
            resume(Effect.void)
          })
          for (const socket of sockets) socket.destroy()
        })
    ),
    ({ proxy }) => proxy
  )
