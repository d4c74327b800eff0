/**
 * The sandbox's seccomp program, run by a classic-BPF interpreter written here from the kernel's semantics (the
 * opcodes the filter may use, nothing else): each syscall and argument the filter must refuse, and a sample of those
 * it must let through, give the verdicts the kernel would act on. The real filter is attacked in the containment suite.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Seccomp from "../../adapters/node/internal/seccomp.ts"

/** The verdict of the program on `struct seccomp_data` (nr, arch, args), as the kernel computes it. */
const evaluate = (
  program: Uint8Array,
  nr: number,
  args: ReadonlyArray<number> = [],
  arch: number = Seccomp.x86_64.auditArch
) => {
  const data = new DataView(new ArrayBuffer(64))
  data.setUint32(0, nr, true)
  data.setUint32(4, arch, true)
  args.forEach((arg, index) => data.setBigUint64(16 + index * 8, BigInt(arg), true))
  const code = new DataView(program.buffer, program.byteOffset, program.byteLength)
  let accumulator = 0
  for (let pc = 0, steps = 0; pc * 8 < program.length && steps < 4096; steps++) {
    const op = code.getUint16(pc * 8, true)
    const jt = code.getUint8(pc * 8 + 2)
    const jf = code.getUint8(pc * 8 + 3)
    const k = code.getUint32(pc * 8 + 4, true)
    switch (op) {
      case Seccomp.op.ldAbsW:
        assert.isTrue(k % 4 === 0 && k < 64, `load at ${k}`)
        accumulator = data.getUint32(k, true)
        pc++
        break
      case Seccomp.op.jeqK:
        pc += 1 + (accumulator === k ? jt : jf)
        break
      case Seccomp.op.jgeK:
        pc += 1 + (accumulator >= k ? jt : jf)
        break
      case Seccomp.op.jsetK:
        pc += 1 + ((accumulator & k) !== 0 ? jt : jf)
        break
      case Seccomp.op.retK:
        return k
      default:
        throw new Error(`opcode ${op.toString(16)} at ${pc}`)
    }
  }
  throw new Error("the program ran off its end")
}

const errno = (value: number) => (Seccomp.ret.errno | value) >>> 0
const { EAFNOSUPPORT, ENOSYS, EPERM } = Seccomp.errno
const nr = Seccomp.x86_64
const SOCK_STREAM = 1
const AF_INET = 2
const AF_INET6 = 10
const AF_NETLINK = 16
const SIGCHLD = 17
const CLONE_VM = 0x100
const CLONE_THREAD = 0x10000
const CLONE_NEWNS = 0x20000
const CLONE_NEWUSER = 0x10000000
const CLONE_NEWNET = 0x40000000

describe("the seccomp filter", () => {
  const program = Seccomp.program()
  const granted = Seccomp.program({ unixSockets: true })

  it("is whole struct sock_filter entries, and every jump lands inside the program", () => {
    for (const bytes of [program, granted]) {
      assert.strictEqual(bytes.length % 8, 0)
      const view = new DataView(bytes.buffer)
      const count = bytes.length / 8
      for (let pc = 0; pc < count; pc++) {
        const op = view.getUint16(pc * 8, true)
        if (op === Seccomp.op.retK || op === Seccomp.op.ldAbsW) continue
        assert.isBelow(pc + 1 + view.getUint8(pc * 8 + 2), count)
        assert.isBelow(pc + 1 + view.getUint8(pc * 8 + 3), count)
      }
      assert.strictEqual(view.getUint16(bytes.length - 8, true), Seccomp.op.retK, "it ends in a return")
    }
  })

  it("kills a process calling in under another architecture, and refuses the x32 syscall range", () => {
    const AUDIT_ARCH_I386 = 0x40000003
    assert.strictEqual(evaluate(program, 1, [], AUDIT_ARCH_I386), Seccomp.ret.killProcess)
    assert.strictEqual(evaluate(program, nr.socket | nr.x32Bit, [1]), errno(ENOSYS))
  })

  it("refuses AF_UNIX and AF_VSOCK sockets with EAFNOSUPPORT, and lets inet and netlink sockets through", () => {
    assert.strictEqual(evaluate(program, nr.socket, [Seccomp.family.unix, SOCK_STREAM]), errno(EAFNOSUPPORT))
    assert.strictEqual(evaluate(program, nr.socket, [Seccomp.family.vsock, SOCK_STREAM]), errno(EAFNOSUPPORT))
    // The kernel reads the family as an int: high bits set above it do not change what it is.
    assert.strictEqual(evaluate(program, nr.socket, [0x1_0000_0000 + Seccomp.family.unix]), errno(EAFNOSUPPORT))
    for (const family of [AF_INET, AF_INET6, AF_NETLINK]) {
      assert.strictEqual(evaluate(program, nr.socket, [family, SOCK_STREAM]), Seccomp.ret.allow)
    }
  })

  it("lets AF_UNIX through when granted, and still refuses AF_VSOCK", () => {
    assert.strictEqual(evaluate(granted, nr.socket, [Seccomp.family.unix, SOCK_STREAM]), Seccomp.ret.allow)
    assert.strictEqual(evaluate(granted, nr.socket, [Seccomp.family.vsock, SOCK_STREAM]), errno(EAFNOSUPPORT))
  })

  it("refuses namespace creation: unshare, setns and clone with any CLONE_NEW* flag; clone3 is ENOSYS", () => {
    assert.strictEqual(evaluate(program, nr.unshare, [CLONE_NEWUSER]), errno(EPERM))
    assert.strictEqual(evaluate(program, nr.unshare, [0]), errno(EPERM))
    assert.strictEqual(evaluate(program, nr.setns, [3, 0]), errno(EPERM))
    for (const flag of [CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, 0x02000000, 0x04000000, 0x08000000, 0x20000000]) {
      assert.strictEqual(evaluate(program, nr.clone, [SIGCHLD | flag]), errno(EPERM), flag.toString(16))
    }
    assert.strictEqual(evaluate(program, nr.clone3, [0, 88]), errno(ENOSYS))
  })

  it("lets fork and thread creation through clone", () => {
    assert.strictEqual(evaluate(program, nr.clone, [SIGCHLD]), Seccomp.ret.allow)
    assert.strictEqual(evaluate(program, nr.clone, [CLONE_VM | CLONE_THREAD | 0x3d0f00]), Seccomp.ret.allow)
  })

  it("refuses io_uring_setup, io_uring_enter and io_uring_register", () => {
    for (const call of [nr.ioUringSetup, nr.ioUringEnter, nr.ioUringRegister]) {
      assert.strictEqual(evaluate(program, call, [8, 0]), errno(EPERM))
    }
  })

  it("lets every other syscall through", () => {
    const refused = new Set<number>([
      nr.unshare,
      nr.setns,
      nr.clone3,
      nr.ioUringSetup,
      nr.ioUringEnter,
      nr.ioUringRegister
    ])
    for (let call = 0; call < 460; call++) {
      if (refused.has(call) || call === nr.socket || call === nr.clone) continue
      assert.strictEqual(evaluate(program, call, [Seccomp.family.unix, CLONE_NEWUSER]), Seccomp.ret.allow, `${call}`)
    }
  })
})
