import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as net from "node:net"
import * as tls from "node:tls"
import * as DestinationProxy from "../../adapters/node/internal/destinationProxy.ts"

/** A loopback listener recording what each connection sent first; it answers `writ-reached` (or speaks first). */
const listener = (speaksFirst = false) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: net.Server; readonly port: number; readonly received: Array<Buffer> }>(
      (resume) => {
        const received: Array<Buffer> = []
        const server = net.createServer((socket) => {
          socket.on("error", () => socket.destroy())
          if (speaksFirst) socket.write("writ-reached\n")
          socket.once("data", (chunk) => (received.push(chunk), socket.end("writ-reached\n")))
        })
        server.listen(0, "127.0.0.1", () =>
          resume(Effect.succeed({ server, port: (server.address() as net.AddressInfo).port, received })))
      }
    ),
    ({ server }) =>
      Effect.async<void>((resume) =>
        void server.close(() => resume(Effect.void))
      )
  )

/** Send `request` to the proxy at `path`, then `after` once a 200 came back; everything the proxy sent until close. */
const exchange = (path: string, request: string, after: Buffer = Buffer.from("ping\n")) =>
  Effect.async<string>((resume) => {
    const socket = net.connect({ path })
    let seen = ""
    let sent = false
    socket.on("connect", () => socket.write(Buffer.from(request, "latin1")))
    socket.on("data", (chunk: Buffer) => {
      seen += chunk.toString("latin1")
      if (!sent && seen.startsWith("HTTP/1.1 200 ") && seen.includes("\r\n\r\n")) {
        sent = true
        if (after.length > 0) socket.write(after)
      }
      if (seen.includes("writ-reached")) socket.destroy()
    })
    socket.on("error", () => socket.destroy())
    socket.on("close", () => resume(Effect.succeed(seen)))
  })

const grantOf = (...allow: ReadonlyArray<string>) => ({ gates: [{ gate_id: "test", allow, deny: [] }] })

/** The first bytes Node's own TLS client sends: its ClientHello, with `servername` as SNI when given. */
const realClientHello = (servername?: string) =>
  Effect.scoped(Effect.gen(function*() {
    const { port, received } = yield* listener()
    yield* Effect.async<void>((resume) => {
      const socket = tls.connect({ host: "127.0.0.1", port, ...(servername === undefined ? {} : { servername }) })
      socket.on("error", () => resume(Effect.void))
      socket.on("close", () => resume(Effect.void))
    })
    return received[0]!
  }))

