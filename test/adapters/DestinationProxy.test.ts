import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as net from "node:net"
import * as tls from "node:tls"
import * as DestinationProxy from "../../adapters/node/internal/destinationProxy.ts"

/** A loopback listener recording what each connection sent first; it answers `writ-reached` (or speaks first). */
const listener = (speaksFirst = false, host = "127.0.0.1", port = 0) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: net.Server; readonly port: number; readonly received: Array<Buffer> }>(
      (resume) => {
        const received: Array<Buffer> = []
        const server = net.createServer((socket) => {
          socket.on("error", () => socket.destroy())
          if (speaksFirst) socket.write("writ-reached\n")
          socket.once("data", (chunk) => (received.push(chunk), socket.end("writ-reached\n")))
        })
        server.listen(port, host, () =>
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

  it("classes loopback, private, link-local, shared, unspecified and multicast addresses as internal", () => {
    for (
      const address of [
        "127.0.0.2",
        "10.1.2.3",
        "172.31.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0"
      ]
    ) assert.isTrue(DestinationProxy.isInternal(address), address)
    for (const address of ["::1", "::", "fe80::1", "fd00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:a9fe:a9fe"]) {
      assert.isTrue(DestinationProxy.isInternal(address), address)
    }
    for (const address of ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"]) {
      assert.isFalse(DestinationProxy.isInternal(address), address)
    }
  })

  it.live("a granted name is resolved once by its resolver and dialed at that address; one resolving to an internal address the grant does not name is refused", () =>
    Effect.scoped(Effect.gen(function*() {
      const granted = yield* listener(false, "127.0.0.2")
      const other = yield* listener(false, "127.0.0.3", granted.port)
      const port = granted.port
      // A resolver the test controls: `flip` answers 127.0.0.2 first, then 127.0.0.3 (a rebinding DNS server).
      const asked: Array<string> = []
      let flips = 0
      const answers: Record<string, () => ReadonlyArray<string>> = {
        "good.writ.test": () => ["127.0.0.2"],
        "rebind.writ.test": () => ["127.0.0.3"],
        "mixed.writ.test": () => ["127.0.0.2", "127.0.0.3"],
        "flip.writ.test": () => [flips++ === 0 ? "127.0.0.2" : "127.0.0.3"]
      }
      const resolve = (name: string) => (asked.push(name), Promise.resolve(answers[name]?.() ?? []))
      const proxy = yield* DestinationProxy.listen(grantOf(`*.writ.test:${port}`, `127.0.0.2:${port}`), { resolve })
      const connect = (name: string) => exchange(proxy.path, `CONNECT ${name}:${port} HTTP/1.1\r\n\r\n`)
      // No system resolver knows these names: reaching the listener means the proxy dialed the address it resolved.
      assert.include(yield* connect("good.writ.test"), "writ-reached")
      assert.include(yield* connect("flip.writ.test"), "writ-reached")
      assert.strictEqual(flips, 1, "resolved once for the connection it dialed")
      assert.lengthOf(granted.received, 2)
      const plain = yield* exchange(
        proxy.path,
        `GET http://good.writ.test:${port}/ HTTP/1.1\r\nHost: good.writ.test:${port}\r\n\r\n`
      )
      assert.include(plain, "writ-reached")
      for (const name of ["rebind.writ.test", "mixed.writ.test", "flip.writ.test", "unknown.writ.test"]) {
        assert.match(yield* connect(name), /^HTTP\/1\.1 403 Forbidden\r\n/, name)
      }
      assert.lengthOf(other.received, 0, "127.0.0.3 saw no connection")
      assert.lengthOf(granted.received, 3)
      assert.deepStrictEqual(proxy.refusals.map((refusal) => refusal.reason), [
        "rebind.writ.test resolved to 127.0.0.3, an internal address the grant does not name",
        "mixed.writ.test resolved to 127.0.0.3, an internal address the grant does not name",
        "flip.writ.test resolved to 127.0.0.3, an internal address the grant does not name",
        "unknown.writ.test did not resolve"
      ])
      assert.deepStrictEqual(asked, [
        "good.writ.test",
        "flip.writ.test",
        "good.writ.test",
        "rebind.writ.test",
        "mixed.writ.test",
        "flip.writ.test",
        "unknown.writ.test"
      ])
      // An ungranted name is refused before it is resolved at all.
      assert.match(yield* exchange(proxy.path, `CONNECT evil.test:${port} HTTP/1.1\r\n\r\n`), /^HTTP\/1\.1 403 /)
      assert.lengthOf(asked, 7)
    })))
})