describe("destination proxy", () => {
  it("parses and normalises an authority, and refuses what is no host", () => {
    const parsed = (text: string, port?: number) => {
      const target = DestinationProxy.parseAuthority(text, port)
      return typeof target === "string" ? target : target.destination
    }
    assert.strictEqual(parsed("API.Example.com.:443"), "api.example.com:443")
    assert.strictEqual(parsed("0x7f.1:80"), "127.0.0.1:80", "IPv4 forms normalise as URLs do")
    assert.strictEqual(parsed("[::1]:8080"), "[::1]:8080")
    assert.strictEqual(parsed("example.com", 80), "example.com:80")
    assert.strictEqual(parsed("127.0.0.3\0.writ.test:80"), "a NUL byte in the host")
    assert.strictEqual(parsed("a b:80"), "an invalid character in the host")
    assert.strictEqual(parsed("évil.test:80"), "an invalid character in the host")
    assert.strictEqual(parsed("user@host:80"), "userinfo in the authority")
    assert.strictEqual(parsed("host:0"), "no valid port")
    assert.strictEqual(parsed("host:70000"), "no valid port")
    assert.strictEqual(parsed("host"), "no valid port")
    assert.strictEqual(parsed("a_b.test:80"), "a malformed host")
  })

  it.live("reads the SNI of Node's own ClientHello, and none when it connects by address", () =>
    Effect.gen(function*() {
      assert.strictEqual(DestinationProxy.clientHelloSni(yield* realClientHello("api.writ.test")), "api.writ.test")
      assert.isNull(DestinationProxy.clientHelloSni(yield* realClientHello()))
      assert.deepStrictEqual(DestinationProxy.clientHelloSni(Buffer.from("GET / HTTP/1.1\r\n\r\n")), {
        refused: "not a TLS handshake record"
      })
    }))

  it.live("tunnels to a granted destination, refuses an ungranted one before dialing it", () =>
    Effect.scoped(Effect.gen(function*() {
      const granted = yield* listener()
      const other = yield* listener()
      const proxy = yield* DestinationProxy.listen(grantOf(`127.0.0.1:${granted.port}`))
      const reached = yield* exchange(proxy.path, `CONNECT 127.0.0.1:${granted.port} HTTP/1.1\r\n\r\n`)
      assert.match(reached, /^HTTP\/1\.1 200 Connection Established\r\n\r\nwrit-reached\n$/)
      assert.deepStrictEqual(granted.received.map(String), ["ping\n"])
      const refused = yield* exchange(proxy.path, `CONNECT 127.0.0.1:${other.port} HTTP/1.1\r\n\r\n`)
      assert.match(refused, /^HTTP\/1\.1 403 Forbidden\r\n/)
      assert.include(refused, `127.0.0.1:${other.port} is not granted`)
      assert.lengthOf(other.received, 0)
      assert.deepStrictEqual(proxy.refusals.map((refusal) => refusal.target), [`127.0.0.1:${other.port}`])
    })))

  it.live("forwards an absolute-form request in origin form without its proxy headers; refuses a Host that differs", () =>
    Effect.scoped(Effect.gen(function*() {
      const granted = yield* listener()
      const proxy = yield* DestinationProxy.listen(grantOf(`127.0.0.1:${granted.port}`))
      const authority = `127.0.0.1:${granted.port}`
      const reached = yield* exchange(
        proxy.path,
        `GET http://${authority}/path?q=1 HTTP/1.1\r\nHost: ${authority}\r\nProxy-Authorization: x\r\n\r\n`
      )
      assert.include(reached, "writ-reached")
      assert.strictEqual(String(granted.received[0]), `GET /path?q=1 HTTP/1.1\r\nhost: ${authority}\r\n\r\n`)
      for (
        const request of [
          `GET http://${authority}/ HTTP/1.1\r\nHost: 127.0.0.3:${granted.port}\r\n\r\n`,
          `GET http://${authority}/ HTTP/1.1\r\n\r\n`,
          `GET http://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\nHost: ${authority}\r\n\r\n`,
          `GET https://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\n\r\n`,
          `GET / HTTP/1.1\r\nHost: ${authority}\r\n\r\n`
        ]
      ) assert.match(yield* exchange(proxy.path, request), /^HTTP\/1\.1 403 Forbidden\r\n/, request)
      assert.lengthOf(granted.received, 1, "no refused request reached the listener")
    })))

  it.live("in a tunnel: passes a ClientHello naming the CONNECT host, refuses one naming another, or a plain Host that differs", () =>
    Effect.scoped(Effect.gen(function*() {
      const granted = yield* listener()
      const proxy = yield* DestinationProxy.listen(grantOf(`localhost:${granted.port}`))
      const connect = `CONNECT localhost:${granted.port} HTTP/1.1\r\n\r\n`
      const named = yield* realClientHello("localhost")
      assert.include(yield* exchange(proxy.path, connect, named), "writ-reached")
      assert.strictEqual(granted.received[0]![0], 0x16, "the ClientHello went through as it was")
      const other = yield* realClientHello("other.writ.test")
      assert.strictEqual(yield* exchange(proxy.path, connect, other), "HTTP/1.1 200 Connection Established\r\n\r\n")
      const host = Buffer.from(`GET / HTTP/1.1\r\nHost: other.writ.test:${granted.port}\r\n\r\n`)
      assert.strictEqual(yield* exchange(proxy.path, connect, host), "HTTP/1.1 200 Connection Established\r\n\r\n")
      assert.lengthOf(granted.received, 1)
      assert.deepStrictEqual(proxy.refusals.map((refusal) => refusal.reason), [
        "TLS SNI other.writ.test is not the CONNECT host",
        `a Host header (other.writ.test:${granted.port}) that is not the CONNECT host`
      ])
    })))

  it.live(
    "a tunnel to a server that speaks first is relayed once the client has sent nothing for a while",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const speaker = yield* listener(true)
        const proxy = yield* DestinationProxy.listen(grantOf(`127.0.0.1:${speaker.port}`))
        const seen = yield* exchange(proxy.path, `CONNECT 127.0.0.1:${speaker.port} HTTP/1.1\r\n\r\n`, Buffer.alloc(0))
        assert.include(seen, "writ-reached")
      })),
    30_000
  )
})
